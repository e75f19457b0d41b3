"""A coordinator bucket's decisions: one entry per commit id, replayed on restart. No I/O.

The shell (`laminar.writes.coordinator`) appends every entry to the
bucket's decision log (fsync) before `apply`ing it, so this table is always
what the disk says. Entries, as msgpack maps:

    {"k": "c", "id": commit_id, "t": ms, "parts": [[pid, write, task, attempt, batches, records]],
     "p"?: principal}
    {"k": "d", "id": commit_id, "t": ms, "pub": [[pid, first_index, count]], "p"?: principal}
    {"k": "a", "id": commit_id, "t": ms, "p"?: principal}

`p` is the owner (`laminar.security.ownership`): the principal that decided
the commit id, absent for a node without logins. Only the owner may commit it
again, abort it or read its state. "done" repeats it: retention may take the
"committed" entry before it.

Rules:

1. The first decision wins. "committed" (c) is written only after every part
   was checked and claimed on its partition; "done" (d) only after every
   partition answered its publish; "aborted" (a) only if nothing was decided.
2. A commit request for a committed or done id publishes nothing new (a done
   one is answered with its outcome; a committed one is rolled forward, which
   is idempotent on each partition); for an aborted id it is refused.
3. Decisions are remembered `retention_ms` after they were made (default 7
   days), at most `decisions_max` of them (the oldest finished go first): a
   streaming micro-batch run again after that would be published again. A
   committed decision not yet done is never forgotten.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from laminar.wire.writes import Published, StagedPart, WriteState

DECISIONS_MAX: Final = 1_000_000
"""Finished decisions kept per bucket."""


class DecisionLogError(ValueError):
    """A decision log entry does not decode (damage the log's checksums missed)."""


@dataclass(slots=True)
class Decision:
    commit_id: int
    state: str
    decided_ms: int
    parts: tuple[StagedPart, ...] = ()
    """The claimed parts (kept until done)."""
    published: tuple[Published, ...] = ()
    principal: str | None = None
    """Its owner: who decided it (None on a node without logins)."""


class Action(enum.Enum):
    """What a commit request leads to (rule 2)."""

    CHECK_AND_DECIDE = "check and decide"
    ROLL_FORWARD = "roll forward"
    ANSWER_DONE = "answer with the outcome"
    REFUSE = "refuse: aborted"


def committed_entry(
    commit_id: int, parts: tuple[StagedPart, ...], now_ms: int, principal: str | None = None
) -> bytes:
    entry = {"k": "c", "id": commit_id, "t": now_ms, "parts": [p.to_wire() for p in parts]}
    return _pack(_owned(entry, principal))


def done_entry(
    commit_id: int, published: tuple[Published, ...], now_ms: int, principal: str | None = None
) -> bytes:
    entry = {"k": "d", "id": commit_id, "t": now_ms, "pub": [list(p) for p in published]}
    return _pack(_owned(entry, principal))


def aborted_entry(commit_id: int, now_ms: int, principal: str | None = None) -> bytes:
    return _pack(_owned({"k": "a", "id": commit_id, "t": now_ms}, principal))


def _owned(entry: dict[str, Any], principal: str | None) -> dict[str, Any]:
    if principal is not None:
        entry["p"] = principal
    return entry


def _pack(entry: dict[str, Any]) -> bytes:
    packed: bytes = msgpack.packb(entry)
    return packed


class Decisions:
    """The decisions of one coordinator bucket (module docstring)."""

    def __init__(self, retention_ms: int, decisions_max: int = DECISIONS_MAX) -> None:
        self.retention_ms = retention_ms
        self.decisions_max = decisions_max
        self._by_id: OrderedDict[int, Decision] = OrderedDict()  # oldest decision first

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, commit_id: int) -> Decision | None:
        return self._by_id.get(commit_id)

    def state_of(self, commit_id: int) -> str:
        decision = self._by_id.get(commit_id)
        return WriteState.UNKNOWN if decision is None else decision.state

    def action_for_commit(self, commit_id: int) -> Action:
        decision = self._by_id.get(commit_id)
        if decision is None:
            return Action.CHECK_AND_DECIDE
        if decision.state == WriteState.ABORTED:
            return Action.REFUSE
        if decision.state == WriteState.DONE:
            return Action.ANSWER_DONE
        return Action.ROLL_FORWARD

    def pending(self) -> list[Decision]:
        """Committed decisions not yet done (to roll forward)."""
        return [d for d in self._by_id.values() if d.state == WriteState.COMMITTED]

    def apply(self, raw: bytes) -> Decision:
        """Apply one entry (just made durable, or replayed from the log)."""
        try:
            entry = msgpack.unpackb(raw)
            kind, commit_id, at = entry["k"], entry["id"], entry["t"]
        except Exception as exc:  # damage or a bug: the caller names the log
            raise DecisionLogError(f"a decision entry does not decode: {exc}") from None
        if type(commit_id) is not int or type(at) is not int:
            raise DecisionLogError(f"a decision entry has a bad id or time: {entry!r}")
        principal = entry.get("p")
        if principal is not None and type(principal) is not str:
            raise DecisionLogError(f"a decision entry has a bad owner: {entry!r}")
        decision = self._by_id.get(commit_id)
        if kind == "c":
            parts = tuple(StagedPart.from_wire(p) for p in entry["parts"])
            if decision is None or decision.state == WriteState.COMMITTED:
                decision = Decision(commit_id, WriteState.COMMITTED, at, parts, (), principal)
        elif kind == "d":
            published = tuple(Published.from_wire(p) for p in entry["pub"])
            if decision is None or decision.state != WriteState.ABORTED:
                at = at if decision is None else decision.decided_ms
                decision = Decision(commit_id, WriteState.DONE, at, (), published, principal)
        elif kind == "a":
            if decision is None:
                decision = Decision(commit_id, WriteState.ABORTED, at, principal=principal)
        else:
            raise DecisionLogError(f"unknown decision entry kind {kind!r}")
        self._by_id[commit_id] = decision
        return decision

    def forget_old(self, now_ms: int) -> int:
        """Forget finished decisions past retention or over the bound (rule 3)."""
        forgotten = 0
        finished = [d for d in self._by_id.values() if d.state != WriteState.COMMITTED]
        excess = len(self._by_id) - self.decisions_max
        for decision in finished:  # oldest first
            if excess <= 0 and now_ms - decision.decided_ms < self.retention_ms:
                break
            del self._by_id[decision.commit_id]
            excess -= 1
            forgotten += 1
        return forgotten
