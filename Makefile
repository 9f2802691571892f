# Every target installs what it needs first, so each works on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install install-test demo test lint services

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
