"""Atomic writes on real clusters: a static three-node one and a four-node `--join` one.

`Client.begin_write()` commits through every node alone as bootstrap; the
leader of a written partition (the node its records were staged on) is
SIGKILLed between staging and commit (the commit fails naming it, nothing is
visible, and once it is back the same commit publishes each record once),
and, on the static cluster, while the commit publishes (small publish chunks
make that take a while), as is the commit's coordinator (the decisions
group's leader: the new leader finishes the commit). Every check reads every
replica (`tests.cluster.atomic`). The nodes' write protocol requests to each
other travel only over sessions that proved the cluster secret, and such a
session serves nothing else.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from laminar.client import Client, RetryPolicy
from laminar.placement import partition_id, shard_for
from laminar.replication.auth import PeerAuth
from laminar.replication.calls import PeerCallError, PeerCalls
from laminar.replication.nodes import Node, NodeView
from laminar.wire import ErrorCode, ErrorResponse, MetadataRequest, ProduceRequest, encode_record
from laminar.wire.writes import CheckStagedRequest, StagedPart
from tests.cluster import atomic
from tests.cluster.nodes import Cluster, committed_values, leader_of, offsets, request
from tests.cluster.test_gossip_cluster import (
    decisions_settled,
    gossip_cluster,
    member_states,
    replica_holders,
    shard_stats,
)
from tests.support import wait_until
from tests.system.nodes import RunningNode

SECRET = os.urandom(32).hex().encode()


def _pid(bootstrap: str, topic: str, partition: int) -> int:
    with Client(bootstrap) as client:
        return partition_id(client.describe_topic(topic).topic.topic_id, partition)


def _caught_up(node: RunningNode, other: RunningNode) -> None:
    """Wait until every shard of a restarted `node` answers metadata with the
    topics `other` knows (until then it may answer without them: issue 22's
    finding 5, not this one's)."""
    shards = len(node.shard_ports)
    pids = [
        next(pid for pid in range(1, 1000) if shard_for(pid, shards) == s) for s in range(shards)
    ]

    def names(n: RunningNode, pid: int) -> set[str]:
        return {t.name for t in request(n, pid, MetadataRequest()).topics}

    wait_until(
        lambda: all(names(node, pid) == names(other, 1) for pid in pids),
        f"{node.bootstrap} knows every topic",
    )


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
            node = self.cluster.restart(self.killed.pop())
            _caught_up(node, next(n for n in self.cluster.live().values() if n is not node))

    def replicas(self, pid: int) -> dict[str, list[tuple[int, bytes]]]:
        return {name: committed_values(node, pid) for name, node in self.cluster.live().items()}

    def published(self, pid: int) -> int:
        return max(offsets(node, pid).committed_index for node in self.cluster.live().values())

    def coordinator(self) -> str:
        """The node leading the write decisions group, once the live nodes agree."""

        def agreed() -> str | None:
            named = {
                group["leader"]
                for node in self.cluster.live().values()
                for stats in shard_stats(node)
                if (group := stats["decisions_group"])
            }
            named.discard(None)
            return named.pop() if len(named) == 1 else None

        leader: str = wait_until(agreed, "one leader of the decisions group")
        return leader


@pytest.fixture(scope="module")
def static(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StaticCluster]:
    tmp = tmp_path_factory.mktemp("atomic-static")
    secret = tmp / "secret"
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    with Cluster.start(tmp, 3, secret=secret, publish_chunk_bytes=4096) as cluster:
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


def test_a_leader_killed_between_two_batches_of_an_attempt_keeps_it_on_one_node(
    static: StaticCluster,
) -> None:
    atomic.check_leader_killed_between_batches(
        static.cluster.bootstrap, static.kill_leader, static.heal, static.replicas, "between"
    )


@pytest.mark.parametrize("dying", ["staging-node", "coordinator"])
def test_a_node_killed_while_publishing_leaves_every_record_once_when_it_is_back(
    static: StaticCluster, dying: str
) -> None:
    """The staging node (the partition's leader) publishes once it is back; a
    dead coordinator leaves the commit to the decisions group's next leader."""
    victim = None if dying == "staging-node" else (lambda parts: static.coordinator())
    atomic.check_node_killed_during_publish(
        static.cluster.bootstrap,
        static.kill,
        static.heal,
        static.replicas,
        dying,
        static.published,
        victim,
    )


def test_peers_must_prove_the_secret_and_may_ask_only_the_write_protocol(
    static: StaticCluster,
) -> None:
    """A write protocol request over a session that proved the cluster secret
    is served; any other op closes the session; without the secret no session."""
    cluster = static.cluster
    with Client(cluster.bootstrap) as client:
        topic = client.create_topic("peer", partitions=1, replication_factor=3)
    pid = partition_id(topic.topic_id, 0)
    wait_until(lambda: len(static.replicas(pid)) == 3, "the topic on every node")
    members = tuple(Node(name, n.host, n.port) for name, n in cluster.nodes.items())
    view = NodeView(1, members)
    part = StagedPart(pid, 1, 0, 1, 1, 1, "n1")

    async def ask(secret: bytes, message: Any) -> Any:
        calls = PeerCalls(PeerAuth.from_secret("tester", secret), lambda: view, 1 << 20)
        try:
            return await calls.call("n1", message, timeout_s=5)
        finally:
            calls.close()

    answer = asyncio.run(ask(SECRET, CheckStagedRequest(pid, 1, (part,))))
    refusal = ErrorResponse.from_frame(answer)
    assert refusal.code is ErrorCode.STAGED_DATA_MISSING and "never staged" in refusal.message
    with pytest.raises(PeerCallError, match="lost the connection"):
        asyncio.run(ask(SECRET, ProduceRequest(pid, (encode_record(b"sneaked"),))))
    with pytest.raises(PeerCallError, match="cannot be reached"):
        asyncio.run(ask(b"another secret, not the cluster's", CheckStagedRequest(pid, 1, (part,))))
    assert all(log == [] for log in static.replicas(pid).values())


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
            changes: dict[str, Any] = {
                "port": old.port,  # the client's bootstrap list names it
                "shard_port_base": 0,  # else port+1..: maybe taken meanwhile
                "membership_port": 0,
                "join": seed.info["membership_address"],
            }
            self.nodes[name] = old.restart(**changes)
            _caught_up(self.nodes[name], seed)

    def replicas(self, pid: int) -> dict[str, list[tuple[int, bytes]]]:
        return replica_holders(self.live(), pid)


def test_atomic_writes_on_a_joined_cluster(tmp_path: Path) -> None:
    """Four nodes joined through a seed (the decisions group on three of them,
    so some commits are redirected to its leader), replication factor 3. Two
    of the decisions group's three voters restarted at once open it again on
    the survivor's messages (its vote requests), and commits go on."""
    with gossip_cluster(tmp_path, 4, dead_grace=60.0) as (nodes, _start):
        names = set(nodes)
        wait_until(lambda: all(set(member_states(n)) == names for n in nodes.values()), "joined")
        cluster = GossipCluster(nodes)
        bootstraps = [node.bootstrap for node in nodes.values()]
        atomic.check_commits_from_every_node(bootstraps, cluster.replicas, "every-node")
        atomic.check_leader_killed_between_staging_and_commit(
            cluster.bootstrap, cluster.kill_leader, cluster.heal, cluster.replicas, "before"
        )
        wait_until(lambda: decisions_settled(list(nodes.values())), "the decisions group settled")
        # Its leader quiesced: it sends nothing, so the restarted voters hear of
        # the group first from a request, which must open it too.
        group = wait_until(
            lambda: next(
                (
                    g
                    for n in nodes.values()
                    for s in shard_stats(n)
                    if (g := s["decisions_group"]) and g["leader"] and g["quiesced"]
                ),
                None,
            ),
            "the decisions group's leader quiesced",
        )
        restarted = [name for name in group["voters"] if name != group["leader"]]
        for name in restarted:
            nodes[name].kill()
            cluster.killed.append(name)
        cluster.heal()
        retry = RetryPolicy(budget_s=30)
        with (
            Client(nodes[restarted[0]].bootstrap, retry=retry) as client,
            client.begin_write() as write,
        ):
            write.send("every-node", 0, [b"after-0"])
            assert write.commit().records == 1
