"""The cluster's metadata log compacted by snapshots, three nodes in one loop.

Each node is the real metadata service (`MetadataService`) over a real
`ShardGroups` (its Raft group of pid 0 on a real segmented log with
fsync, its partition manager on real directories); only the network between
the nodes is fake (`FakeNetwork`, as in `test_raft_groups.py`). What a shard
does with applied changes is stood in for by `Node._on_applied`: it opens the
partition logs of created topics (so there are files) and drops deleted ones,
as `Shard._on_metadata_applied` does. Snapshots are due every 8 entries and
segments are small, so a few dozen topic changes compact several times.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

import laminar.replication.metadata as metadata_module
import laminar.replication.metadata_home as metadata_home_module
from laminar.channels.siblings import Channels
from laminar.log import LogConfig
from laminar.log.partitions import LongPolls, PartitionManager
from laminar.log.storage import SyscallBackend
from laminar.placement import partition_id
from laminar.replication.auth import PeerAuth
from laminar.replication.host import RaftHost
from laminar.replication.metadata import METADATA_PID, Applied, MetadataError
from laminar.replication.metadata_home import ClusteredMetadata
from laminar.replication.metalog import MetadataService
from laminar.replication.nodes import Node, NodeView
from laminar.replication.replica import RaftReplica
from laminar.replication.shard_groups import ShardGroups
from laminar.wire import ErrorCode, TopicInfo
from laminar.wire.errors import RequestError
from tests.cluster.test_raft_groups import FakeNetwork, _ticks, _until

NODES = ("n1", "n2", "n3")
TICK_S = 0.01
PARTITIONS = 2
VIEW = NodeView(1, tuple(Node(n, "127.0.0.1", 1) for n in NODES))


@pytest.fixture(autouse=True)
def _compact_often(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata_module, "SNAPSHOT_MIN_ENTRIES", 8)
    monkeypatch.setattr(
        metadata_home_module,
        "METADATA_LOG_CONFIG",
        LogConfig(segment_bytes=2048, flush="always", preallocate_bytes=0),
    )


class Node:
    """One node's metadata shard: the service, its Raft member, its partitions."""

    def __init__(self, root: Path, node_id: str, net: FakeNetwork) -> None:
        self.root = root / node_id
        self.node_id = node_id
        self.net = net
        self.applied: list[int] = []
        """Every index the service applied since this start (ignored ones too)."""
        self.created: list[bool] = []
        """For each applied entry that created topics since this start: was it a snapshot?"""
        self.gate: asyncio.Event | None = None
        """While set to an unset event, applying a create of topic "block" waits."""

    async def start(self) -> None:
        self.applied, self.created = [], []
        self.partitions = PartitionManager(
            str(self.root), LogConfig(segment_bytes=1 << 20), SyscallBackend(), lambda pid: True
        )
        replication = ShardGroups(
            VIEW, PeerAuth.from_secret(self.node_id, None), 0, 1, self.partitions, 1 << 20, (1,)
        )
        replication.host = RaftHost(self.net.transport(self.node_id), tick_s=TICK_S)
        self.net.hosts[self.node_id] = replication.host
        replication.start()
        self.replication = replication
        self.service = MetadataService(
            0,
            0,
            self.partitions,
            Channels(str(self.root), 0, 1, 1 << 20),
            self._on_applied,
            1,
            LongPolls(),
            ClusteredMetadata(replication),
        )
        await self.service.start()

    async def stop(self) -> None:
        self.service.stop()
        await self.replication.close()
        await self.partitions.close_all()
        del self.net.hosts[self.node_id]

    async def _on_applied(self, applied: Applied) -> None:
        self.applied.append(applied.index)
        if applied.created:
            self.created.append(applied.snapshot is not None)
        for topic in applied.created:
            if topic.name == "block" and self.gate is not None:
                await self.gate.wait()
            for idx in range(topic.partitions):
                await self.partitions.get(partition_id(topic.topic_id, idx))
        for topic in applied.deleted:
            await self.partitions.drop_topic(topic.topic_id, topic.partitions)

    @property
    def meta(self) -> RaftReplica:
        replica = self.replication.replicas[METADATA_PID]
        return replica

    def topics(self) -> list[tuple[str, int]]:
        return [(t.name, t.topic_id) for t in self.service.state.topics()]

    def has_files(self, topic: TopicInfo) -> bool:
        return any(
            os.path.isdir(self.partitions.directory(partition_id(topic.topic_id, idx)))
            for idx in range(topic.partitions)
        )


