"""Replicated targets (issue 15): names, server configs, per-process CPU and the
replication goals, on synthetic results (no servers)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from laminar.bench.compare import Comparison
from laminar.bench.config import RunConfig
from laminar.bench.machine import ProcessTreeCpu
from laminar.bench.replication_goal import replication_checks
from laminar.bench.report import markdown, summary_rows
from laminar.bench.results_md import MarkerError, splice
from laminar.bench.servers.laminar_cluster import node_cpus, node_ids, peers_arg
from laminar.bench.servers.nats_server import ClusterRole, NatsServer
from laminar.bench.servers.process import ManagedProcess
from laminar.bench.targets import make_system, parse_target
from laminar.bench.targets.base import SystemUnavailable
from tests.bench.test_config_and_report import _result


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("laminar", ("laminar", None, None)),
        ("laminar-r1", ("laminar", None, 1)),
        ("laminar-r3", ("laminar", None, 3)),
        ("nats-jetstream-r3", ("nats-jetstream", None, 3)),
        ("nats-jetstream-r3:sync-always", ("nats-jetstream", "sync-always", 3)),
    ],
)
def test_replica_counts_are_part_of_a_target_name(name: str, parsed: tuple[object, ...]) -> None:
    assert parse_target(name) == parsed


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("redis-streams-r3", "no replicated variant"),
        ("laminar-r0", "replicas must be 1 to 5"),
        ("laminar-r9", "replicas must be 1 to 5"),
        ("kafka-r3", "unknown target"),
        ("laminar-rx", "unknown target"),
    ],
)
def test_bad_replica_counts_are_refused(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_target(name)


def test_replicated_systems_are_named_and_durable_as_stated() -> None:
    r3 = make_system("laminar-r3")
    assert r3.name == "laminar-r3"
    durability = r3.durability()
    assert durability.fsync_before_ack and durability.settings["replication_factor"] == "3"
    assert make_system("laminar").name == "laminar"
    assert make_system("laminar-r1").durability().settings.get("replication_factor") is None
    with pytest.raises(SystemUnavailable, match="--flush always"):
        make_system("laminar-r3:interval")
    nats = make_system("nats-jetstream-r3")
    assert nats.name == "nats-jetstream-r3"
    assert nats.durability().settings["replicas"] == "3"


def test_the_lingering_laminar_variant_says_so() -> None:
    system = make_system("laminar:linger5")
    assert system.name == "laminar:linger5"
    durability = system.durability()
    assert durability.fsync_before_ack and durability.settings["flush"] == "always"
    assert durability.settings["produce"] == "AsyncClient(linger_s=0.005)"
    assert "produce" not in make_system("laminar").durability().settings


def test_cluster_nodes_name_each_other_but_not_themselves() -> None:
    ports = {n: 7000 + i for i, n in enumerate(node_ids(3))}
    assert list(ports) == ["n1", "n2", "n3"]
    assert peers_arg(ports, "n2") == "n1=127.0.0.1:7000,n3=127.0.0.1:7002"
    with pytest.raises(ValueError, match="1 to 5"):
        node_ids(6)


def test_cluster_nodes_get_the_machines_cpus_in_turn() -> None:
    assert node_cpus(3, 1, [0, 1]) == [[0], [1], [0]]
    assert node_cpus(3, 2, [0, 1]) == [[0, 1], [0, 1], [0, 1]]
    assert node_cpus(3, 1, [2, 5, 7, 9]) == [[2], [5], [7]]
    assert node_cpus(2, 2, [0, 1, 2, 3, 4]) == [[0, 1], [2, 3]]


def test_a_node_process_runs_on_the_cpus_it_was_given(tmp_path: Path) -> None:
    """What the shards pin themselves among: the supervisor's own affinity."""
    cpu = sorted(os.sched_getaffinity(0))[-1]
    log = tmp_path / "affinity.log"
    script = "import os, time; print(sorted(os.sched_getaffinity(0)), flush=True); time.sleep(60)"
    process = ManagedProcess("affinity", [sys.executable, "-c", script], log, cpus=[cpu])
    process.start()
    try:
        process.wait_ready(lambda: log.read_text().endswith("\n"), 10)
    finally:
        process.stop()
    assert log.read_text().strip() == f"[{cpu}]"


