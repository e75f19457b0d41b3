# The two commands a newcomer types: `make run` and `make test`.
# Each first runs the idempotent setup (apt packages, .venv, editable install).
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup run certs cluster demo-log test lint bench soak log-mutants clean

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

# A CA and certificates in ./certs (owner-only, git-ignored; CERTS_DIR=DIR elsewhere) for
# `make cluster`: nodes n1..n3 (each named by the URI laminar-node:ID, for 127.0.0.1 and
# localhost) and a client "admin". Made once: remove the directory to make new ones.
CERTS_DIR ?= certs
certs: setup
	@if [ -e $(CERTS_DIR)/ca.crt ]; then echo "$(CERTS_DIR)/ exists (remove it to make new ones)"; \
	else $(PY) -m laminar.certs $(CERTS_DIR); fi

# Three nodes on loopback, every partition replicated; Ctrl-C stops all. With certs/ca.crt
# (make certs) every port speaks TLS and the nodes' links are mutual TLS.
cluster: setup
	@scripts/cluster

# The segmented log surviving SIGKILL: append, kill, recover, verify.
demo-log: setup
	$(PY) -m laminar.cli.log_demo

test: setup lint
	$(PY) -m pytest -q -n 4

lint: setup
	$(VENV)/bin/ruff check laminar tests benchmarks
	$(VENV)/bin/ruff format --check laminar tests benchmarks
	$(VENV)/bin/mypy

# Long randomized runs (minutes); each part on its own line.
soak: setup
	$(PY) -m tests.raft.sim.soak --seeds 10000 --processes 2
	$(PY) -m tests.raft.sim.mutations 300
	LAMINAR_SOAK=1 $(PY) -m pytest -q tests/swim/test_soak.py tests/swim/test_sim.py
	LAMINAR_SOAK=1 $(PY) -m pytest -q -n 2 tests/groups/test_simulation.py
	$(PY) -m tests.system.fuzz --seconds 600
	LAMINAR_SOAK=1 $(PY) -m pytest -q tests/spark/test_driver_crash.py
	LAMINAR_SOAK=1 $(PY) -m pytest -q tests/cluster/test_gossip_cluster.py
	LAMINAR_SOAK=1 $(PY) -m pytest -q tests/cluster/test_gossip_netns.py
	LAMINAR_SOAK=1 $(PY) -m pytest -q tests/system/test_membership.py tests/bench/test_move_bench.py
	LAMINAR_SOAK=1 $(PY) -m pytest -q tests/cluster/test_workload.py tests/cluster/test_rolling_restart.py
	LAMINAR_SOAK=1 $(PY) -m pytest -q tests/system/test_kafka_groups.py
	LAMINAR_MODEL_EXAMPLES=4000 LAMINAR_CRASH_ROUNDS=60 $(PY) -m pytest -q -p no:cacheprovider tests/log/test_log_model.py tests/log/test_crash.py
	$(PY) -m tests.cluster.workload --minutes 10

# The log's durability tests against mutants (every fsync removed, each fix undone).
log-mutants: setup
	$(PY) scripts/log_mutants.py

bench:
	@scripts/setup --bench
	$(PY) benchmarks/log_bench.py
	$(PY) benchmarks/reactor_bench.py
	$(PY) benchmarks/node_bench.py
	$(PY) benchmarks/routing_bench.py
	benchmarks/compare.sh
	SUITE=replication benchmarks/compare.sh
	SUITE=kafka benchmarks/compare.sh

clean:
	rm -rf laminar-data laminar-cluster certs $(VENV) .setup-stamp .pytest_cache .mypy_cache .ruff_cache
