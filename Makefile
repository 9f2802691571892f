# Every target installs what it needs first, so each works on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install install-test demo test lint services bench bench-smoke

$(BIN)/python:
	$(PY) -m venv $(VENV)

install: $(BIN)/python
	$(BIN)/pip install -q -e .

install-test: $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'

demo: install
	$(BIN)/lockgate demo

test: install-test
	$(BIN)/pytest

lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# lockgate and its peers against one Redis; each peer in its own benchmarks/.venv-<peer>.
# BENCH_ARGS passes options through, e.g. make bench BENCH_ARGS="--jobs 2000 --runs 1".
bench: install
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

bench-smoke: install
	$(BIN)/python -m benchmarks --smoke
