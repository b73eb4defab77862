"""Every stage of `lewisrag reproduce` on one device, at toy sizes: the check that the GPU paths run,
in a minute or two, before a long run trusts them.

    python scripts/gpu_smoke.py --out smoke.json                      # on the GPU; exits 2 without one
    python scripts/gpu_smoke.py --device cpu --out smoke.json         # the same runs on the CPU

`base`: `--preset base` (index encoding, RAG-Token, RAG-Sequence, the closed-book run, the test
split's answers, the swap matrix) on assets built here in the hub's layouts, as the offline tests
build them (tests/hf_layouts.py): a tiny DPR pair and BART, nq_open-schema Parquet QA files,
wiki_dpr-schema passages (snapshot A as Parquet, snapshot B with every leader renamed, as JSONL) and
questions about each snapshot. `tiny`: `--preset tiny --tasks qa,jeopardy,fever` on the built-in world
(the generator pretrained, DPR from scratch, both RAG runs and the frozen one, closed book, ablations,
the swap, the stitched reader, the comparison, then Jeopardy and FEVER with its verifier). `cut`:
`index cut` over snapshot A as the hub's Parquet shards with the pair's stored vectors, on the
device and on the CPU: the same passages must be kept.
It writes one JSON object per preset: the exit code and wall time, each stage's time from
timings.json, the systems' exact match (toy models: the numbers only show that answers came back),
the device the run's configs recorded, and the peak GPU memory.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # hf_layouts: the transformers folder builder the offline tests use

sys.path.insert(0, str(ROOT / "scripts"))  # bench_gpu: the --device rules both scripts share

from bench_gpu import device_arg, device_name  # noqa: E402
from hf_layouts import bart, dpr_pair  # noqa: E402


def _name(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3)).capitalize()


def build_assets(root: Path, countries: int = 30, seed: int = 0) -> dict:
    """Made-up countries, two passages each, a leader question per country; the files `--preset base` reads."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    names = sorted({_name(rng) for _ in range(3 * countries)})[:countries]
    passages, questions = [], []
    for i, name in enumerate(names):
        leader = f"{_name(rng)} {_name(rng)}"
        passages += [{"id": f"c{i}-0", "title": name, "text": f"{name} is a country. Its leader is {leader}."},
                     {"id": f"c{i}-1", "title": name, "text": f"The capital of {name} is {_name(rng)}, founded in {1800 + i}."}]
        questions.append({"question": f"Who is the leader of {name}?", "answer": [leader]})
    texts = [f"{p['title']} {p['text']}" for p in passages] + [q["question"] for q in questions]
    files = {**dpr_pair(root, texts), "bart": bart(root, texts)}
    qa = pa.schema([("question", pa.string()), ("answer", pa.list_(pa.string()))])
    for split, rows in (("train", questions), ("dev", questions[:6]), ("test", questions[:6])):
        pq.write_table(pa.Table.from_pylist(rows, schema=qa), root / f"{split}.parquet")
        files[split] = root / f"{split}.parquet"
    pq.write_table(pa.Table.from_pylist(passages), root / "psgs_a.parquet")
    renamed = [{**p, "text": p["text"].replace("Its leader is", "Its new leader is Ren")} for p in passages]
    (root / "psgs_b.jsonl").write_text("".join(json.dumps(p) + "\n" for p in renamed))
    (root / "qa_a.jsonl").write_text("".join(json.dumps({"question": q["question"], "answers": q["answer"]}) + "\n"
                                             for q in questions[:4]))
    (root / "qa_b.jsonl").write_text("".join(json.dumps({"question": q["question"], "answers": ["Ren"]}) + "\n"
                                             for q in questions[:4]))
    return {**files, "passages": root / "psgs_a.parquet", "passages_b": root / "psgs_b.jsonl",
            "questions_a": root / "qa_a.jsonl", "questions_b": root / "qa_b.jsonl"}


def _run(flags: list[str], run: Path, device: str) -> dict:
    """`lewisrag` with `flags` in this process; what came of it."""
    from typer.testing import CliRunner

    from lewisrag.cli import app

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    r = CliRunner().invoke(app, flags)
    out = {"exit_code": r.exit_code, "wall_s": time.perf_counter() - t0, "command": " ".join(flags[:4]) + " ...",
           "peak_gpu_gb": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0}
    if r.exit_code != 0:
        out["error"] = (r.output or "")[-3000:] + ("".join(map(str, r.exc_info[1:2])) if r.exc_info else "")
        return out
    results = json.loads((run / "results.json").read_text())
    out["timings"] = json.loads((run / "timings.json").read_text())
    out["exact_match"] = {s: v["exact_match"] for s, v in results["qa"].items()}
    out["knowledge_update"] = results.get("knowledge_update")
    out["trained_on"] = {"rag_token": "cpu" if json.loads((run / "rag_token" / "config.json").read_text())["cpu"]
                         else "accelerate's device",
                         "closed_book": json.loads((run / "closed_book" / "config.json").read_text())["device"],
                         "preset": json.loads((run / "config.json").read_text())["preset"]["device"]}
    for part in ("generator", "fever/generator"):  # pretrained here, and FEVER's verifier (tiny only)
        if (run / part / "recipe.json").is_file():
            out["trained_on"][part] = json.loads((run / part / "recipe.json").read_text())["config"].get("device")
    return out


