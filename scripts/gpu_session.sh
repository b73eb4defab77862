#!/usr/bin/env bash
# One call on a lent GPU machine: the measurements the README's GPU table still lacks, in at most
# SESSION_S seconds (560 unless told: a 600 s call less the wheels' install), every number written
# under $OUT as it comes (a call cut short keeps what it had).
#
#   bash scripts/gpu_session.sh                    # on the GPU machine, from the repository root
#   BENCH_ARGS="--preset check --device cpu --reps 1 --encode 512 --passages 3000 --steps-token 6 --budget 1e9" \
#     SMOKE_ARGS="--device cpu" SESSION_S=100000 bash scripts/gpu_session.sh   # dry run on the CPU (tests/test_bench_scripts.py's)
#   COMPILED_ONLY=1 bash scripts/gpu_session.sh    # a call of their own for step 3's compiled mfu modes (compiled.json)
#
# Exit status: 0 when the smoke run and every bench part ran; 1 when one failed, ran out of its time
# or found none left (smoke.log, train.log and same_weights.log under $OUT say what, compiled.log with
# COMPILED_ONLY; the JSON files keep the parts that did run); 2 when there is no CUDA device and no
# dry run on the CPU was asked for (--device cpu in both BENCH_ARGS and SMOKE_ARGS, as above; with
# COMPILED_ONLY in BENCH_ARGS alone), when COMPILED_ONLY is set and MFU_COMPILED empty (nothing to
# measure), or when the Python cannot import what lewisrag needs (the image lacks faiss, datasets,
# bm25s, evaluate and rouge-score unless the .whl wheels were installed): nothing is measured then,
# and machine.txt alone is written.
#
# Each step runs under `timeout` (its own limit, or what is left of SESSION_S if less), so that a hang
# in one cannot take the call; a bench step's `--budget` stops its parts (and its mfu modes) from
# starting late. In order of what a short call should keep:
# 1. the machine: GPU, driver, CPU model and flags, library versions (machine.txt); then
#    `reproduce --preset base` and `--preset tiny` with `--device cuda` at toy sizes, every stage on
#    the GPU, tiny with Jeopardy and FEVER (its verifier) too, and `index cut` on the GPU against the
#    CPU (smoke.json: scripts/gpu_smoke.py, a minute or two; at most 180 s);
# 2. train: over a 200,000-passage corpus, the bart-large RAG-Token step with its split, then
#    lewisrag's same-weights step alone at four times the batch (twice on a GPU under 100 GiB, an
#    H100: 64 questions took an estimated 75 GiB), for the MFU target (train.json): eager (torch's
#    attention backend), eager with flash attention instead of cuDNN's (whose host side took 0.55 ms
#    a call), eager with bf16 weights and float32 master copies instead of autocast (whose ~1,550
#    casts a step the profile counted); a mode that runs out of memory is its row's error and the
#    next still runs. Then the closed-book stage on the GPU (bf16 steps at batch 128, answers from the
#    question alone) and, last in its process, the step under torch.profiler (the device's busy share
#    counted from its own events, launches, the top operators, the host time outside them): the
#    profiler can leave CUPTI active and later steps slower (pytorch/pytorch#144455; TEARDOWN_CUPTI=1
#    below tears it down). Parts past its 200 s budget are skipped;
# 3. the same-weights comparison with transformers again (over a 20,000-passage corpus,
#    same_weights.json, two minutes or so), for its peak memory: the 2026-12-04 peaks were read with
#    the other contender's trained copy alive (about 7.7 GB more, docs/performance.md), and each
#    contender is now measured alone; then, in what time is left, the same mfu step compiled (`train
#    rag --compile`: two or three minutes of compiling) and compiled with CUDA graphs (mode
#    reduce-overhead: the 2026-12-04 steps spent about 0.13 s each on work that did not grow with
#    the batch, the host's launches), at step 2's mfu batch, into same_weights.json: a compiled mode
#    that could not finish before the budget's end is a row saying it was skipped for time.
#    MFU_COMPILED names those modes (empty: none, and no mfu part in this step). COMPILED_ONLY=1 runs
#    them alone, for a call whose step 3 skipped them for time: the machine's checks, then the
#    compiled modes as step 3 runs them (the same corpus, batch, repetitions and matmul rate) with
#    the whole session as their budget, into compiled.json; no smoke run, no train step, no
#    same-weights comparison.
# Measured on 2026-12-04 and not repeated here (docs/measurements/): the search at 21,015,324
# vectors (`--parts search_scale`), the compiled same-weights step (`--parts compiled`), MFU eager
# at the batch and twice it.
# The machine has no model hub and no package index: it runs with the Python it has, lewisrag
# taken from this checkout; the packages its image lacks travel as wheels (.whl, carried:
# scripts/gpu_wheels.sh builds them, and its header gives the call that installs them there).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu-session}
SESSION_S=${SESSION_S:-560}
mkdir -p "$OUT"
# CUPTI torn down after the profile; the allocator's segments grown in place (fewer out-of-memory
# errors from fragmentation at the mfu part's large batches)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" XLA_PYTHON_CLIENT_PREALLOCATE=false \
  TEARDOWN_CUPTI=${TEARDOWN_CUPTI:-1} PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