def test_nats_cluster_config_routes_to_the_others(tmp_path: Path) -> None:
    server = NatsServer(tmp_path, name="nats-2", cluster=ClusterRole("c", 6222, (6221, 6223)))
    text = server.config_text()
    assert 'server_name: "nats-2"' in text
    assert "listen: 127.0.0.1:6222" in text
    assert "routes: [nats-route://127.0.0.1:6221, nats-route://127.0.0.1:6223]" in text
    assert str(tmp_path / "jetstream-nats-2") in text  # a store directory of its own
    assert "cluster {" not in NatsServer(tmp_path).config_text()


def test_server_cpu_is_measured_per_process() -> None:
    meter = ProcessTreeCpu({"me": os.getpid(), "gone": 2**22 + 12345})
    meter.start()
    end = os.times()
    while os.times().user - end.user < 0.05:  # burn a little CPU
        pass
    meter.stop()
    assert meter.by_process is not None
    assert meter.by_process["me"] > 0 and meter.by_process["gone"] == 0
    assert meter.cores == pytest.approx(sum(meter.by_process.values()))


def _replicated_comparison(load: str) -> Comparison:
    config = RunConfig(load=load, rate=2000.0) if load == "open" else RunConfig()  # type: ignore[arg-type]
    targets = ["laminar-r3", "laminar-r1", "nats-jetstream-r3"]
    c = Comparison(config, targets, 1)
    c.runs.append(_result("laminar-r3", 1, 6000, 8000, fsync=True))
    c.runs.append(_result("laminar-r1", 1, 10000, 3000, fsync=True))
    c.runs.append(_result("nats-jetstream-r3", 1, 5000, 2000, fsync=False))
    c.runs[0].server_cpu_cores = 0.6
    c.runs[0].server_cpu_by_process = {"n1": 0.4, "n2": 0.1, "n3": 0.1}
    return c


def test_replication_goals_in_a_closed_loop() -> None:
    c = _replicated_comparison("closed")
    checks = {check.other: check for check in replication_checks(c.config, c.summaries())}
    assert checks["laminar-r1"].ratio == pytest.approx(0.6) and checks["laminar-r1"].met
    assert checks["laminar-r1"].bound == 0.5
    assert checks["nats-jetstream-r3"].ratio == pytest.approx(1.2)
    assert checks["nats-jetstream-r3"].met
    assert "acknowledges before fsync" in checks["nats-jetstream-r3"].line()
    text = markdown(c, "laminar-bench --compare laminar-r3,laminar-r1,nats-jetstream-r3", [])
    assert "laminar-r3 throughput 0.60x of laminar-r1 (goal >= 0.5x: met)" in text
    _, rows = summary_rows(c)
    assert "0.60 (n1 0.40, n2 0.10, n3 0.10)" in rows[0]


def test_replication_goal_at_a_fixed_rate_is_the_p99() -> None:
    c = _replicated_comparison("open")
    [check] = replication_checks(c.config, c.summaries())
    assert (check.other, check.metric) == ("laminar-r1", "p99")
    assert check.ratio == pytest.approx(8000 / 3000) and not check.met
    assert "(goal <= 2x: missed)" in check.line()


def test_no_replication_goal_without_a_replicated_baseline() -> None:
    c = _replicated_comparison("closed")
    c.targets = ["laminar-r1", "laminar-r3", "nats-jetstream-r3"]
    assert replication_checks(c.config, c.summaries()) == []


def test_a_named_section_leaves_the_other_sections_alone() -> None:
    document = splice("intro\n", "peers")
    document = splice(document, "r3 figures", "replication")
    document = splice(document, "peers again")
    assert "r3 figures" in document and "peers again" in document and "peers\n" not in document
    assert document.index("peers again") < document.index("<!-- replication:begin -->")
    assert splice(document, "new r3", "replication").count("r3") == 1
    with pytest.raises(MarkerError):
        splice(document, "x", "Bad Name")