def _told(node: Node) -> bool:
    """`node`'s metadata member heard a leader's commit index since it started."""
    replica = node.replication.replicas.get(METADATA_PID)
    return replica is not None and replica.group.core.leader_commit is not None


def _leader(nodes: dict[str, Node]) -> Node | None:
    for node in nodes.values():
        up = node.node_id in node.net.hosts and METADATA_PID in node.replication.replicas
        if up and node.meta.group.writable and node.service.is_ready:
            return node
    return None


async def _change(nodes: dict[str, Node], op: str, name: str) -> TopicInfo:
    """Create or delete a topic through whoever leads the metadata group. A
    write whose outcome is unknown (leadership changed under it: a loaded
    machine) is made again, and found done if it was."""
    done: TopicInfo | None = None
    unknown = False
    while True:
        leader = await _until(lambda: _leader(nodes))
        try:
            if op == "create":
                return await leader.service.create_topic(name, PARTITIONS, {}, 1)
            done = leader.service.state.by_name(name) or done
            return await leader.service.delete_topic(name)
        except RequestError as exc:
            if exc.code is not ErrorCode.OUTCOME_UNKNOWN:
                raise
            unknown = True
        except MetadataError as exc:
            if unknown and done is not None and exc.code is ErrorCode.UNKNOWN_TOPIC:
                return done  # the delete whose outcome was unknown went through
            if unknown and op == "create" and exc.code is ErrorCode.TOPIC_EXISTS:
                created = leader.service.state.by_name(name)
                if created is not None:
                    return created  # the create whose outcome was unknown did
            if exc.code not in (ErrorCode.NOT_LEADER, ErrorCode.NOT_READY):
                raise
        await asyncio.sleep(TICK_S)


async def _churn(nodes: dict[str, Node], prefix: str, count: int) -> list[TopicInfo]:
    """Create and delete `count` topics: the log grows, the topic count does not
    (a snapshot is due every 8 entries while there are at most 4 topics)."""
    gone = []
    for n in range(count):
        topic = await _change(nodes, "create", f"{prefix}{n}")
        await _change(nodes, "delete", topic.name)
        gone.append(topic)
    return gone


async def _settled(nodes: list[Node], leader: Node) -> None:
    """Every node applied everything the leader did."""
    end = leader.service.state.applied_index
    for node in nodes:
        await _until(lambda n=node: n.service.state.applied_index >= end)
        await _until(lambda n=node: n.topics() == leader.topics())


def _run(tmp_path: Path, scenario: Callable[[dict[str, Node]], Awaitable[None]]) -> None:
    async def main() -> None:
        net = FakeNetwork()
        nodes = {n: Node(tmp_path, n, net) for n in NODES}
        try:
            for node in nodes.values():
                await node.start()
            await scenario(nodes)
        finally:
            for node in nodes.values():
                if node.node_id in net.hosts:
                    await node.stop()

    asyncio.run(main())


def test_a_restart_after_compaction_replays_from_the_snapshot_and_keeps_newer_topics(
    tmp_path: Path,
) -> None:
    """Every node restarts over its compacted log: the same topics come back, the
    first entry applied is past index 0, no deleted topic is created again on the
    way (entries before the first snapshot replayed are skipped), the deleted
    topics' files are gone, and a topic created after the last snapshot (files
    with a record) is kept by the reconciliation the snapshot triggers."""

    async def scenario(nodes: dict[str, Node]) -> None:
        kept = [await _change(nodes, "create", f"t{n}") for n in range(3)]
        deleted = await _churn(nodes, "churn", 24)
        leader = await _until(lambda: _leader(nodes))
        # A topic no snapshot holds yet: created after the last one.
        fresh = await _change(nodes, "create", "fresh")
        while leader.service.state.snapshot_index > leader.service.state.applied_index - 3:
            fresh = await _change(nodes, "create", f"fresh{fresh.topic_id}")
        snapshot_next = leader.service.state.next_topic_id - 1
        assert fresh.topic_id == snapshot_next  # the newest id: past the snapshot's ids
        await _settled(list(nodes.values()), leader)
        expected = leader.topics()
        fresh_pid = partition_id(fresh.topic_id, 0)
        for node in nodes.values():
            log = await node.partitions.get(fresh_pid)
            await log.append([b"kept"])
        for node in nodes.values():
            await node.stop()
        for node in nodes.values():
            await node.start()
        for node in nodes.values():
            await _until(lambda n=node: n.service.is_ready)
            assert {(t.name, t.topic_id) for t in kept} <= set(node.topics()), "ready, no state"
            await _until(lambda n=node: n.topics() == expected)
            lowest = node.meta.lowest_index
            assert lowest > 0, f"{node.node_id}: the metadata log was not compacted"
            assert min(node.applied) > lowest, f"{node.node_id} replayed from {min(node.applied)}"
            assert node.created[0], f"{node.node_id} created topics before its first snapshot"
            for topic in deleted:
                assert not node.has_files(topic), f"{node.node_id} kept deleted {topic.name}"
            for topic in kept:
                assert node.has_files(topic), f"{node.node_id} lost {topic.name}"
            log = await node.partitions.get(fresh_pid)
            records = await log.read_range(0)
            assert [r.value for r in records] == [b"kept"], f"{node.node_id} lost fresh's data"

    _run(tmp_path, scenario)


