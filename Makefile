# Two entry points, the README's quick start: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup run test lint
$(BIN)/evolve: pyproject.toml
	$(PY) -m venv $(VENV)
	# CPU build of torch where it lies on disk or no GPU is present: never a multi-GB CUDA pull.
	$(BIN)/pip install -q --no-index torch==2.13.0 2>/dev/null || \
	  (command -v nvidia-smi >/dev/null && $(BIN)/pip install -q torch) || \
	  $(BIN)/pip install -q torch --index-url https://download.pytorch.org/whl/cpu
	$(BIN)/pip install -q -e '.[test]'
	touch $@

setup: $(BIN)/evolve

run: setup
	$(BIN)/evolve run --population 64

test: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check .
