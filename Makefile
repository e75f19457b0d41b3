# The two commands a newcomer types: `make run` and `make test`.
# Each first runs the idempotent setup (apt packages, .venv, editable install).
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup run demo-log test lint bench clean

setup:
	@scripts/setup

run: setup
	$(PY) -m laminar.cli.log_demo

# The segmented log surviving SIGKILL: append, kill, recover, verify.
demo-log: setup
	$(PY) -m laminar.cli.log_demo

test: setup lint
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check laminar tests benchmarks
	$(VENV)/bin/ruff format --check laminar tests benchmarks
	$(VENV)/bin/mypy

bench:
	@scripts/setup --bench
	$(PY) benchmarks/log_bench.py
	benchmarks/compare.sh

clean:
	rm -rf $(VENV) .setup-stamp .pytest_cache .mypy_cache .ruff_cache
