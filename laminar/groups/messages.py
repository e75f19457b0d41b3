"""What members and admins send to the coordinator core, and its answers.

Both cores and the shells share these frozen types; the wire codec of the
later step maps them to frames (and Kafka's consumer-group heartbeat maps to
`HeartbeatRequest` one to one). Every answer carries `wait_for`: the sequence
number of the last record the core had emitted when it answered. The shell
sends the answer only once its positions log has committed that record, so
nothing is shown that could still be lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from laminar.groups.errors import GroupError

TopicPartition = tuple[str, int]
"""(topic name, partition number)."""

JOIN: Final = 0
"""A heartbeat's member epoch when joining (with member_id None)."""
LEAVE: Final = -1
"""A heartbeat's member epoch when leaving: its partitions are free at once."""
LEAVE_STATIC: Final = -2
"""A static member's temporary leave: it keeps its partitions until its
session expires, so a restart with the same instance id takes them back
without a rebalance."""


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """A member's heartbeat (KIP-848's ConsumerGroupHeartbeat, simplified).

    `owned` is what the member holds when sending (delivering or still
    releasing); `revision` is the revision of the last answer it applied: the
    coordinator counts a partition missing from `owned` as released only when
    the member has seen its latest answer.
    """

    group: str
    member_id: str | None
    member_epoch: int
    revision: int
    instance_id: str | None
    topics: tuple[str, ...]
    owned: frozenset[TopicPartition]
    session_timeout_s: float
    assignor: str | None = None
    paused: frozenset[TopicPartition] = frozenset()
    """What of `owned` the application paused (shown by describe: why a member is idle)."""
    may_hold: bool = True
    """Whether the coordinator may hold the answer (a long poll). A Kafka
    classic member's heartbeat shares its connection with its commits, served
    one at a time: it is never held."""


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    error: GroupError
    wait_for: int
    member_id: str | None = None
    epoch: int = 0
    revision: int = 0
    assignment: frozenset[TopicPartition] = frozenset()
    """What the member may hold now: anything it holds outside it, it releases."""
    heartbeat_interval_s: float = 1.0


@dataclass(frozen=True, slots=True)
class CommitRequest:
    """Positions a member commits: the index of the next record to read."""

    group: str
    member_id: str
    member_epoch: int
    positions: Mapping[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class CommitAnswer:
    error: GroupError
    """A refusal of the whole request (LIMIT, INVALID); else NONE and `results`."""
    wait_for: int
    results: Mapping[TopicPartition, GroupError] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Position:
    """A committed position: `index` is the next record the group reads."""

    index: int
    member_id: str
    """Who committed it ("" for an admin reset)."""
    member_epoch: int
    commit_ms: int


@dataclass(frozen=True, slots=True)
class PositionsAnswer:
    error: GroupError
    wait_for: int
    positions: Mapping[TopicPartition, Position] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MemberView:
    member_id: str
    instance_id: str | None
    epoch: int
    topics: tuple[str, ...]
    assignment: frozenset[TopicPartition]
    revoking: frozenset[TopicPartition]
    """Partitions the member was told to release and has not yet."""
    pending: frozenset[TopicPartition]
    """Partitions of its target still held by another member."""
    away: bool
    """A static member between its temporary leave and its return or expiry."""
    paused: frozenset[TopicPartition] = frozenset()
    """Partitions of its assignment it paused itself (as its last heartbeat said)."""

    @property
    def state(self) -> str:
        """Why a member may be idle: away, revoking, waiting, idle or stable."""
        if self.away:
            return "away"
        if self.revoking:
            return "revoking"
        if self.pending:
            return "waiting"
        return "stable" if self.assignment else "idle"

    @property
    def idle_reason(self) -> str | None:
        """Why it delivers nothing now, if it does not (None: it delivers)."""
        if self.away:
            return "away: a static member between restarts (its partitions wait for it)"
        if self.assignment - self.paused:
            return None
        if self.assignment:
            return "paused: it paused every partition it owns"
        if self.revoking:
            return "releasing: it must give up partitions before it gets new ones"
        if self.pending:
            return f"waiting: for {len(self.pending)} partition(s) another member is releasing"
        return "no partitions left to give it (more members than partitions)"


@dataclass(frozen=True, slots=True)
class GroupView:
    group: str
    epoch: int
    assignor: str
    members: tuple[MemberView, ...]
    positions: Mapping[TopicPartition, Position]

    @property
    def topics(self) -> set[str]:
        """The topics it reads: subscribed or with a committed position (its lag's)."""
        return {t for m in self.members for t in m.topics} | {t for t, _ in self.positions}

    @property
    def state(self) -> str:
        """empty, stable (every member has its target) or reconciling."""
        if not self.members:
            return "empty"
        settled = all(m.epoch == self.epoch and m.state in ("stable", "idle") for m in self.members)
        return "stable" if settled else "reconciling"


@dataclass(frozen=True, slots=True)
class DescribeAnswer:
    error: GroupError
    wait_for: int
    group: GroupView | None = None


@dataclass(frozen=True, slots=True)
class ListAnswer:
    error: GroupError
    wait_for: int
    groups: tuple[GroupView, ...] = ()


@dataclass(frozen=True, slots=True)
class AdminAnswer:
    """The answer to reset_positions and delete_group."""

    error: GroupError
    wait_for: int
