# The two commands a newcomer types: `make run` and `make test`.
# Each first runs the idempotent setup (apt packages, .venv, editable install).
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup run demo-log test lint bench soak clean

setup:
	@scripts/setup

# The node with its defaults: one shard per core, 127.0.0.1:7070, data in ./laminar-data.
run: setup
	@echo "laminar-node: starting on 127.0.0.1:7070 (Ctrl-C drains and stops it). From another terminal:"
	@echo "  .venv/bin/laminar topic create events --partitions 4"
	@echo "  echo hello | .venv/bin/laminar produce events"
	@echo "  .venv/bin/laminar consume events --follow"
	@echo "  .venv/bin/laminar status"
	@exec $(VENV)/bin/laminar-node

# The segmented log surviving SIGKILL: append, kill, recover, verify.
demo-log: setup
	$(PY) -m laminar.cli.log_demo

test: setup lint
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check laminar tests benchmarks
	$(VENV)/bin/ruff format --check laminar tests benchmarks
	$(VENV)/bin/mypy

# Long randomized runs (minutes); each part on its own line.
soak: setup
	$(PY) -m tests.raft.sim.soak --seeds 10000 --processes 2
	$(PY) -m tests.raft.sim.mutations 300
	LAMINAR_SOAK=1 $(PY) -m pytest -q tests/swim/test_soak.py

bench:
	@scripts/setup --bench
	$(PY) benchmarks/log_bench.py
	$(PY) benchmarks/reactor_bench.py
	$(PY) benchmarks/node_bench.py
	$(PY) benchmarks/routing_bench.py
	benchmarks/compare.sh

clean:
	rm -rf laminar-data $(VENV) .setup-stamp .pytest_cache .mypy_cache .ruff_cache
