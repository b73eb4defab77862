#!/usr/bin/env bash
# One call on a lent GPU machine: the measurements the README's GPU table still lacks, in about
# eight to nine minutes, every number written under $OUT as it comes (a call cut short keeps what it had).
#
#   bash scripts/gpu_session.sh                    # on the GPU machine, from the repository root
#   BENCH_ARGS="--preset check --device cpu --reps 1 --encode 512 --steps-token 6" SMOKE_ARGS="--device cpu" \
#     bash scripts/gpu_session.sh                  # dry run
#
# 1. the machine: GPU, driver, CPU model and flags, library versions (machine.txt); then
#    `reproduce --preset base` and `--preset tiny` with `--device cuda` at toy sizes, every stage on
#    the GPU, tiny with Jeopardy and FEVER (its verifier) too (smoke.json: scripts/gpu_smoke.py, a minute or two);
# 2. search_scale: `train rag --search-device`'s search at 21,015,324 random 768-d vectors, float32
#    and float16, no corpus built (search_scale.json): the 21M figure docs/scale.md extrapolates;
# 3. train_token + same_weights: the bart-large step with its retrieval split into search, the
#    question encoder and the rest (the 48 ms not yet profiled), and the same-weights comparison
#    with transformers that the 1.3x target is read from, then the step under torch.profiler without
#    the split's synchronisations: device busy share, kernel launches, the top operators, the
#    same-weights step with `train rag --compile` (torch.compile: a minute or two of compiling), and
#    the closed-book stage on the GPU (bf16 steps at batch 128, answers from the question alone), and
#    lewisrag's same-weights step alone at the batch and twice it, eager and compiled, for the MFU
#    target; the last two are the first parts --budget skips when time runs short (train.json).
# The machine has no model hub and no package index: it runs with the Python it has, lewisrag
# taken from this checkout.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu-session}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" XLA_PYTHON_CLIENT_PREALLOCATE=false
PY=${PYTHON:-python}
read -r -a ARGS <<< "${BENCH_ARGS:-}"  # appended last: they override the defaults above
read -r -a SMOKE <<< "${SMOKE_ARGS:-}"

{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>/dev/null || echo "no nvidia-smi"
  lscpu | grep -E "^CPU\(s\)|Model name|^CPU family|^Model:|Flags"
  "$PY" -c "import faiss, numpy, pyarrow, torch, transformers; print('transformers', transformers.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__, 'pyarrow', pyarrow.__version__, 'faiss', faiss.__version__)"
} > "$OUT/machine.txt" 2>&1

status=0
"$PY" scripts/gpu_smoke.py --out "$OUT/smoke.json" "${SMOKE[@]}" > "$OUT/smoke.log" 2>&1 || status=1
tail -n 3 "$OUT/smoke.log"
"$PY" scripts/bench_gpu.py --parts search_scale --json "$OUT/search_scale.json" "${ARGS[@]}" 2>&1 | tee "$OUT/search_scale.log" || status=1
"$PY" scripts/bench_gpu.py --budget 240 --encode 16384 --steps-token 60 --parts matmul,train_token,same_weights,profile,compiled,closed_book,mfu \
  --json "$OUT/train.json" "${ARGS[@]}" 2>&1 | tee "$OUT/train.log" || status=1
exit $status
