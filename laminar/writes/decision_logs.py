"""Where coordinators keep their decisions: a log per bucket on one node, a Raft group on a cluster.

A coordinator (`laminar.writes.coordinator`) decides in a
`PartitionReplica`: an append returns once it is durable (one node: fsync'd)
or committed (Raft: on a majority, each replica durable), and reads see only
that. The coordinator rebuilds its table of decisions from the log whenever
the log's leadership changes (`leadership` names one leadership), and only
a leader whose own first entry committed may decide, so whoever decides knows
everything decided before.

- `LocalDecisionLogs` (one node): a `SegmentedLog` per coordinator bucket,
  `<data-dir>/writes/<bucket>/`, on the shard owning the bucket's id.
- `ReplicatedDecisionLogs` (a cluster): one Raft group for every commit id,
  `DECISIONS_PID`, on `DECISION_REPLICAS` nodes, on the shard owning that id
  (one group rather than one per bucket: commits come per job or micro-batch,
  and every group is one more for a gossip cluster to grow and move). A
  static cluster opens it on the top nodes by rendezvous over `--peers`
  (every node computes the same). A gossip cluster's seed opens it alone and
  the placement controller grows and moves it like a partition; a node that
  joined opens it on the first message of a member (a move's learner, or, if
  its files are here, a restarted member whose vote may be needed), never on
  a guess of its own, so two first memberships can never elect two leaders.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Protocol

from laminar.log import LogConfig, SegmentedLog
from laminar.log.storage import StorageBackend
from laminar.replication.calls import PeerCalls
from laminar.replication.replica import LocalReplica, PartitionReplica
from laminar.wire import RequestError
from laminar.wire.writes import (
    COORDINATOR_BUCKETS,
    DECISION_REPLICAS,
    DECISIONS_PID,
    bucket_pid,
    coordinator_bucket,
)

DECISION_SEGMENT_BYTES: Final = 4 << 20


def decision_log_config(retention_ms: int | None = None) -> LogConfig:
    """A decision log's settings (retention in the config only where no Raft
    needs the log kept until applied)."""
    return LogConfig(
        segment_bytes=DECISION_SEGMENT_BYTES, preallocate_bytes=0, retention_ms=retention_ms
    )


class DecisionLogs(Protocol):
    """The decision logs one shard may decide in (see the module docstring)."""

    def key_of(self, commit_id: int) -> int:
        """Which of the logs decides `commit_id`."""
        ...

    def held(self) -> list[int]:
        """The logs held on this shard (the coordinator leads some of them)."""
        ...

    async def start(self) -> None: ...

    async def replica(self, key: int) -> PartitionReplica:
        """Log `key`; raises `RequestError` (NOT_LEADER naming who holds it) if
        it is not held here."""
        ...

    async def apply_retention(self, now_ms: int) -> None: ...

    async def close(self) -> None: ...


class LocalDecisionLogs:
    """A single node's decision logs, one per bucket this shard owns."""

    def __init__(
        self,
        root: str,
        backend: StorageBackend,
        owns: Callable[[int], bool],
        retention_ms: int,
    ) -> None:
        self.root = root
        self._backend = backend
        self._owns = owns
        self._config = decision_log_config(retention_ms)
        self._logs: dict[int, SegmentedLog] = {}
        self._opening: dict[int, asyncio.Task[SegmentedLog]] = {}

    def key_of(self, commit_id: int) -> int:
        return coordinator_bucket(commit_id)

    def held(self) -> list[int]:
        """Owned buckets whose log is open or on disk (the others decided nothing)."""
        return [
            b
            for b in range(COORDINATOR_BUCKETS)
            if self._owns(bucket_pid(b)) and (b in self._logs or os.path.isdir(self._directory(b)))
        ]

    async def start(self) -> None:
        return None

    def _directory(self, bucket: int) -> str:
        return os.path.join(self.root, f"{bucket:02d}")

    async def replica(self, key: int) -> PartitionReplica:
        log = self._logs.get(key)
        if log is None:
            task = self._opening.get(key)
            if task is None:
                task = asyncio.get_running_loop().create_task(self._open(key))
                self._opening[key] = task
            log = await asyncio.shield(task)
        return LocalReplica(log)

    async def _open(self, bucket: int) -> SegmentedLog:
        try:
            log = await SegmentedLog.open(
                self._directory(bucket), self._config, backend=self._backend
            )
        finally:
            del self._opening[bucket]
        self._logs[bucket] = log
        return log

    async def apply_retention(self, now_ms: int) -> None:
        for log in list(self._logs.values()):
            await log.apply_retention(now_ms)

    async def close(self) -> None:
        logs, self._logs = self._logs, {}
        for log in logs.values():
            await log.close()


class WriteGroups(Protocol):
    """What atomic writes need of the shard's Raft groups (the shard's
    `ShardGroups` is one): written here, so this package stays below the
    shard that composes it."""

    node_id: str
    joining: bool
    calls: PeerCalls

    @property
    def replicas(self) -> Mapping[int, PartitionReplica]: ...

    def replica_nodes(self, pid: int, replication_factor: int) -> list[str]: ...

    def not_here(self, pid: int, replication_factor: int) -> RequestError: ...

    def reopen_on_any_message(self, pid: int) -> None: ...

    async def ensure_open(
        self, pid: int, voters: Sequence[str], log_config: LogConfig
    ) -> PartitionReplica: ...

    def retention_keeps_from(self, pid: int) -> int: ...


class ReplicatedDecisionLogs:
    """A cluster's decisions group, if this shard owns its id (module docstring)."""

    def __init__(
        self,
        replication: WriteGroups,
        owns: Callable[[int], bool],
        retention_ms: int,
        gossiped: bool,
    ) -> None:
        self._replication = replication
        self._owns = owns
        self.retention_ms = retention_ms
        self._gossiped = gossiped
        self.config = decision_log_config()

    def key_of(self, commit_id: int) -> int:
        return 0

    def held(self) -> list[int]:
        return [0] if DECISIONS_PID in self._replication.replicas else []

    async def start(self) -> None:
        replication = self._replication
        if not self._owns(DECISIONS_PID):
            return
        if self._gossiped and replication.joining:
            replication.reopen_on_any_message(DECISIONS_PID)
            return
        if self._gossiped:
            voters = [replication.node_id]  # the seed; placement adds the others
        else:
            voters = replication.replica_nodes(DECISIONS_PID, DECISION_REPLICAS)
            if replication.node_id not in voters:
                return
        await replication.ensure_open(DECISIONS_PID, voters, self.config)

    async def replica(self, key: int) -> PartitionReplica:
        replica = self._replication.replicas.get(DECISIONS_PID)
        if replica is None:
            raise self._replication.not_here(DECISIONS_PID, DECISION_REPLICAS)
        return replica

    async def apply_retention(self, now_ms: int) -> None:
        replica = self._replication.replicas.get(DECISIONS_PID)
        if replica is not None:
            keep_from = self._replication.retention_keeps_from(DECISIONS_PID)
            await replica.log.remove_expired(None, self.retention_ms, now_ms, keep_from)

    async def close(self) -> None:
        return None  # the group is the replication's; it closes it
