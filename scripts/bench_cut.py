"""`lewisrag index cut` against the corpus's size: wall time and peak memory, to check what the
21 M-passage cut would need without a copy of wiki_dpr.

    .venv/bin/python scripts/bench_cut.py [--sizes 200000,2000000] [--questions 2000] [--top 100] [--json]
    .venv/bin/python scripts/bench_cut.py --quick      # 20k and 40k passages: a smoke test

For each size N it writes a synthetic corpus in wiki_dpr's schema as the hub keeps it (Parquet shards
`train-0000K-of-0000M.parquet` with id, text, title and 768 float32 `embeddings`; SHARD_ROWS rows a
shard, row groups of GROUP_ROWS), then runs the real command in a fresh process, as a user would:

    lewisrag index cut --passages DIR --encoder Q --context-encoder C --questions F
                       --max-passages N/10 --top TOP --device cpu --out OUT --json

and reports its wall time, its peak resident memory sampled from /proc (all, private, and the
pages of mapped files), and the search's rate (2 x 768 FLOPs, 768 multiply-adds, per question and
passage over the wall time: everything else, the Parquet decoding included, counts against it). The corpus is
read in blocks (`cut.SEARCH_ROWS`); what grows with N is the ids' duplicate check while the corpus
is opened and a boolean per passage for the fill, while the scores, the question vectors and the
top rows depend on the questions alone. So the peak RSS should barely move between sizes, and the
wall time grow with N.

The corpus. The command spot-checks 8 stored vectors against fresh encodings by the context
encoder (`index.dense.spot_check_rows`), so those 8 rows hold the context encoder's real vectors
(a random DPR pair of DPR-base's width, one layer); every other row's vector is drawn at random,
which is all the search's cost depends on. The texts are random words; the questions ask for one
of them, so the answer recall in cut.json is a number, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # hf_layouts: the transformers folder builder the offline tests use

from hf_layouts import dpr_pair  # noqa: E402

DIM = 768
SHARD_ROWS = 500_000  # rows a shard: a 2 M-passage corpus is four shards, read as one table
GROUP_ROWS = 10_000  # rows per Parquet row group (about 31 MB of vectors)
WORDS = 60  # words a passage: wiki_dpr's passages are 100 words


def _vocabulary(n: int = 5000) -> np.ndarray:
    rng = np.random.default_rng(7)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return np.array(["".join(rng.choice(letters, size=rng.integers(3, 9))) for _ in range(n)])


def write_corpus(folder: Path, n: int, encoders: dict, seed: int = 0) -> None:
    """`n` passages in wiki_dpr's schema as Parquet shards; the spot-checked rows hold real vectors."""
    from lewisrag.index.dense import spot_check_rows
    from lewisrag.index.encoders import load_context_encoder

    ctx = load_context_encoder(encoders["context"])
    vocab, rng = _vocabulary(), np.random.default_rng(seed)
    checked = set(spot_check_rows(n))
    shards = -(-n // SHARD_ROWS)
    folder.mkdir(parents=True)
    schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("title", pa.string()),
                        ("embeddings", pa.list_(pa.float32()))])
    for k in range(shards):
        lo, hi = k * SHARD_ROWS, min(n, (k + 1) * SHARD_ROWS)
        with pq.ParquetWriter(folder / f"train-{k:05d}-of-{shards:05d}.parquet", schema) as writer:
            for start in range(lo, hi, GROUP_ROWS):
                rows = np.arange(start, min(hi, start + GROUP_ROWS))
                words = vocab[rng.integers(0, len(vocab), size=(len(rows), WORDS))]
                texts = [" ".join(w) for w in words]
                titles = [f"{w[0]} {w[1]}" for w in words]
                vectors = rng.standard_normal((len(rows), DIM), dtype=np.float32)
                for i, r in enumerate(rows):
                    if int(r) in checked:
                        vectors[i] = _encode(ctx, [(titles[i], texts[i])])[0]
                offsets = pa.array(np.arange(0, (len(rows) + 1) * DIM, DIM, dtype=np.int32))
                batch = pa.record_batch([pa.array([str(r + 1) for r in rows]), pa.array(texts), pa.array(titles),
                                         pa.ListArray.from_arrays(offsets, pa.array(vectors.ravel()))], schema=schema)
                writer.write_batch(batch, row_group_size=GROUP_ROWS)


def _encode(ctx, pairs):
    from lewisrag.index.encoders import encode_texts

    return encode_texts(ctx.ctx_encoder, ctx.tokenizer, pairs, batch_size=len(pairs), max_length=int(ctx.meta.get("max_length", 256)))


def write_questions(path: Path, n: int, seed: int = 1) -> None:
    vocab, rng = _vocabulary(), np.random.default_rng(seed)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            a, b, c = vocab[rng.integers(0, len(vocab), size=3)]
            f.write(json.dumps({"id": f"q{i}", "question": f"what is the {a} of {b}?", "answers": [c]}) + "\n")


