"""lewisrag: train the original RAG (Lewis et al. 2020), swap its index, hold it beside
prompt-stitching RAG, and evaluate RAG answers layer by layer."""

import os

# lewisrag never uses JAX, but a library beside it may initialise JAX where it is installed, and
# JAX then takes 75% of the GPU's memory at once (seen on an H200: a training run beside it ran out
# of memory with torch holding a quarter of the card). The environment's own setting wins.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

__version__ = "0.1.0"
