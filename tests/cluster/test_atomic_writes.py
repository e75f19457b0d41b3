"""Atomic writes on real clusters: a static three-node one and a four-node `--join` one.

`Client.begin_write()` commits through every node alone as bootstrap; the
leader of a written partition (the node its records were staged on) is
SIGKILLed between staging and commit (the commit fails naming it, nothing is
visible, and once it is back the same commit publishes each record once),
and, on the static cluster, while the commit publishes (small publish chunks
make that take a while). Every check reads every replica (`tests.cluster.atomic`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from laminar.client import Client
from laminar.placement import partition_id
from tests.cluster import atomic
from tests.cluster.nodes import Cluster, committed_values, leader_of, offsets, wait_until
from tests.cluster.test_gossip_cluster import gossip_cluster, member_states, replica_holders
from tests.system.nodes import RunningNode


def _pid(bootstrap: str, topic: str, partition: int) -> int:
    with Client(bootstrap) as client:
        return partition_id(client.describe_topic(topic).topic.topic_id, partition)


class StaticCluster:
    """A `Cluster` with the checks' kill, heal and replica reads."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.killed: list[str] = []

    def kill_leader(self, topic: str, partition: int) -> str:
        name = leader_of(self.cluster, _pid(self.cluster.bootstrap, topic, partition))
        self.kill(name)
        return name

    def kill(self, name: str) -> None:
        self.cluster.nodes[name].kill()
        self.killed.append(name)

    def heal(self) -> None:
        while self.killed:
            self.cluster.restart(self.killed.pop())

    def replicas(self, pid: int) -> dict[str, list[tuple[int, bytes]]]:
        return {name: committed_values(node, pid) for name, node in self.cluster.live().items()}

    def published(self, pid: int) -> int:
        return max(offsets(node, pid).committed_index for node in self.cluster.live().values())


@pytest.fixture(scope="module")
def static(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StaticCluster]:
    tmp = tmp_path_factory.mktemp("atomic-static")
    with Cluster.start(tmp, 3, publish_chunk_bytes=8192) as cluster:
        running = StaticCluster(cluster)
        try:
            yield running
        finally:
            running.heal()


def test_begin_write_commits_through_every_node_of_a_static_cluster(
    static: StaticCluster,
) -> None:
    bootstraps = [node.bootstrap for node in static.cluster.nodes.values()]
    atomic.check_commits_from_every_node(bootstraps, static.replicas, "every-node")


def test_a_staging_node_killed_before_the_commit_fails_it_closed_until_it_is_back(
    static: StaticCluster,
) -> None:
    atomic.check_leader_killed_between_staging_and_commit(
        static.cluster.bootstrap, static.kill_leader, static.heal, static.replicas, "before"
    )


def test_a_staging_node_killed_while_publishing_publishes_once_when_back(
    static: StaticCluster,
) -> None:
    atomic.check_leader_killed_during_publish(
        static.cluster.bootstrap,
        static.kill,
        static.heal,
        static.replicas,
        "during",
        static.published,
    )


class GossipCluster:
    """Nodes joined with --join, with the checks' kill, heal and replica reads."""

    def __init__(self, nodes: dict[str, RunningNode]) -> None:
        self.nodes = nodes
        self.killed: list[str] = []

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes.values())

    def live(self) -> dict[str, RunningNode]:
        return {name: node for name, node in self.nodes.items() if node.alive()}

    def kill_leader(self, topic: str, partition: int) -> str:
        pid = _pid(self.bootstrap, topic, partition)

        def agreed() -> str | None:
            named = {offsets(node, pid).leader for node in self.replica_nodes(pid).values()}
            named.discard(None)
            return named.pop() if len(named) == 1 else None

        name: str = wait_until(agreed, f"one leader of {topic}/{partition}")
        self.nodes[name].kill()
        self.killed.append(name)
        return name

    def replica_nodes(self, pid: int) -> dict[str, RunningNode]:
        return {name: self.nodes[name] for name in replica_holders(self.live(), pid)}

    def heal(self) -> None:
        while self.killed:
            name = self.killed.pop()
            seed = next(n for n in self.live().values())
            old = self.nodes[name]
            changes: dict[str, Any] = {"port": old.port, "join": seed.info["membership_address"]}
            self.nodes[name] = old.restart(**changes)

    def replicas(self, pid: int) -> dict[str, list[tuple[int, bytes]]]:
        return replica_holders(self.live(), pid)


def test_atomic_writes_on_a_joined_cluster(tmp_path: Path) -> None:
    """Four nodes joined through a seed (the decisions group on three of them,
    so some commits are redirected to its leader), replication factor 3."""
    with gossip_cluster(tmp_path, 4, dead_grace=60.0) as (nodes, _start):
        names = set(nodes)
        wait_until(lambda: all(set(member_states(n)) == names for n in nodes.values()), "joined")
        cluster = GossipCluster(nodes)
        bootstraps = [node.bootstrap for node in nodes.values()]
        atomic.check_commits_from_every_node(bootstraps, cluster.replicas, "every-node")
        atomic.check_leader_killed_between_staging_and_commit(
            cluster.bootstrap, cluster.kill_leader, cluster.heal, cluster.replicas, "before"
        )
