"""The files of a dense index folder: their names, the FAISS file read and written atomically, the
manifest's search settings, and the checks that hold the files to the manifest on every load."""

from __future__ import annotations

import contextlib
import re
import warnings
from pathlib import Path

import faiss
import numpy as np

from lewisrag.data.io import InputError, LewisragWarning, atomic_path, read_json, write_json
from lewisrag.data.outputs import sweep_leftovers
from lewisrag.index import store
from lewisrag.index.dense.faiss_build import _faiss_reason, faiss_structure

EMBEDDINGS = "embeddings.npy"
FAISS_FILE = "index.faiss"
DEFAULT_SEARCH_PARAMS = {"nprobe": 16, "efSearch": 128}
# a Refine(...) index's base search returns this many times k candidates for the refine stage to rank
# exactly (FAISS's IndexRefine.k_factor): at FAISS's 1 the stage ranks only the k it already has, which
# changes no recall@k; 4, as `tuning.search`'s re-ranking depth is 4 k by default. Recorded as the
# manifest's `refine_k_factor` and applied on every load (indexes built before it: this)
REFINE_K_FACTOR = 4


def is_refine(faiss_index) -> bool:
    """A Refine(...) index: a base index's candidates ranked again by a second one (IndexRefine).

    >>> is_refine(faiss.index_factory(8, "IVF4,PQ2x4,Refine(Flat)")), is_refine(faiss.index_factory(8, "IVF4,PQ2x4"))
    (True, False)
    """
    return isinstance(faiss.downcast_index(faiss_index), faiss.IndexRefine)


def check_refine_k_factor(path: Path, manifest: dict) -> int:
    """The manifest's `refine_k_factor` (REFINE_K_FACTOR where it records none: built before it was),
    refused unless a whole number that FAISS's search can take (k_factor x k candidates are set
    aside a question: 10**12 asked for TiBs)."""
    value = manifest.get("refine_k_factor", REFINE_K_FACTOR)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
        raise InputError(path / store.MANIFEST, f"expected a whole number from 1 to 4096, got {value!r}",
                         field="refine_k_factor")
    return value


def _read_faiss(path: Path, mmap: bool):
    """The FAISS index in `path`, memory-mapped when `mmap` and the index type allows it.

    IO_FLAG_MMAP_IFC maps Flat, HNSW and IVF indexes (FAISS 1.15: no private copy, so N processes
    share one in the page cache); IO_FLAG_MMAP, tried next, is accepted by Flat and HNSW but copies
    them into private memory all the same (measured by scripts/bench_scale.py); a type that refuses
    both is read whole.
    """
    tries = [faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY, faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY] if mmap else []
    for flags in tries:
        with contextlib.suppress(RuntimeError):
            return faiss.read_index(str(path), flags)
    return faiss.read_index(str(path))


def check_vector_dtype(path: Path, manifest: dict, dtype: np.dtype) -> None:
    """The stored vectors' type (the .npy header's) against the manifest's `build.vector_dtype`:
    `export` and the reports read what the manifest says, and a file swapped for another index's of
    the same shape would pass every other check a load makes. Indexes built before the field was
    recorded have none and pass."""
    recorded = manifest.get("build", {}).get("vector_dtype")
    if recorded is not None and recorded != np.dtype(dtype).name:
        raise InputError(path / store.MANIFEST, f"says the stored vectors are {recorded}, {EMBEDDINGS} holds "
                         f"{np.dtype(dtype).name}: one of the two is damaged or was replaced; build the index again",
                         field="build.vector_dtype")


