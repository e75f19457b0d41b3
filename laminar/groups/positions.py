"""The positions topic: where the committed positions of every consumer group
live, and which of its partitions (so which coordinator) serves a group.

A group's state (members, assignment, committed positions) is kept as records
in one partition of an internal topic, `__consumer_offsets` (Kafka's name, so
Kafka tools recognise it), chosen by a stable hash of the group id. That
partition's leader replica (on a node alone: the shard owning it) is the
group's coordinator. Why this topic and not the data partitions' own logs:
a commit over many partitions is one append to one log, and the Kafka door's
FindCoordinator / OffsetCommit map onto it one to one
(docs/architecture.md, "Consumer groups").

The topic is made by the node on the first FIND_COORDINATOR (never by a
client: names starting with `__` are the node's own), replicated like any
topic, and fsynced before every acknowledgement whatever `--flush` says
(`flush.messages=1`): a commit is acknowledged only once it is durable on a
majority of the partition's replicas.
"""

from __future__ import annotations

import unicodedata
from typing import Final

import xxhash

POSITIONS_TOPIC: Final = "__consumer_offsets"
POSITIONS_CONFIG: Final[dict[str, int | str]] = {
    "flush.messages": 1,
    "segment.bytes": 16 << 20,
    "retention.bytes": 0,
}
"""Durable before acknowledged; retention keeps only what the last committed
checkpoint needs (`GroupService.positions_floor`: a checkpoint restates the
whole state, so what precedes it may go), in segments small enough to go."""
GROUP_PARTITIONS_DEFAULT: Final = 16
GROUP_ID_MAX: Final = 255


def coordinator_partition(group: str, partitions: int) -> int:
    """The positions topic's partition that holds `group` (stable across
    versions and nodes: xxh64 of the UTF-8 id, seed 0)."""
    return xxhash.xxh64_intdigest(group.encode()) % partitions


def group_id_problem(group: str) -> str | None:
    """What is wrong with a group id, or None: 1-255 characters, none of them a
    control character (Kafka allows any string; these would only break the
    CLI's tables and logs)."""
    if not 1 <= len(group) <= GROUP_ID_MAX:
        return f"a group id has 1-{GROUP_ID_MAX} characters, got {len(group)}"
    if any(unicodedata.category(c).startswith("C") for c in group):
        return f"a group id has no control characters: {group[:60]!r}"
    return None