def cut(a: dict, root: Path, device: str) -> dict:
    """`index cut` of snapshot A (as two Parquet shards with the pair's context vectors) on `device` and on
    the CPU; whether both kept the same passages (the products on a GPU round differently, so the
    tiny encoder's near ties could part them: then `same_passages` is false and the ids say where)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lewisrag.index.encoders import encode_texts, load_context_encoder

    rows = pq.read_table(a["passages"]).to_pylist()
    ctx = load_context_encoder(a["context"])
    vectors = encode_texts(ctx.ctx_encoder, ctx.tokenizer, [(r["title"], r["text"]) for r in rows],
                           max_length=int(ctx.meta["max_length"]))
    shards = root / "wiki_dpr" / "data" / "psgs_w100" / "nq"
    shards.mkdir(parents=True)
    half = len(rows) // 2
    for k, part in enumerate((rows[:half], rows[half:])):
        table = pa.Table.from_pylist([{**r, "embeddings": vectors[i + k * half].tolist()} for i, r in enumerate(part)])
        pq.write_table(table, shards / f"train-{k:05d}-of-00002.parquet")
    out, kept = {}, {}
    for role, where in (("device", device), ("cpu", "cpu")):  # on the CPU alone: the run twice, the same cut
        folder = root / f"cut-{role}"
        flags = ["index", "cut", "--passages", str(shards), "--encoder", str(a["question"]), "--context-encoder",
                 str(a["context"]), "--questions", str(a["train"]), "--top", "3", "--max-passages", "40", "--device",
                 where, "--out", str(folder), "--json"]
        from typer.testing import CliRunner

        from lewisrag.cli import app

        t0 = time.perf_counter()
        r = CliRunner().invoke(app, flags)
        out[role] = {"device": where, "exit_code": r.exit_code, "wall_s": time.perf_counter() - t0}
        if r.exit_code != 0:
            out[role]["error"] = (r.output or "")[-3000:] + ("".join(map(str, r.exc_info[1:2])) if r.exc_info else "")
            continue
        out[role]["cut"] = json.loads((folder / "cut.json").read_text())
        kept[role] = pq.read_table(folder / "passages.parquet", columns=["id"]).column("id").to_pylist()
    codes = [v["exit_code"] for v in out.values()]
    out["exit_code"] = next((c for c in codes if c), 0)
    if len(kept) == 2:
        out["same_passages"] = kept["device"] == kept["cpu"]
        out["only_on_device"] = sorted(set(kept["device"]) - set(kept["cpu"]))
    return out


PRESETS = ("base", "tiny", "cut")  # --presets' names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", type=device_arg, default="cuda", help="cuda (default: the first visible GPU; cuda:0 the same) or cpu")
    ap.add_argument("--presets", default="base,tiny,cut", help="comma-separated: base, tiny, cut")
    ap.add_argument("--steps", type=int, default=3, help="base: RAG and closed-book training steps")
    ap.add_argument("--out", type=Path, required=True, help="the JSON file written")
    args = ap.parse_args()
    presets = args.presets.split(",")
    if unknown := [p for p in presets if p not in PRESETS]:  # before a preset has spent the GPU's minutes
        ap.error(f"--presets: unknown {', '.join(map(repr, unknown))} (of {', '.join(PRESETS)})")
    if args.steps < 1:
        ap.error(f"--steps: must be at least 1, got {args.steps}")
    if args.out.is_dir() or not args.out.parent.is_dir():  # as bench_gpu.py's --json: before the presets run, not after
        ap.error(f"--out: {args.out} cannot be written: {'a folder' if args.out.is_dir() else 'its folder does not exist'}")
    if args.device.type == "cuda" and not torch.cuda.is_available():  # as bench_gpu.py: nothing measured is exit 2
        print("no CUDA device: nothing to check (--device cpu runs the checks on the CPU)", file=sys.stderr)
        sys.exit(2)
    args.device = device_name(args.device, ap.error)  # "cpu" or "cuda", as the runs and the records compare it
    results = {"device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for preset in presets:
            run = tmp / f"run-{preset}"
            if preset == "cut":
                results[preset] = cut(build_assets(tmp / "cut-assets"), tmp / "cut", args.device)
                args.out.write_text(json.dumps(results, indent=1, default=str))
                continue
            if preset == "base":
                a = build_assets(tmp / "assets")
                flags = ["reproduce", "--preset", "base", "--out", str(run), "--device", args.device, "--steps",
                         str(args.steps), "--question-encoder", str(a["question"]), "--context-encoder", str(a["context"]),
                         "--generator", str(a["bart"]), "--train", str(a["train"]), "--dev", str(a["dev"]), "--test",
                         str(a["test"]), "--passages", str(a["passages"]), "--passages-b", str(a["passages_b"]),
                         "--questions-a", str(a["questions_a"]), "--questions-b", str(a["questions_b"]), "--json"]
            elif preset == "tiny":
                flags = ["reproduce", "--preset", "tiny", "--out", str(run), "--device", args.device, "--tasks",
                         "qa,jeopardy,fever", "--json"]
            else:
                raise AssertionError(preset)  # PRESETS names no other
            results[preset] = _run(flags, run, args.device)
            args.out.write_text(json.dumps(results, indent=1, default=str))  # what came so far, if a later one hangs
    print(json.dumps(results, indent=1, default=str))
    if any(v["exit_code"] != 0 for k, v in results.items() if k != "device"):
        sys.exit(1)


if __name__ == "__main__":
    main()
