"""Metadata answers of a cluster name each partition's current leader, so a
client sends its produces straight there (no NOT_LEADER round trip first)."""

from __future__ import annotations

from pathlib import Path

from laminar.client import Client
from laminar.placement import partition_id
from tests.cluster.nodes import Cluster, offsets, wait_until


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
            assert view.hints.leaders == leader_of