def run_cut(root: Path, corpus: Path, questions: Path, encoders: dict, n: int, top: int) -> dict:
    """The command in a fresh process: its record, wall time and peak memory."""
    out = root / "cut"
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "lewisrag", "index", "cut", "--passages", str(corpus),
               "--encoder", str(encoders["question"]), "--context-encoder", str(encoders["context"]),
               "--questions", str(questions), "--max-passages", str(max(1, n // 10)), "--top", str(top),
               "--device", "cpu", "--out", str(out), "--json"]
    t = time.perf_counter()
    with (root / "cut.log").open("w+") as log:  # its progress: a pipe left unread would stall it when full
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT)
        peaks = _watch(child)
        stdout = child.communicate()[0]
        wall = time.perf_counter() - t
        if child.returncode != 0:
            log.seek(0)
            raise SystemExit(f"index cut failed at {n} passages: {log.read()[-2000:]}")
    done = {"wall_s": wall, **peaks}
    record = json.loads(stdout)
    flop = 2 * DIM * n * record["questions"]
    return {"passages": n, "questions": record["questions"], "top": top, "max_passages": record["max_passages"],
            "wall_s": round(done["wall_s"], 1), "peak_rss_mb": done["VmRSS"], "peak_anon_mb": done["RssAnon"],
            "peak_file_mb": done["RssFile"],
            "search_gflops_over_wall": round(flop / done["wall_s"] / 1e9, 1),
            "corpus_gb": round(sum(f.stat().st_size for f in corpus.iterdir()) / 1e9, 2),
            "kept": {"retrieved": record["retrieved"], "random": record["random"], "full_depth": record["full_depth"]}}


def _watch(child: subprocess.Popen, every: float = 0.05) -> dict:
    """Peak resident memory of the running `child` in MB, sampled from /proc: all of it (VmRSS), its
    private memory (RssAnon: what it allocated) and its mapped files' pages (RssFile, which the kernel
    can drop; a memory-mapped input shows here as it is read)."""
    peaks = dict.fromkeys(("VmRSS", "RssAnon", "RssFile"), 0)
    while child.poll() is None:
        try:
            status = Path(f"/proc/{child.pid}/status").read_text()
        except OSError:
            break
        for line in status.splitlines():
            key, _, value = line.partition(":")
            if key in peaks:
                peaks[key] = max(peaks[key], int(value.split()[0]) // 1024)
        time.sleep(every)
    return peaks


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="200000,2000000", help="corpus sizes, comma-separated")
    ap.add_argument("--questions", type=int, default=2000)
    ap.add_argument("--top", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="20k and 40k passages, 200 questions")
    ap.add_argument("--workdir", help="where corpora are written, a new or empty folder, kept after (default: a "
                                      "temporary folder, removed after)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        args.sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        args.sizes = [0]
    for flag, ok in (("--sizes", min(args.sizes) >= 1), ("--questions", args.questions >= 1), ("--top", args.top >= 1)):
        if not ok:
            ap.error(f"{flag}: must be a positive whole number (--sizes: comma-separated)")
    if args.workdir:  # the benchmark writes and deletes its own files there: never in a folder already in use
        workdir = Path(args.workdir).resolve()  # the command runs from the repository root
        if workdir.exists() and (not workdir.is_dir() or any(workdir.iterdir())):
            ap.error(f"--workdir: {args.workdir} is not a new or empty folder; the benchmark would replace its files")
        args.workdir = str(workdir)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the DPR pair's save and load bars
    sizes = [20_000, 40_000] if args.quick else args.sizes
    n_questions = 200 if args.quick else args.questions
    root = Path(args.workdir or tempfile.mkdtemp(prefix="bench_cut_"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        vocab = _vocabulary()
        encoders = dpr_pair(root / "dpr", [" ".join(vocab[i:i + 20]) for i in range(0, len(vocab), 20)],
                            hidden=DIM, layers=1, heads=12, vocab_size=2000)
        questions = root / "questions.jsonl"
        write_questions(questions, n_questions)
        rows = []
        for n in sizes:
            corpus = root / f"corpus_{n}"
            t = time.perf_counter()
            write_corpus(corpus, n, encoders)
            written = time.perf_counter() - t
            rows.append({**run_cut(root, corpus, questions, encoders, n, args.top), "write_corpus_s": round(written, 1)})
            shutil.rmtree(corpus)
            print(json.dumps(rows[-1]) if args.json else
                  f"{n:>10,} passages ({rows[-1]['corpus_gb']} GB): {rows[-1]['wall_s']} s, peak RSS "
                  f"{rows[-1]['peak_rss_mb']} MB (private {rows[-1]['peak_anon_mb']}, mapped files "
                  f"{rows[-1]['peak_file_mb']}), {rows[-1]['search_gflops_over_wall']} GFLOP/s over the wall", flush=True)
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    if not args.json:
        print(f"CPU: {_cpu()}; threads: {os.cpu_count()}")


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