@pytest.mark.parametrize("role", ["follower", "leader"])
def test_a_node_down_through_a_delete_and_compaction_is_installed_and_deletes_its_files(
    tmp_path: Path, role: str
) -> None:
    """A node that held a topic's files misses its delete, which the others then
    compact away; it comes back below the leader's first index, is installed from
    the leader's retained log (which begins before a snapshot), ends with the
    leader's topics, and the deleted topic's files are gone from it. A follower
    knows the topic again before the install (the leader remembers how far its
    log matched, so it commits its own entries first) and deletes it as the
    snapshot's difference; the old leader restarts knowing nothing (nobody
    tells it its own entries are committed), so only the reconciliation with the
    snapshot's topics finds the files. Its appends are lost for a while after
    the restart: it hears the new leader's heartbeats, which tell it how far
    the group committed, so it does not call itself ready on its stale state
    (it would answer metadata without the delete) until the install arrives."""

    async def scenario(nodes: dict[str, Node]) -> None:
        gone = await _change(nodes, "create", "gone")
        stay = await _change(nodes, "create", "stay")
        leader = await _until(lambda: _leader(nodes))
        await _settled(list(nodes.values()), leader)
        down = leader if role == "leader" else next(n for n in nodes.values() if n is not leader)
        assert down.has_files(gone)
        end_before = down.meta.log_end
        await down.stop()
        await _change(nodes, "delete", "gone")
        await _churn(nodes, "churn", 16)
        leader = await _until(lambda: _leader(nodes))
        await _until(lambda: leader.meta.lowest_index > end_before + 1)
        down.net.drop_appends = (
            role == "leader"
        )  # heartbeats pass, the probe before the install not
        await down.start()
        if role == "leader":
            await _until(lambda: _told(down))
            await _ticks(down.net, down.node_id, 20)
            assert not down.service.is_ready and down.has_files(gone)
            down.net.drop_appends = False
        await _until(lambda: down.service.is_ready)
        await _settled([down], leader)
        assert down.meta.lowest_index > end_before, "caught up without an install"
        assert not down.has_files(gone), "the deleted topic's files are still there"
        assert down.has_files(stay)
        assert ("gone", gone.topic_id) not in down.topics()

    _run(tmp_path, scenario)


def test_compaction_never_removes_entries_this_node_has_not_applied(tmp_path: Path) -> None:
    """A follower whose application is stuck (its shard is slow to open a topic)
    keeps every entry from its applied index on, while the leader compacts past
    it; released, it applies them all and ends with the leader's topics."""

    async def scenario(nodes: dict[str, Node]) -> None:
        await _churn(nodes, "early", 6)
        leader = await _until(lambda: _leader(nodes))
        await _settled(list(nodes.values()), leader)
        slow = next(n for n in nodes.values() if n is not leader)
        slow.gate = asyncio.Event()
        block = await _change(nodes, "create", "block")
        await _churn(nodes, "late", 16)
        stuck_at = slow.service.state.applied_index
        assert stuck_at <= slow.meta.log_end  # it holds entries it has not applied
        await _until(lambda: leader.meta.lowest_index > stuck_at)  # the leader compacted past
        await _until(lambda: slow.meta.highest_index >= leader.meta.highest_index)
        assert slow.service.state.applied_index == stuck_at
        assert slow.meta.lowest_index < stuck_at, "compacted entries it has not applied"
        slow.gate.set()
        await _settled([slow], leader)
        assert ("block", block.topic_id) in slow.topics()

    _run(tmp_path, scenario)
