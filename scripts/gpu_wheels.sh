#!/usr/bin/env bash
# The packages lewisrag needs that the lent GPU machine's image lacks (or holds at other versions), as
# wheels for its Python (3.12, x86-64) at the versions of this checkout's .venv, into .whl/ (ignored
# through .git/info/exclude; it travels when the device call carries it):
#
#   bash scripts/gpu_wheels.sh                     # here, where pip reaches PyPI
#   # then the device call, carrying .whl:
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl &&
#     export PYTHONPATH=/tmp/site && PYTHON=python3 bash scripts/gpu_session.sh
#
# The image (2026-11/12) has torch, transformers, accelerate, tokenizers, safetensors, pyarrow, scipy,
# statsmodels, sacrebleu, matplotlib and rich, but no faiss, datasets, bm25s, evaluate or rouge-score,
# and an older typer. --no-deps: what each of those needs beyond the image (read from its METADATA)
# is in the list too.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
version() { .venv/bin/python -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64)
specs=()
for name in faiss-cpu datasets dill multiprocess evaluate bm25s nltk defusedxml typer pydantic pydantic_core \
            annotated-types typing-inspection annotated-doc typing_extensions; do
  specs+=("$name==$(version "$name")")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]}" -d .whl "${specs[@]}"
# rouge-score publishes no wheel: built here (pure Python)
python3 -m pip wheel -q --no-deps -w .whl "rouge-score==$(version rouge-score)"
du -sh .whl
