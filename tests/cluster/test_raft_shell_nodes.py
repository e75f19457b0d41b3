"""The Raft shell on real nodes: what the core allows, the node survives.

One static 3-node cluster (small segments, fast retention) for the module:

- a leader frozen with a proposal pending while the others elect, commit and
  remove by retention everything it missed, then thawed: it installs the new
  leader's log and carries on (its Raft group used to die on the pending
  proposal, leaving the replica offline while /health said ok);
- a replica whose Raft state file is damaged: offline in /health, requests
  redirected to the leader, `laminar repair` rebuilds it from its peers.

Checks are by identity: the replicas hold the same records at the same indexes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from laminar.client import Client, RetryPolicy
from laminar.placement import partition_id
from laminar.replication.raft_storage import STATE_FILE
from laminar.wire import ErrorCode, ErrorResponse, FetchRequest, ProduceRequest
from tests.cluster.nodes import (
    Cluster,
    committed_values,
    leader_of,
    offsets,
    request,
    wait_committed,
)
from tests.support import wait_until
from tests.system.nodes import RunningNode

RETAINED = {"segment.bytes": 4096, "retention.bytes": 8192}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster.start(
        tmp_path_factory.mktemp("raft-shell"), 3, cores=1, retention_check_interval=0.2
    ) as started:
        yield started


def _health(node: RunningNode) -> dict[str, Any]:
    status, body = node.admin_get("/health")
    health: dict[str, Any] = json.loads(body)
    assert (status == 200) == (health["status"] == "ok"), (status, health)
    return health


def _signal(node: RunningNode, sig: signal.Signals) -> None:
    os.killpg(node.pid, sig)


def test_a_frozen_leaders_pending_produce_survives_an_install(cluster: Cluster) -> None:
    with Client(cluster.bootstrap, retry=RetryPolicy(budget_s=30)) as client:
        topic = client.create_topic("pending", partitions=1, replication_factor=3, config=RETAINED)
        pid = partition_id(topic.topic_id, 0)
        for n in range(5):
            client.produce("pending", 0, [b"early-%d" % n])
    old = leader_of(cluster, pid)
    others = [name for name in cluster.nodes if name != old]
    wait_committed(cluster, pid, offsets(cluster.nodes[old], pid).highest_index)
    leader = cluster.nodes[old]
    # Killed, not stopped: a stopped follower would read the leader's append of
    # the pending produce from its socket once continued, and commit it.
    for name in others:
        cluster.nodes[name].kill()
    answers: list[object] = []
    produce = ProduceRequest.from_values(pid, [b"pending"])
    sender = threading.Thread(target=lambda: answers.append(request(leader, pid, produce, 90)))
    sender.start()
    try:
        held = wait_until(
            lambda: (end := offsets(leader, pid)).highest_index > end.committed_index and end,
            "the leader holding the pending produce",
            timeout_s=5,
        )
    finally:
        _signal(leader, signal.SIGSTOP)  # before check-quorum deposes it
        for name in others:
            cluster.restart(name)
    try:
        new = wait_until(
            lambda: (named := leader_of(cluster, pid, others)) in others and named,
            "a leader among the others",
        )
        bootstrap = ",".join(cluster.nodes[n].bootstrap for n in others)
        with Client(bootstrap, retry=RetryPolicy(budget_s=30)) as client:
            client.cluster.hints.leaders[pid] = new  # not the frozen one: it would hang
            batch = [b"late-%d-" % i + b"x" * 200 for i in range(10)]
            last = max(client.produce("pending", 0, batch) for _ in range(30)) + len(batch)
        wait_until(
            lambda: all(
                offsets(cluster.nodes[n], pid).lowest_index > held.highest_index for n in others
            ),
            "retention on the new majority removing what the old leader missed",
        )
    finally:
        _signal(leader, signal.SIGCONT)
    sender.join(60)
    (answer,) = answers
    assert isinstance(answer, ErrorResponse) and answer.code is ErrorCode.OUTCOME_UNKNOWN, answer
    wait_committed(cluster, pid, last)
    assert offsets(leader, pid).lowest_index > held.highest_index  # it installed

    def agreed() -> list[tuple[int, bytes]] | None:
        """What every replica holds from the highest first index on (retention
        may still be removing old segments: then the next try)."""
        logs = [committed_values(node, pid) for node in cluster.nodes.values()]
        floor = max(log[0][0] for log in logs)
        tails = [[record for record in log if record[0] >= floor] for log in logs]
        return tails[0] if tails[0] and all(tail == tails[0] for tail in tails) else None

    kept = wait_until(agreed, "every replica holding the same records")
    assert kept[-1][1] == b"late-9-" + b"x" * 200
    for node in cluster.nodes.values():
        assert b"pending" not in {value for _, value in committed_values(node, pid)}
    assert "Raft group failed" not in leader.log_text()
    assert _health(leader)["status"] == "ok"


def test_a_damaged_state_file_is_reported_redirected_and_repaired(cluster: Cluster) -> None:
    with Client(cluster.bootstrap, retry=RetryPolicy(budget_s=30)) as client:
        topic = client.create_topic("scarred", partitions=1, replication_factor=3)
        pid = partition_id(topic.topic_id, 0)
        for n in range(5):
            client.produce("scarred", 0, [b"before-%d" % n])
    leader = leader_of(cluster, pid)
    name = next(n for n in cluster.nodes if n != leader)
    wait_committed(cluster, pid, offsets(cluster.nodes[leader], pid).highest_index)
    replica_dir = cluster.nodes[name].data_dir / "partitions" / f"{topic.topic_id}-0"
    cluster.nodes[name].kill()
    state = replica_dir / STATE_FILE
    state.write_bytes(state.read_bytes().replace(b'"vote"', b'"veto"'))
    node = cluster.restart(name)

    def offline() -> list[dict[str, Any]]:
        return [p for p in _health(node)["partitions_offline"] if p["partition_id"] == pid]

    (reported,) = wait_until(offline, "the damaged replica reported offline")
    assert "damaged" in reported["reason"] and "laminar repair" in reported["reason"]

    def redirected() -> bool:
        answer = request(node, pid, FetchRequest(pid, 0, max_bytes=1 << 20))
        return (
            isinstance(answer, ErrorResponse)
            and answer.code is ErrorCode.NOT_LEADER
            and answer.leader == leader
        )

    wait_until(redirected, "a fetch from the damaged replica redirected to the leader")
    with Client(node.bootstrap, retry=RetryPolicy(budget_s=30)) as client:
        client.produce("scarred", 0, [b"while-damaged"])  # follows the redirect

    node.kill()
    repaired = subprocess.run(
        [sys.executable, "-m", "laminar.cli.main", "repair", str(replica_dir), "--json"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert repaired.returncode == 0, repaired.stderr
    assert json.loads(repaired.stdout)["kept_at"].startswith(str(replica_dir) + ".damaged-")
    node = cluster.restart(name)
    end = offsets(cluster.nodes[leader], pid).committed_index
    wait_committed(cluster, pid, end)
    wait_until(lambda: not offline(), "the rebuilt replica online")
    values = committed_values(node, pid)
    assert values == committed_values(cluster.nodes[leader_of(cluster, pid)], pid)
    assert [v for _, v in values] == [*(b"before-%d" % n for n in range(5)), b"while-damaged"]
