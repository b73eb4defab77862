"""lewisrag: train the original RAG (Lewis et al. 2020), swap its index, hold it beside
prompt-stitching RAG, and evaluate RAG answers layer by layer."""

__version__ = "0.1.0"
