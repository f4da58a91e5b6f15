# Two entry points, the README's quick start: `make run` and `make test`.
# For development: `make test-fast` (the suite without the tests marked slow) and `make lint`;
# `make test TEST_WORKERS=1` runs the suite in one process; `make durations` re-measures the
# seconds per test module that order the suite (longest first).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup run test test-fast lint gpu-check durations

# torch is installed before the project, from the first source that applies:
#   1. $TORCH_INDEX_URL, when set: the index of the torch build you want (CPU, a CUDA version);
#   2. the CPU wheel where one lies on disk (pip's configured find-links);
#   3. with an NVIDIA GPU: pip's default resolution;
#   4. without one: the newest CPU build (+cpu) that pip's configured index offers, if any,
#      else pip's default resolution.
# Every package comes from pip's own configuration otherwise; no index is named here. torch's
# dependencies come with the project install, which keeps any torch 2.4+ already there.
$(BIN)/evolve: pyproject.toml
	$(PY) -m venv $(VENV)
	@set -e; \
	if [ -n "$$TORCH_INDEX_URL" ]; then \
	  echo "setup: torch from TORCH_INDEX_URL"; \
	  $(BIN)/pip install -q torch --index-url "$$TORCH_INDEX_URL"; \
	elif $(BIN)/pip install -q --no-index --no-deps torch==2.13.0 2>/dev/null; then \
	  echo "setup: torch from the local wheel"; \
	elif command -v nvidia-smi >/dev/null 2>&1; then \
	  echo "setup: torch for the NVIDIA GPU (pip's default resolution)"; \
	  $(BIN)/pip install -q torch; \
	else \
	  cpu=$$($(BIN)/pip index versions torch 2>/dev/null | sed -n 's/^Available versions: //p' \
	    | tr ',' '\n' | tr -d ' ' | grep '+cpu$$' | head -n 1 || true); \
	  if [ -n "$$cpu" ]; then \
	    echo "setup: no NVIDIA GPU; torch $$cpu, the CPU build the configured index offers"; \
	    $(BIN)/pip install -q "torch==$$cpu"; \
	  else \
	    echo "setup: no NVIDIA GPU and no CPU build on the configured index: pip's default" \
	      "resolution (set TORCH_INDEX_URL to a CPU-only index to avoid a CUDA build)"; \
	    $(BIN)/pip install -q torch; \
	  fi; \
	fi
	$(BIN)/pip install -q -e '.[test,bench,hf]'
	touch $@

setup: $(BIN)/evolve

run: setup
	$(BIN)/evolve run --population 64

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The suite on TEST_WORKERS processes (pytest-xdist), a test module's tests on one of them
# (--dist loadscope): a module's Ray cluster or scratch database fixture starts once. Modules
# go out longest first, as tests/conftest.py orders them from tests/module_durations.json
# (--no-loadscope-reorder: xdist would order them by their number of tests instead);
# `make durations` measures that file again.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

test: setup lint
	$(PYTEST)

test-fast: setup
	$(PYTEST) -m "not slow"

# On a machine with an NVIDIA GPU: every kernel against its reference (fp32 and bf16), their
# speed, an evolve run's candidates per hour and MFU, a 100M candidate's MFU; one table, a
# non-zero exit on any mismatch, about 5 minutes on one H200. Without CUDA it says so and
# exits 0 (`python benchmarks/gpu_check.py --dry-run` runs it all at tiny shapes on CPU).
gpu-check: setup
	$(BIN)/python benchmarks/gpu_check.py

durations: setup
	$(PYTEST) --record-durations
