"""Metadata answers of a cluster name each partition's current leader, so a
client sends its produces straight there (no NOT_LEADER round trip first);
`laminar status` shows each partition's leader, replicas, commit index and
follower lag, and labels index ranges as entries (they hold Raft's no-ops)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from laminar.client import Client
from laminar.placement import partition_id
from laminar.wire.writes import DECISIONS_PID
from tests.cluster.nodes import Cluster, offsets
from tests.support import wait_until


def test_a_fresh_client_routes_each_partition_to_its_leader(tmp_path: Path) -> None:
    with Cluster.start(tmp_path, 3) as cluster, Client(cluster.bootstrap) as setup:
        topic = setup.create_topic("events", partitions=6, replication_factor=3)
        pids = [partition_id(topic.topic_id, p) for p in range(topic.partitions)]

        def leaders() -> dict[int, str] | None:
            found = {}
            for pid in pids:
                named = {offsets(node, pid).leader for node in cluster.live().values()}
                if len(named) != 1 or None in named:
                    return None
                found[pid] = named.pop()
            return found

        leader_of = wait_until(leaders, "one leader known by every replica of each partition")
        # Leaders are spread: most partitions' leader is not the first replica,
        # where a client without them would start.
        with Client(cluster.bootstrap) as client:
            view = client.cluster
            assert {pid: view.leader_of(pid) for pid in pids} == leader_of
            hints = dict(view.hints.leaders)
            hints.pop(DECISIONS_PID, None)  # the write decisions group's leader, also named
            assert hints == leader_of


def _laminar(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "laminar.cli.main", *args, "--bootstrap", cluster.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "LAMINAR_BOOTSTRAP"},
    )


def test_status_shows_leaders_replicas_commit_and_lag_and_counts_entries(
    tmp_path: Path,
) -> None:
    with Cluster.start(tmp_path, 3) as cluster, Client(cluster.bootstrap) as client:
        client.create_topic("events", partitions=2, replication_factor=3)
        wait_until(
            lambda: all(p.leader for p in client.describe_topic("events").partitions),
            "a leader for each partition",
        )
        client.produce("events", 0, [b"a", b"b", b"c"])
        doc = json.loads(_laminar(cluster, "status", "--json").stdout)
        parts = {p["partition"]: p for p in doc["cluster"]["partitions"]}
        assert sorted(parts[0]["replicas"]) == ["n1", "n2", "n3"]
        assert parts[0]["leader"] in parts[0]["replicas"]
        assert set(parts[0]["lag"]) == set(parts[0]["replicas"]) - {parts[0]["leader"]}
        # Three records after the leader's no-op (one more per re-election).
        assert parts[0]["commit_index"] >= 4
        shown = _laminar(cluster, "status")
        assert shown.returncode == 0, shown.stderr
        assert "ENTRIES" in shown.stdout and "RECORDS" not in shown.stdout
        assert "Raft's own entries" in shown.stderr
        described = _laminar(cluster, "topic", "describe", "events")
        # 3 records in all, 5 entries or more: each leader committed a no-op.
        entries = re.search(r"entries (\d+)", described.stdout)
        assert "ENTRIES" in described.stdout and entries and int(entries[1]) >= 5
