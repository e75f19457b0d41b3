"""Ready (the work a core hands its application) and Status (a snapshot of a core)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from .messages import (
    APPEND,
    HEARTBEAT,
    INSTALL,
    QUIESCE,
    TIMEOUT_NOW,
    Anomaly,
    Entry,
    HardState,
    Message,
    ReadState,
)

SENDABLE_BEFORE_PERSIST = frozenset({APPEND, HEARTBEAT, INSTALL, QUIESCE, TIMEOUT_NOW})
"""What only a leader sends: they promise nothing about the sender's disk, so
they may go out before or while its entries are written (Raft thesis 10.2.1).
The leader still counts its own log toward a commit only once `advance` says
it is persisted. A leader's term and vote were persisted before it could win
(votes and vote requests wait for the write), so these never carry a term the
sender could forget. Everything else (append and vote answers above all, as in
etcd raft's msgsAfterAppend; also vote requests, since this core counts its
own vote at once) waits for the write."""


@dataclass(frozen=True, slots=True)
class Ready:
    """Everything a core asks of its application, in the order it must be done:

    1. send `messages_before_persist()` (may be skipped until step 3);
    2. persist `entries`, then `hard_state` (durably if `must_sync`);
    3. only then send `messages_after_persist()` (`messages` is both);
    4. apply `committed`; then call `core.advance(ready)`.
    """

    entries: tuple[Entry, ...] = ()
    """Entries to save to stable storage BEFORE `messages_after_persist()` are sent, replacing
    any stored suffix that starts at or after entries[0].index. If entries[0]
    has kind "anchor", the follower is installing the leader's log: discard the
    whole stored log first and continue it after that (index, term); the anchor
    is not an entry of the log (MemoryStorage.append does all this)."""

    hard_state: HardState | None = None
    """The hard state to save AFTER `entries` and BEFORE `messages_after_persist()`
    are sent (a vote must be durable before it is granted); None if unchanged."""

    messages: tuple[Message, ...] = ()
    """Every message to send: those of `messages_before_persist()` at any
    time, the rest only AFTER `entries` and `hard_state` are persisted (an
    acknowledgement or a vote is a promise about what is on disk). They may be
    sent in any order, dropped or duplicated: the core copes."""

    committed: tuple[Entry, ...] = ()
    """Committed entries to apply AFTER the writes above, in index order, each
    once (after a restart, again from the first index unless
    `RaftConfig.applied` said otherwise). Includes the core's own entries
    (kind "noop", "config"): an application skips what is not "normal". A
    "config" entry takes effect inside the core when `advance` is called."""

    read_states: tuple[ReadState, ...] = ()
    """Confirmed `read_index()` requests: answer each once the application has
    applied its index."""

    dropped_reads: tuple[int, ...] = ()
    """`read_index()` requests that will never be confirmed (leadership was
    lost): fail them so the client retries at the new leader."""

    anomalies: tuple[Anomaly, ...] = ()
    """Messages refused as implausible (a term far ahead, a second leader in a
    term, an impossible install) or installs that discarded committed entries:
    log and count each (see `Anomaly`)."""

    must_sync: bool = False
    """True if `entries` or `hard_state` must be made durable (fsync) before
    `messages_after_persist()` go out: there are entries, or the term or vote changed. A change of
    the commit index alone may be written without a sync."""

    def messages_before_persist(self) -> tuple[Message, ...]:
        """The leader's appends, heartbeats and the like: they may go out
        while this Ready is being persisted (see `SENDABLE_BEFORE_PERSIST`)."""
        return tuple(m for m in self.messages if m.kind in SENDABLE_BEFORE_PERSIST)

    def messages_after_persist(self) -> tuple[Message, ...]:
        """Answers and votes: send them only once this Ready is persisted."""
        return tuple(m for m in self.messages if m.kind not in SENDABLE_BEFORE_PERSIST)


class FollowerProgress(NamedTuple):
    """A leader's view of one member: where its log matches and how it is fed."""

    match: int
    next: int
    state: str  # "probe" or "replicate"
    learner: bool
    recent_active: bool


@dataclass(frozen=True)
class Status:
    """A consistent snapshot of one core."""

    node_id: str
    role: str  # "follower", "pre_candidate", "candidate" or "leader"
    term: int
    leader: str | None
    commit: int
    applied: int
    vote: str | None
    first_index: int
    last_index: int
    voters: tuple[str, ...]
    learners: tuple[str, ...]
    quiesced: bool
    transferee: str | None = None
    config_pending: bool = False
    """Leader only: a membership change or the leader's no-op is not applied
    yet, so the next change would be refused."""
    progress: Mapping[str, FollowerProgress] = field(default_factory=dict)
    """Leader only: every member's progress (the shell reports follower lag and
    decides when a learner has caught up)."""
