"""The Lewis et al. 2020 RAG model: marginalization (eq. 1, eq. 2), the model, decoding, checkpoints."""

from lewisrag.rag_model.model import RagModel, RagOutput, RagSettings, Retrieved, Tokenizers

__all__ = ["RagModel", "RagOutput", "RagSettings", "Retrieved", "Tokenizers"]
