# The two commands a newcomer runs: `make demo` (the main job) and `make test` (the test suite).
# Both create .venv on first use. torch is installed first, pinned to the CPU build that lies on
# these machines: an unpinned torch would pull a multi-GB CUDA build. The package itself asks
# only for torch>=2.4, so users elsewhere keep their own build.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
OUT ?= runs/demo

.PHONY: demo test test-slow venv clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

venv: $(BIN)/.installed

demo: venv
	$(BIN)/lewisrag reproduce --preset small --out $(OUT)

test: venv
	$(BIN)/python -m pytest -q

test-slow: venv
	$(BIN)/python -m pytest -q -m slow

clean:
	rm -rf $(VENV) runs
