"""Rolling restarts under load, on a static and on a gossip cluster, and a decommission.

Each node in turn is stopped with SIGTERM (it hands its leaderships over),
a topic is created while it is down, it is started again on its data, its
metadata is asked for again and again from its first moment up (never may
it call an existing topic unknown, the new one included: readiness), and
once every replica it holds has caught up the next node goes. Meanwhile one
idempotent `Client` produces to every partition without pause. Checked:

- every produce is acknowledged (no partition is ever unwritable past the
  client's retry budget), and every acknowledged record is on every replica
  at the end, once and at its offset (`tests.cluster.history`);
- no partition is ever without a live majority and nothing is copied: a
  watcher reads every partition's voters and learners from every running
  node throughout, and they never change (no learner, no removal);
- on the gossip cluster, no placement controller starts a step (its
  counters, read before each node's restart and at the end).

Then the gossip cluster decommissions a node with `laminar node decommission
--wait` while the producer runs: `laminar status` lists it with partitions
left, its partitions move to the others (every acknowledged record on each
new replica), and it can then be stopped. A static cluster refuses.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar.cli.status import parse_prometheus
from laminar.client import Client, LaminarError, RetryPolicy, UnknownTopicError
from laminar.placement import partition_id
from laminar.wire import ListOffsetsResponse
from tests.cluster.history import FinalLogs, Produce, check
from tests.cluster.nodes import Cluster, committed_values, offsets
from tests.cluster.test_gossip_cluster import (
    _get,
    decisions_settled,
    full_holders,
    gossip_cluster,
    member_states,
    metadata_group,
    steps_started,
)
from tests.support import wait_until
from tests.system.nodes import RunningNode

TOPIC = "load"
PARTITIONS = 4
RF = 3
HAMMER_S = 1.0
"""How long a restarted node's metadata is asked for, from its first moment up."""

Nodes = dict[str, RunningNode]
Membership = tuple[tuple[str, ...], tuple[str, ...]]


class Producer:
    """One idempotent `Client` producing unique values (`prefix` and a count)
    to every partition in turn until stopped; the history of what it was told."""

    def __init__(self, bootstrap: str, prefix: bytes) -> None:
        self.client = Client(bootstrap, timeout_s=10, retry=RetryPolicy(budget_s=30))
        self.prefix = prefix
        self.history: list[Produce] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            p, n = n % PARTITIONS, n + 1
            value = b"%s-%06d" % (self.prefix, n)
            try:
                offset = self.client.produce(TOPIC, p, [value])
            except LaminarError:
                self.history.append(Produce(p, value, "info"))
                continue
            self.history.append(Produce(p, value, "ok", offset))

    def finish(self) -> list[Produce]:
        self.stop.set()
        self.thread.join(60)
        self.client.close()
        return self.history


class GroupWatcher:
    """Every partition's voters and learners as each running node's replica
    reports them, sampled until stopped (see the module docstring)."""

    def __init__(self, nodes: Nodes, pids: list[int]) -> None:
        self.nodes = nodes
        self.pids = pids
        self.down: set[str] = set()
        """Nodes the test has stopped and not yet started again."""
        self.seen: dict[int, set[tuple[tuple[str, ...], tuple[str, ...]]]] = {
            p: set() for p in pids
        }
        self.minority: list[str] = []
        self.samples = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.2):
            for name, node in list(self.nodes.items()):
                if name in self.down:
                    continue
                for pid in self.pids:
                    try:
                        answer = offsets(node, pid)
                    except (AssertionError, OSError):
                        continue  # starting up, or holds no replica of it
                    voters = tuple(sorted(answer.voters))
                    self.seen[pid].add((voters, tuple(sorted(answer.learners))))
                    up = [v for v in voters if v not in self.down]
                    if len(up) * 2 <= len(voters):
                        self.minority.append(f"{pid}: voters {voters}, down {sorted(self.down)}")
                    self.samples += 1

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(30)


def hammer_metadata(node: RunningNode, topics: list[str]) -> int:
    """Describe `topics` through fresh clients of `node` alone for `HAMMER_S`
    from now (just after it started): how many times it answered. An existing
    topic called unknown fails the test (the client takes that as final)."""
    answers = 0
    deadline = time.monotonic() + HAMMER_S
    while time.monotonic() < deadline:
        try:
            with Client(node.bootstrap, timeout_s=10, retry=RetryPolicy(budget_s=10)) as client:
                client.describe_topics(topics)
                answers += 1
        except UnknownTopicError as exc:
            raise AssertionError(f"{node.bootstrap} just after its start: {exc}") from exc
    return answers


