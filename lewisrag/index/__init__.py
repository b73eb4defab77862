"""Passage indexes: BM25 (bm25s) and dense (DPR + FAISS), one directory each with a manifest."""

from lewisrag.index.search import FusedRetriever, Hit, open_retriever, retrieval_recall

__all__ = ["FusedRetriever", "Hit", "open_retriever", "retrieval_recall"]
