# Two entry points, the README's quick start: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup run test lint
$(BIN)/evolve: pyproject.toml
	$(PY) -m venv $(VENV)
	# torch first: the CPU wheel where one lies on disk (pip's find-links), the CUDA build only
	# where an NVIDIA GPU is present, else PyTorch's CPU index: never a multi-GB CUDA pull on a
	# CPU-only machine. Its own dependencies come with the project install below.
	$(BIN)/pip install -q --no-index --no-deps torch==2.13.0 2>/dev/null || \
	  (command -v nvidia-smi >/dev/null && $(BIN)/pip install -q torch) || \
	  $(BIN)/pip install -q torch --index-url https://download.pytorch.org/whl/cpu \
	    --extra-index-url https://pypi.org/simple
	$(BIN)/pip install -q -e '.[test,bench]'
	touch $@

setup: $(BIN)/evolve

run: setup
	$(BIN)/evolve run --population 64

test: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check .