def replica(node: RunningNode, pid: int) -> ListOffsetsResponse | None:
    """`node`'s replica of `pid` as it reports itself; None when it holds none
    (or does not answer)."""
    try:
        answer = offsets(node, pid)
    except (AssertionError, OSError):
        return None
    return answer if node.info["node_id"] in answer.voters else None


def caught_up(nodes: Nodes, pids: list[int], name: str) -> bool:
    """Every replica `name` holds has committed what its partition's leader had."""
    for pid in pids:
        mine = replica(nodes[name], pid)
        if mine is None:
            continue
        lead = replica(nodes[mine.leader], pid) if mine.leader in nodes else None
        if lead is None or lead.committed_index > mine.committed_index:
            return False
    return True


def final_logs(nodes: Nodes, pids: list[int]) -> dict[str, dict[int, list[tuple[int, bytes]]]]:
    """Once no writer is left and every partition's `RF` replicas agree with
    their leader: each node's committed log of each partition it holds."""

    def agreed() -> dict[int, set[str]] | None:
        holders = {}
        for pid in pids:
            views = {n: r for n, node in nodes.items() if (r := replica(node, pid)) is not None}
            heads = {(r.leader, r.committed_index) for r in views.values()}
            if len(views) != RF or len(heads) != 1:
                return None
            holders[pid] = set(views)
        return holders

    holders = wait_until(agreed, f"every partition on {RF} replicas that agree")
    return {
        name: {p: committed_values(node, pid) for p, pid in enumerate(pids) if name in holders[pid]}
        for name, node in nodes.items()
    }


def rolling_restart_under_load(
    nodes: Nodes,
    bootstrap: Callable[[], str],
    restart: Callable[[str], RunningNode],
    steps: Callable[[RunningNode], float] | None = None,
) -> tuple[list[int], list[Produce]]:
    """Create the topic, produce to it while restarting every node in turn
    (`restart(name)` starts a stopped node again), and check what the module
    docstring says; the partition ids and the producer's history."""
    with Client(bootstrap(), retry=RetryPolicy(budget_s=30)) as admin:
        topic = admin.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=RF)
    pids = [partition_id(topic.topic_id, p) for p in range(PARTITIONS)]
    before = wait_until(
        lambda: full_holders(nodes, pids, {p: [] for p in range(PARTITIONS)}), "placed"
    )
    baseline = {name: steps(node) for name, node in nodes.items()} if steps else {}
    producer = Producer(bootstrap(), b"restart")
    watcher = GroupWatcher(nodes, pids)
    created = [TOPIC]
    try:
        for name in list(nodes):
            if steps is not None:
                assert steps(nodes[name]) == baseline[name], f"{name} moved a partition"
            watcher.down.add(name)
            assert nodes[name].terminate() == 0, f"{name} did not drain cleanly"
            with Client(bootstrap(), retry=RetryPolicy(budget_s=30)) as admin:
                created.append(admin.create_topic(f"while-{name}-down", replication_factor=RF).name)
            nodes[name] = restart(name)
            assert hammer_metadata(nodes[name], created) > 0
            watcher.down.discard(name)
            wait_until(lambda n=name: caught_up(nodes, pids, n), f"{name} caught up")
    finally:
        history = producer.finish()
        watcher.finish()
    assert watcher.samples > len(nodes) * PARTITIONS, "the watcher saw next to nothing"
    assert not watcher.minority, watcher.minority[:5]
    for pid, seen in watcher.seen.items():
        assert seen == {(tuple(sorted(before[pid])), ())}, f"partition {pid} changed: {seen}"
    if steps is not None:
        assert all(steps(node) == 0 for node in nodes.values()), "a partition moved"
    assert_every_record_everywhere(history, final_logs(nodes, pids))
    return pids, history