PY=${PYTHON:-python}
read -r -a ARGS <<< "${BENCH_ARGS:-}"  # appended last: they override the defaults below
read -r -a SMOKE <<< "${SMOKE_ARGS:-}"
COMPILED=${MFU_COMPILED-compiled,compiled:cudagraphs}
COMPILED_ONLY=${COMPILED_ONLY:-}

{
  timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>/dev/null || echo "no nvidia-smi"
  lscpu | grep -E "^CPU\(s\)|Model name|^CPU family|^Model:|Flags"
  timeout 120 "$PY" -c "import faiss, numpy, pyarrow, torch, transformers; print('transformers', transformers.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__, 'pyarrow', pyarrow.__version__, 'faiss', faiss.__version__)"
} > "$OUT/machine.txt" 2>&1
if [[ -n "$COMPILED_ONLY" && -z "$COMPILED" ]]; then
  echo "error: COMPILED_ONLY runs the compiled mfu modes alone, and MFU_COMPILED names none: nothing to measure" >&2
  exit 2
fi

# a dry run on the CPU names --device cpu for both scripts; anything else needs the GPU, which both
# scripts would otherwise report missing in one line each and the session would look measured
on_cpu() {
  local prev=""
  for a in "$@"; do
    [[ "$prev" == "--device" && "$a" == "cpu" || "$a" == "--device=cpu" ]] && return 0
    prev="$a"
  done
  return 1
}
if ! { on_cpu "${ARGS[@]}" && { [[ -n "$COMPILED_ONLY" ]] || on_cpu "${SMOKE[@]}"; }; } \
    && ! timeout 120 "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "error: no CUDA device here: nothing measured (machine.txt written; a dry run on the CPU passes --device cpu" \
       "in both BENCH_ARGS and SMOKE_ARGS)" >&2
  exit 2
fi
# lewisrag's index module imports faiss at its top: without the wheels every step would fail in its first second
if ! missing=$(timeout 120 "$PY" -c "import faiss, datasets, bm25s, evaluate, rouge_score, lewisrag.cli" 2>&1); then
  echo "error: $PY cannot import what lewisrag needs (${missing##*$'\n'}): nothing measured (the image lacks faiss," \
       "datasets, bm25s, evaluate and rouge-score: install the .whl wheels first, as scripts/gpu_wheels.sh's header says)" >&2
  exit 2
fi

# the mfu part's batch: four times the preset's (64 questions, an estimated 75 GiB), twice under 100 GiB (an H100)
SCALES=4
mem_mib=$(timeout 30 nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -n 1)
[[ "$mem_mib" =~ ^[0-9]+$ ]] && (( mem_mib < 100 * 1024 )) && SCALES=2

status=0
# bounded NAME LIMIT CMD...: CMD under `timeout`, for LIMIT seconds or what is left of SESSION_S if less; its
# output in $OUT/NAME.log and here (the smoke run's: its last lines); status=1 when it fails, times out or
# finds under 10 s left (then it does not run)
bounded() {
  local name=$1 limit=$2 left=$(( SESSION_S - SECONDS )) rc
  shift 2
  (( limit > left )) && limit=$left
  if (( limit < 10 )); then
    echo "$name: not run: $left s left of the session's $SESSION_S s" | tee "$OUT/$name.log"
    status=1
    return
  fi
  if [[ $name == smoke ]]; then
    timeout -k 10 "$limit" "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    tail -n 3 "$OUT/$name.log"
  else
    timeout -k 10 "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
    rc=${PIPESTATUS[0]}
  fi
  if (( rc == 124 || rc == 137 )); then
    echo "$name: stopped after its $limit s (timeout)" | tee -a "$OUT/$name.log"
  fi
  (( rc == 0 )) || status=1
}

step3=same_weights parts=(--parts same_weights)
[[ -n "$COMPILED" ]] && parts=(--parts matmul,same_weights,mfu --mfu-modes "$COMPILED" --mfu-scales "$SCALES")
if [[ -n "$COMPILED_ONLY" ]]; then  # step 3's compiled modes alone: its matmul rate for their MFU, no same-weights pair
  step3=compiled parts=(--parts matmul,mfu --mfu-modes "$COMPILED" --mfu-scales "$SCALES")
else
  bounded smoke 180 "$PY" scripts/gpu_smoke.py --out "$OUT/smoke.json" "${SMOKE[@]}"
  bounded train 300 "$PY" scripts/bench_gpu.py --budget 200 --passages 200000 --encode 16384 --steps-token 60 \
    --parts matmul,train_token,closed_book,mfu,profile --mfu-scales "$SCALES" --mfu-modes eager,eager:flash,bf16weights \
    --json "$OUT/train.json" "${ARGS[@]}"
fi
left=$(( SESSION_S - SECONDS ))
if (( left - 40 <= 10 )); then  # no time to measure anything: said, not run with a budget already spent
  echo "$step3: not run, $left s left of SESSION_S" | tee -a "$OUT/$step3.log"
  exit 1
fi
# its budget: the time left, less the start (imports) and the report; a compiled mode that cannot finish is skipped
bounded "$step3" "$left" "$PY" scripts/bench_gpu.py --budget $(( left - 40 )) --passages 20000 --encode 2048 --reps 3 \
  "${parts[@]}" --json "$OUT/$step3.json" "${ARGS[@]}"
exit $status