def check_faiss_factory(path: Path, manifest: dict, faiss_index) -> str:
    """The FAISS index read from `path` against the manifest's factory string, by their structures
    (`faiss_structure`; the empty index the factory makes takes milliseconds, whatever the corpus):
    `index tune`, `export` and the reports read what the manifest says the index is, and a file
    replaced by another kind's of the same size would pass every other check of its rows. Returns
    what was found, for `index verify`."""
    factory = manifest.get("faiss_factory")
    if factory is None:
        return f"{FAISS_FILE}'s kind not checked: the manifest records no FAISS factory"
    lists = max((int(count) for count in re.findall(r"IVF(\d+)", factory)), default=0)
    if lists > max(manifest["n_passages"], 1):  # FAISS would set aside every list first: 10**9 of them take 48 GB
        raise InputError(path / store.MANIFEST, f"says '{factory}', {lists} inverted lists for {manifest['n_passages']} "
                         "passages, which no build trains: the manifest is damaged or was edited", field="faiss_factory")
    try:
        fresh = faiss.index_factory(int(manifest["dim"]), factory, faiss.METRIC_INNER_PRODUCT)
    except (RuntimeError, MemoryError) as e:
        raise InputError(path / store.MANIFEST, f"'{factory}' is no FAISS factory string FAISS builds "
                         f"({_faiss_reason(e)}): the manifest is damaged or was edited", field="faiss_factory") from None
    want, got = faiss_structure(fresh), faiss_structure(faiss_index)
    if want != got:
        raise InputError(path / store.MANIFEST, f"says '{factory}' ({', '.join(want)}), but {FAISS_FILE} holds "
                         f"{', '.join(got)}: one of the two is damaged or was replaced; build the index again",
                         field="faiss_factory")
    return f"{FAISS_FILE} is the '{factory}' index the manifest says ({', '.join(got)})"


def _reset_if_stale(partial: Path, plan: dict) -> None:
    """Keep a previous build's shards only if they encode the same passages with the same encoder.

    A plan file that cannot be read (a build killed in an older version, a disk that filled up) is
    treated like a different plan: the partial build starts over instead of wedging every rerun.
    Finished shards thrown away are warned of, naming what differs: another --mixed-precision (a GPU
    build resumed on the CPU) or --shard-size looked like a resume and encoded everything again. A
    plan that differs in precision alone still starts over: one index holds vectors of one precision.
    """
    plan_file = partial / "plan.json"
    old = None
    with contextlib.suppress(InputError):
        old = read_json(plan_file) if plan_file.is_file() else None
    if old == plan:
        # a killed writer's temporary files would otherwise move into the finished index
        for folder in (partial, partial / "shards"):
            sweep_leftovers(folder)
        return
    finished = len(list((partial / "shards").glob("*.done"))) if (partial / "shards").is_dir() else 0
    if finished:
        warnings.warn(LewisragWarning(f"{partial}: the {finished} finished shard(s) of an earlier build are discarded and "
                                      f"every passage is encoded again: {_plan_change(old, plan)}"), stacklevel=2)
    store.reset_partial(partial)
    write_json(plan_file, plan)


def _plan_change(old: object, plan: dict) -> str:
    """What differs between an earlier build's plan (`old`; None: unreadable) and this one's.

    >>> _plan_change({"shard_size": 4096, "mixed_precision": "bf16"}, {"shard_size": 512, "mixed_precision": "no"})
    'its plan differs in shard_size (4096, now 512), mixed_precision (bf16, now no)'
    """
    if not isinstance(old, dict):
        return "its plan.json cannot be read"

    def shown(value: object) -> str:  # a hash or fingerprint by its first 12 characters
        return "none" if value is None else f"{value[:12]}..." if isinstance(value, str) and len(value) > 24 else str(value)

    changed = [f"{k} ({shown(old.get(k))}, now {shown(plan.get(k))})" for k in (*plan, *(k for k in old if k not in plan))
               if old.get(k) != plan.get(k)]
    return f"its plan differs in {', '.join(changed)}"


def _write_faiss_atomic(index, path: Path) -> None:
    """Write `index` to `path` through a temporary file beside it, renamed on only once whole.

    FAISS reports a failed write (a full disk) as RuntimeError, not the OSError the CLI names in one
    line: raised as one line naming `path` (`faiss_write_error`), never a traceback."""
    with atomic_path(path) as tmp:
        try:
            faiss.write_index(index, str(tmp))
        except RuntimeError as e:
            raise faiss_write_error(path, e) from None


def faiss_write_error(path: str | Path, e: RuntimeError) -> InputError:
    """The one-line error of a `faiss.write_index` into `path` that failed with `e`: FAISS's cause (the
    file it wrote and the OS's reason) without its "Error: '<check>' failed: " prefix.

    >>> print(faiss_write_error("IDX.partial/index.faiss", RuntimeError("Error in void faiss::write_index(const Index*, "
    ...       "IOWriter*, int) at index_write.cpp:499: Error: 'ret == (size * 4)' failed: write error in /x.tmp: "
    ...       "4051 != 3200000 (No space left on device)")))
    IDX.partial/index.faiss: FAISS could not write the index: write error in /x.tmp: 4051 != 3200000 (No space left on device)
    """
    return InputError(path, f"FAISS could not write the index: {_faiss_reason(e).split(' failed: ', 1)[-1]}")
