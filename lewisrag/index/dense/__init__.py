"""Dense passage index: a frozen DPR context encoder and FAISS with inner product (MIPS).

The stored passage vectors (`embeddings.npy`) are kept beside the FAISS index and opened
memory-mapped: a RAG model scores retrieved documents as q·d against exactly these vectors, so
the gradient reaches the question encoder and never the index; and N training processes on one
machine share one copy of them in the page cache instead of N copies in RAM.

The package, one concern a module, each importing only those before it: `faiss_build` (the factory
string checked, quantizers trained on a sample read in blocks, vectors added), `files` (the folder's
file names, the FAISS file read and written, the checks a load holds them to), `spot_check` (stored
vectors against fresh encodings), `build` (`DenseBuildConfig`, `build_dense_index`) and `index`
(`DenseIndex`, `write_dense_index`). A test that patches a name patches it in the module that looks
it up (`dense.faiss_build.ADD_ROWS`, `dense.index.SEARCH_ROWS`), not here.
"""

from lewisrag.index.dense.build import (VECTOR_DTYPES, DenseBuildConfig, _copy_stored, build_dense_index,
                                        check_build_config, check_finite, check_fits)
from lewisrag.index.dense.faiss_build import (ADD_ROWS, TRAIN_PER_LIST, TRANSFORM_SAMPLE, TWO_LEVEL_LISTS,
                                              _faiss_reason, _ivf_or_none, _new_index, _no_polysemous_training,
                                              _transforms, build_faiss, check_factory, faiss_structure, row_reader,
                                              train_faiss, training_rows, training_sample_size, two_level_centroids)
from lewisrag.index.dense.files import (DEFAULT_SEARCH_PARAMS, EMBEDDINGS, FAISS_FILE, REFINE_K_FACTOR, _read_faiss,
                                        _write_faiss_atomic, check_faiss_factory, check_refine_k_factor,
                                        check_vector_dtype, is_refine)
from lewisrag.index.dense.index import (COMPRESSED_ONLY, DEVICE_DTYPES, HALF_CANDIDATES, SEARCH_ROWS, DenseIndex,
                                        advise_random, use_blas_for_small_batches, write_dense_index)
from lewisrag.index.dense.spot_check import (MAX_NORM_RATIO, MIN_COSINE, SPOT_CHECK_ROWS, check_stored_embeddings,
                                             compare_encodings, spot_check_rows)

__all__ = ["ADD_ROWS", "COMPRESSED_ONLY", "DEFAULT_SEARCH_PARAMS", "DEVICE_DTYPES", "EMBEDDINGS", "FAISS_FILE",
           "HALF_CANDIDATES", "MAX_NORM_RATIO", "MIN_COSINE", "REFINE_K_FACTOR", "SEARCH_ROWS", "SPOT_CHECK_ROWS",
           "TRAIN_PER_LIST", "TRANSFORM_SAMPLE", "TWO_LEVEL_LISTS", "VECTOR_DTYPES", "DenseBuildConfig", "DenseIndex",
           "advise_random", "build_dense_index", "build_faiss", "check_build_config", "check_factory",
           "check_faiss_factory", "check_finite", "check_fits", "check_refine_k_factor", "check_stored_embeddings",
           "check_vector_dtype", "compare_encodings", "faiss_structure", "is_refine", "row_reader", "spot_check_rows",
           "train_faiss", "training_rows", "training_sample_size", "two_level_centroids", "use_blas_for_small_batches",
           "write_dense_index"]
__all__ += ["_copy_stored", "_faiss_reason", "_ivf_or_none", "_new_index", "_no_polysemous_training", "_read_faiss",
            "_transforms", "_write_faiss_atomic"]  # reached by lewisrag.index.verify and tests
