"""The Lewis et al. 2020 RAG model: marginalization, the model, decoding and transformers interop."""

from lewisrag.rag_model.model import RagModel, RagOutput, RagSettings, Retrieved, Tokenizers

__all__ = ["RagModel", "RagOutput", "RagSettings", "Retrieved", "Tokenizers"]
