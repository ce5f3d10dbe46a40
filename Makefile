# Two commands for a newcomer: `make demo` and `make test`. Both create .venv and install the project
# into it on first use (again only when pyproject.toml changes), so a fresh clone needs nothing but
# Python 3.11+ (and Java 17 for the Spark parts).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.cadenza-installed

.PHONY: demo test coverage lint typecheck docs docs-serve unit install broker clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "cadenza needs Python 3.11+; this is " + sys.version.split()[0] + ". Run: make PYTHON=python3.11 ...")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/cadenza demo

# The suite in two passes (docs/development/testing.md): in parallel on PYTEST_WORKERS processes,
# each with its own embedded broker, then the `timing` tests alone, since they measure this host's
# latencies. The docs build goes first, with the linters: it is quick and fails on a broken link.
PYTEST_WORKERS ?= 6
PARALLEL_PASS := -n $(PYTEST_WORKERS) -m 'not timing'
TIMING_PASS   := -m timing

test: lint typecheck docs
	$(BIN)/pytest $(PARALLEL_PASS) --durations=20
	$(BIN)/pytest $(TIMING_PASS) --durations=20

# Line and branch coverage of cadenza over the same two passes (in-process code only: the worker
# subprocesses that some tests start are not traced). Writes coverage.json beside the report.
coverage: $(STAMP)
	$(BIN)/pytest $(PARALLEL_PASS) --cov=cadenza --cov-branch --cov-report=
	$(BIN)/pytest $(TIMING_PASS) --cov=cadenza --cov-branch --cov-append --cov-report=term --cov-report=json:coverage.json

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# The documentation site (mkdocs.yml, docs/) into site/, strictly: a broken link, a missing page or an
# API reference that does not resolve fails the build. docs-serve previews it at http://127.0.0.1:8000/.
# (NO_MKDOCS_2_WARNING silences Material's banner about MkDocs 2.0, which this site does not use.)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# Unit tests only: no broker is started.
unit: $(STAMP)
	$(BIN)/pytest -m 'not kafka'

broker: $(STAMP)
	$(BIN)/cadenza broker

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build site *.egg-info .coverage .coverage.* coverage.json
