"""Where a shard's partition replicas come from: one face, whatever the topology.

A handler asks `Replicas.replica` for the `PartitionReplica` of a partition
and never asks whether the node is clustered. A single node answers with the
partition's local log (`NodeReplicas`); a cluster node (`ClusterReplicas`)
with the partition's Raft group when the topic is replicated, or its local
log when placement puts an unreplicated partition here, and refuses a
partition it holds no replica of (naming where it lives). The composition
root (`laminar.shards.shard.Shard`) picks one.
"""

from __future__ import annotations

from typing import Protocol

from laminar.log import LogConfig, SegmentedLog
from laminar.log.partitions import PartitionManager
from laminar.replication.replica import LocalReplica, PartitionReplica
from laminar.replication.shard_groups import ShardGroups
from laminar.wire import NodeInfo, TopicInfo


class Replicas(Protocol):
    """The partition replicas of one shard (see the module docstring)."""

    async def replica(self, pid: int, topic: TopicInfo, config: LogConfig) -> PartitionReplica:
        """The replica of partition `pid` of `topic`, opened with `config`
        (or the refusal, raised as a `RequestError`)."""
        ...

    def log_nowait(self, pid: int) -> SegmentedLog | None:
        """The open log of `pid` if a request may be answered from it without
        waiting (a partition of this node alone), else None."""
        ...

    def replicated(self, topic: TopicInfo) -> bool:
        """Whether `topic`'s partitions are Raft groups here."""
        ...

    def nodes(self) -> tuple[NodeInfo, ...]:
        """The cluster's nodes, as a metadata answer names them (none alone)."""
        ...

    def leaders(self) -> tuple[tuple[int, str], ...]:
        """(partition id, leader node id) of the groups this shard knows the
        leader of (none alone)."""
        ...

    def silent(self, node_id: str) -> bool:
        """Whether node `node_id` was heard from on this shard and has gone quiet."""
        ...

    def heard_from(self, node_id: str) -> bool:
        """Whether node `node_id` ever sent this shard anything."""
        ...

    def placed_on(self, pid: int, topic: TopicInfo) -> tuple[str, ...]:
        """The nodes placement puts partition `pid` on ("" names this node alone)."""
        ...


async def local_replica(partitions: PartitionManager, pid: int, config: LogConfig) -> LocalReplica:
    """The replica over `pid`'s log on this shard, opened with the topic's own
    segment and retention settings if it is not open yet."""
    log = partitions.opened(pid)
    if log is None:
        log = await partitions.get(pid, config)
    return LocalReplica(log)


class NodeReplicas:
    """A single node: every partition is its local log."""

    def __init__(self, partitions: PartitionManager) -> None:
        self._partitions = partitions

    async def replica(self, pid: int, topic: TopicInfo, config: LogConfig) -> PartitionReplica:
        return await local_replica(self._partitions, pid, config)

    def log_nowait(self, pid: int) -> SegmentedLog | None:
        return self._partitions.opened(pid)

    def replicated(self, topic: TopicInfo) -> bool:
        return False

    def nodes(self) -> tuple[NodeInfo, ...]:
        return ()

    def leaders(self) -> tuple[tuple[int, str], ...]:
        return ()

    def silent(self, node_id: str) -> bool:
        return False

    def heard_from(self, node_id: str) -> bool:
        return False

    def placed_on(self, pid: int, topic: TopicInfo) -> tuple[str, ...]:
        return ("",)


class ClusterReplicas:
    """A cluster node: Raft groups for replicated topics, placement decides
    which partitions are here (`ShardGroups` does the work)."""

    def __init__(self, partitions: PartitionManager, replication: ShardGroups) -> None:
        self._partitions = partitions
        self._replication = replication

    async def replica(self, pid: int, topic: TopicInfo, config: LogConfig) -> PartitionReplica:
        replication = self._replication
        rf = topic.replication_factor
        if not replication.serves(pid, rf):
            raise replication.not_here(pid, rf)
        if replication.replicated(rf):
            return await replication.ensure_open(pid, replication.replica_nodes(pid, rf), config)
        return await local_replica(self._partitions, pid, config)

    def log_nowait(self, pid: int) -> SegmentedLog | None:
        return None  # placement and Raft decide every request here

    def replicated(self, topic: TopicInfo) -> bool:
        return self._replication.replicated(topic.replication_factor)

    def nodes(self) -> tuple[NodeInfo, ...]:
        return self._replication.nodes()

    def leaders(self) -> tuple[tuple[int, str], ...]:
        return self._replication.leaders()

    def silent(self, node_id: str) -> bool:
        return self._replication.silent(node_id)

    def heard_from(self, node_id: str) -> bool:
        return self._replication.heard_from(node_id)

    def placed_on(self, pid: int, topic: TopicInfo) -> tuple[str, ...]:
        return tuple(self._replication.replica_nodes(pid, topic.replication_factor))
