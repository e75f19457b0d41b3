"""Where a node's metadata log lives, picked once by the shard (the composition root).

`MetadataService` (`metalog`) runs the same on every topology; what differs is
asked of its home: how the owner shard opens the log, which nodes a new
topic's replicas may be placed on, and whether this node can be
decommissioned. A node that runs alone keeps the log in one local partition
(`LocalMetadata`); a cluster's is a Raft group over the nodes of the view
(`ClusteredMetadata`), whose committed entries reach the service through the
`on_committed` callback in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from laminar.log import LogConfig
from laminar.log.partitions import PartitionManager
from laminar.raft import Entry
from laminar.replication.metadata import METADATA_PID, MetadataError
from laminar.replication.replica import LocalReplica, PartitionReplica
from laminar.replication.shard_groups import ShardGroups
from laminar.wire import ErrorCode

METADATA_LOG_CONFIG: Final = LogConfig(segment_bytes=16 << 20, flush="always", preallocate_bytes=0)
"""The metadata log is always flushed with fdatasync, whatever `--flush` says."""

OnCommitted = Callable[[Sequence[Entry]], None]
ADOPT_POLL_S: Final = 0.05


class MetadataHome(Protocol):
    """What `MetadataService` asks of the topology it runs on."""

    @property
    def clustered(self) -> bool:
        """The log is a Raft group: this node may apply a change after another
        node already answered with it, and the owner's start waits for a quorum."""

    async def open_log(self, on_committed: OnCommitted) -> PartitionReplica:
        """The owner shard's metadata log (a cluster delivers committed entries
        to `on_committed`; a local log is replayed by the service itself)."""

    def placement(self) -> dict[str, float]:
        """The nodes a new topic's replicas may be placed on, with their weights."""

    def decommission_view(self) -> tuple[frozenset[str], dict[str, float]]:
        """(members known, placement) for planning a decommission; raises
        `MetadataError` saying why this topology cannot decommission a node."""


class LocalMetadata:
    """A node that runs alone: the log is the owner shard's own partition."""

    clustered = False

    def __init__(self, partitions: PartitionManager) -> None:
        self._partitions = partitions

    async def open_log(self, on_committed: OnCommitted) -> PartitionReplica:
        return LocalReplica(await self._partitions.get(METADATA_PID, METADATA_LOG_CONFIG))

    def placement(self) -> dict[str, float]:
        return {}

    def decommission_view(self) -> tuple[frozenset[str], dict[str, float]]:
        raise MetadataError(
            ErrorCode.INVALID_REQUEST, "this node runs alone: it has no cluster to leave"
        )


class ClusteredMetadata:
    """A cluster: the log is a Raft group over the nodes of the view."""

    clustered = True

    def __init__(self, groups: ShardGroups) -> None:
        self._groups = groups

    async def open_log(self, on_committed: OnCommitted) -> PartitionReplica:
        groups = self._groups
        if groups.joining:
            # The seed's group: never a group of its own (two metadata logs).
            groups.adopt_metadata(METADATA_LOG_CONFIG, on_committed)
            while METADATA_PID not in groups.replicas:
                await asyncio.sleep(ADOPT_POLL_S)
            return groups.replicas[METADATA_PID]
        # A gossiping seed starts alone; the placement controller adds the others.
        gossiped = groups.placer is not None
        return await groups.ensure_open(
            METADATA_PID,
            (groups.node_id,) if gossiped else groups.view.node_ids,
            METADATA_LOG_CONFIG,
            apply=on_committed,
            replay=True,
        )

    def placement(self) -> dict[str, float]:
        return self._groups.placement()

    def decommission_view(self) -> tuple[frozenset[str], dict[str, float]]:
        if self._groups.placer is None:
            raise MetadataError(
                ErrorCode.INVALID_REQUEST,
                "a --peers cluster cannot decommission a node: its replica sets are fixed by "
                "the --peers list and never move; a cluster formed with --join moves them",
            )
        return self._groups.members_known(), self._groups.placement()
