"""Passage indexes: BM25 (bm25s) and dense (DPR + FAISS), one directory each with a manifest."""

from lewisrag.index.search import Hit, open_retriever, retrieval_recall

__all__ = ["Hit", "open_retriever", "retrieval_recall"]
