# The two commands a newcomer runs: `make demo` (the main job) and `make test` (the test suite).
# Both create .venv on first use. torch is installed first, pinned to the CPU build that lies on
# these machines: an unpinned torch would pull a multi-GB CUDA build. The package itself asks
# only for torch>=2.4, so users elsewhere keep their own build.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
OUT ?= runs/demo
# test workers: one a core. Each test runs torch on one thread (tests/conftest.py), so one worker leaves
# the other cores idle; --dist loadfile keeps a test file on one worker, which builds its fixtures once.
# The slow tests run whole reproductions on every core: one at a time.
JOBS ?= $(shell nproc 2>/dev/null || echo 1)

.PHONY: demo test test-slow venv clean

$(BIN)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "lewisrag needs Python >= 3.11; $(PYTHON) is " + sys.version.split()[0] + ": run make PYTHON=python3.11 (or newer)")'
	@# a .venv left by another (or a removed) interpreter: venv would keep its old python link, so start over
	@$(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

venv: $(BIN)/.installed

demo: venv
	$(BIN)/lewisrag reproduce --preset small --out $(OUT)

test: venv
	$(BIN)/python -m pytest -q -n $(JOBS) --dist loadfile

test-slow: venv
	$(BIN)/python -m pytest -q -m slow

clean:
	rm -rf $(VENV) runs
