"""The values that cross the core's boundary: log entries, the hard state, messages.

All of them are immutable (NamedTuples or frozen dataclasses): the network may
drop, duplicate, delay and reorder a `Message`, and nothing it carries refers
back into a core. Entries are NamedTuples because one is made per proposal on
the hot path (a NamedTuple costs a third of a frozen dataclass to build).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

# Entry kinds. Proposals are "normal"; the core makes the others itself.
NORMAL = "normal"
NOOP = "noop"  # appended by a new leader so it can commit entries of earlier terms (paper 5.4.2)
CONFIG = "config"  # a membership change; its data is an encoded `Membership`
# Not a log entry: "restart the log after (index, term)" (install path); its
# data is the encoded membership in effect at that index.
ANCHOR = "anchor"

ENTRY_KINDS = frozenset({NORMAL, NOOP, CONFIG, ANCHOR})


class Entry(NamedTuple):
    """One log entry. `kind` is "normal" for proposals; see the kind constants."""

    index: int  # type: ignore[assignment]  # shadows tuple.index: the API names it so
    term: int
    data: bytes
    kind: str = NORMAL


class HardState(NamedTuple):
    """What must survive a crash besides the log: Figure 2's currentTerm and
    votedFor, plus the commit index (so a restart re-delivers exactly up to it)."""

    term: int = 0
    vote: str | None = None
    commit: int = 0


class Anomaly(NamedTuple):
    """A message no correct member sends, which this replica refused
    (`refused`), or one it acted on though it discarded committed entries
    (an install past a replica's committed prefix: legitimate only when the
    leader's retention removed those records). The shell logs and counts
    each; nothing else depends on them."""

    message: Message
    reason: str
    refused: bool = True


class ReadState(NamedTuple):
    """A confirmed `read_index()`: once the application has applied `index`, a
    read answered from its state is linearizable."""

    request_id: int
    index: int  # type: ignore[assignment]  # shadows tuple.index: the API names it so


# Message kinds.
PRE_VOTE = "pre_vote"
PRE_VOTE_RESP = "pre_vote_resp"
VOTE = "vote"
VOTE_RESP = "vote_resp"
APPEND = "append"
APPEND_RESP = "append_resp"
INSTALL = "install"  # an append of the leader's whole retained log after an anchor
HEARTBEAT = "heartbeat"
HEARTBEAT_RESP = "heartbeat_resp"
TIMEOUT_NOW = "timeout_now"  # leader transfer: "campaign now, ignore leases"
QUIESCE = "quiesce"  # leader to followers: "the group is idle, stop ticking"

MESSAGE_KINDS = frozenset(
    {
        PRE_VOTE,
        PRE_VOTE_RESP,
        VOTE,
        VOTE_RESP,
        APPEND,
        APPEND_RESP,
        INSTALL,
        HEARTBEAT,
        HEARTBEAT_RESP,
        TIMEOUT_NOW,
        QUIESCE,
    }
)

# What a shell may coalesce into one message per node pair per tick: these
# carry only (src, dst, term, index, commit, context) and are small and frequent.
HEARTBEAT_KINDS = frozenset({HEARTBEAT, HEARTBEAT_RESP})


@dataclass(frozen=True, slots=True)
class Message:
    """A message between two cores of one group.

    Field meanings by kind:
    - append / install: `index`, `log_term` = the entry just before `entries`
      (install: the anchor the follower's log restarts after, with `data` =
      the encoded membership in effect at the anchor); `commit` = the leader's
      commit index.
    - append_resp: `index` = the follower's last matching index, or on
      `reject` the rejected `index` with `hint` / `log_term` = where the
      follower's log may match (fast backtracking).
    - vote / pre_vote: `index`, `log_term` = the candidate's last entry;
      `transfer` = campaign of a leader transfer (ignores leases).
    - heartbeat: `commit` = what the follower may commit (at most its
      match); `index` = the leader's own commit index (how far the follower
      must get to hold all that is committed); `context` = the leader's
      read-index round, echoed by heartbeat_resp; `removed` = the receiver
      is no member: its removal at `hint` is committed (it may delete its
      replica).
    - quiesce: `index` = the leader's last index, `commit` its commit.
    """

    kind: str
    src: str
    dst: str
    term: int
    index: int = 0
    log_term: int = 0
    entries: tuple[Entry, ...] = ()
    commit: int = 0
    reject: bool = False
    hint: int = 0
    context: int = 0
    transfer: bool = False
    data: bytes = b""
    removed: bool = False
