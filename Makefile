# memlane: the two commands of the README are `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install run test test-fast check lint-imports bench-retrieval bench-latency clean

$(STAMP): pyproject.toml benchmarks/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]' -e ./benchmarks
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install memlane, its benchmarks (benchmarks/) and its test tools

run: $(STAMP)  ## install, then start the daemon on the embedded default (127.0.0.1:7437)
	$(BIN)/memlane serve

test: $(STAMP)  ## install, then run the whole test suite
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)  ## the tests not marked slow (tests/conftest.py SLOW_MODULES), for a quick check while editing
	$(BIN)/python -m pytest -q -p no:schemathesis -m "not slow"

# Static checks, configured in pyproject.toml: ruff (lint, format), mypy (types), import-linter (layers).
check: lint-imports  ## the static checks CI runs before the tests
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

lint-imports: $(STAMP)  ## the layer contracts of pyproject.toml [tool.importlinter] (docs/architecture.md)
	$(BIN)/lint-imports

bench-retrieval: $(STAMP)  ## LoCoMo retrieval quality (needs ../shared/bench-data)
	$(BIN)/memlane bench retrieval --dataset locomo --data ../shared/bench-data/locomo/locomo10.json

bench-latency: $(STAMP)  ## HTTP latency with 10,000 memories through a real daemon
	$(BIN)/memlane bench latency --memories 10000

clean:
	rm -rf $(VENV) build *.egg-info benchmarks/build benchmarks/*.egg-info .pytest_cache bench-results