def assert_every_record_everywhere(history: list[Produce], final: FinalLogs) -> None:
    """Every produce acknowledged, each on every replica of its partition once
    and at its offset (`final` holds each node's logs of the partitions it holds)."""
    assert all(op.outcome == "ok" for op in history), "a produce failed"
    for p in range(PARTITIONS):
        replicas = {name: {p: logs[p]} for name, logs in final.items() if p in logs}
        assert len(replicas) == RF, f"partition {p} is on {sorted(replicas)}"
        report = check([op for op in history if op.partition == p], replicas)
        assert report.valid and report.acknowledged > 0, f"partition {p}: {report.summary()}"


def laminar_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "laminar.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_a_rolling_restart_of_a_static_cluster_moves_nothing_and_loses_nothing(
    tmp_path: Path,
) -> None:
    with Cluster.start(tmp_path, 3, cores=1) as cluster:
        rolling_restart_under_load(
            cluster.nodes, lambda: cluster.bootstrap, lambda name: cluster.restart(name)
        )
        refused = laminar_cli("node", "decommission", "n3", "--json", "-b", cluster.bootstrap)
        assert refused.returncode == 1, refused.stderr
        assert "a --peers cluster cannot decommission a node" in refused.stderr


@pytest.mark.soak  # its static twin runs by default; this one (77 s) under `make soak`
def test_a_rolling_restart_of_a_gossip_cluster_keeps_every_place_and_decommission_moves(
    tmp_path: Path,
) -> None:
    with gossip_cluster(tmp_path, 4, dead_grace=60.0) as (nodes, _start):
        names = set(nodes)
        wait_until(lambda: all(set(member_states(n)) == names for n in nodes.values()), "joined")
        # The metadata and write decisions groups grow by moves (the seed's
        # decisions replica leaves): done before the counts.
        wait_until(
            lambda: (
                all(len(metadata_group(n)["voters"]) == 4 for n in nodes.values())
                and decisions_settled(list(nodes.values()))
            ),
            "the metadata group on every node, the decisions group on three",
        )

        def restart(name: str) -> RunningNode:
            """On new ports, joining through a member that runs (the seed too)."""
            seed = next(n for other, n in nodes.items() if other != name and n.alive())
            return nodes[name].restart(join=seed.info["membership_address"])

        def bootstrap() -> str:
            return ",".join(n.bootstrap for n in nodes.values() if n.alive())

        pids, history = rolling_restart_under_load(
            nodes, bootstrap, restart, lambda node: steps_started([node])
        )
        decommission_under_load(nodes, pids, bootstrap, history)


def decommission_under_load(
    nodes: Nodes, pids: list[int], bootstrap: Callable[[], str], history: list[Produce]
) -> None:
    """`laminar node decommission` while producing: progress in `laminar
    status`, `--wait` returns once the node holds nothing, every record is on
    the three other nodes, and the node stops cleanly."""
    leaving = "n4"
    producer = Producer(bootstrap(), b"decommission")
    try:
        started = laminar_cli("node", "decommission", leaving, "--json", "-b", bootstrap())
        assert started.returncode == 0, started.stderr
        assert json.loads(started.stdout)["decommissioned"] == [leaving]
        status = laminar_cli("status", "--json", "-b", nodes["n1"].bootstrap)
        assert status.returncode == 0, status.stderr
        (entry,) = json.loads(status.stdout)["decommissioning"]
        assert entry["node_id"] == leaving and entry["partitions_left"] > 0, entry
        waited = laminar_cli(
            "node", "decommission", leaving, "--wait", "60", "--json", "-b", bootstrap()
        )
        assert waited.returncode == 0, waited.stderr
        assert json.loads(waited.stdout)["partitions_left"] == []
    finally:
        history = history + producer.finish()
    assert nodes[leaving].terminate() == 0
    rest = {name: node for name, node in nodes.items() if name != leaving}
    assert_every_record_everywhere(history, final_logs(rest, pids))
    status = json.loads(laminar_cli("status", "--json", "-b", nodes["n1"].bootstrap).stdout)
    assert status["decommissioning"] == [
        {"node_id": leaving, "running": False, "partitions_left": 0}
    ]
    left = [
        v
        for node in rest.values()
        for name, labels, v in parse_prometheus(_get(f"{node.admin_url}/metrics"))
        if name == "laminar_decommission_replicas" and labels["node"] == leaving
    ]
    assert left and sum(left) == 0  # every leader reports it, with nothing left
