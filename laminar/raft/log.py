"""RaftLog: the core's view of its log, storage plus an unstable tail.

Entries the core has accepted but the application has not yet persisted live
in `unstable` (starting at index `offset`); everything before `offset` is in
storage. A pending install replaces the whole log: until the application has
persisted it, `anchor` is the (index, term) the log restarts after and storage
is not consulted at all.

Invariants: applied <= committed <= last_index(); first_index() - 1 <= committed;
entries before `offset` match storage; unstable entries are contiguous.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import EntriesUnavailable, RaftError
from .messages import ANCHOR, Entry
from .storage import RaftStorage, limit_bytes


class RaftLog:
    def __init__(self, storage: RaftStorage, applied: int | None) -> None:
        self.storage = storage
        state = storage.initial_state()
        first, last = storage.first_index(), storage.last_index()
        if state.commit > last:
            raise RaftError(f"the hard state commits {state.commit} but the log ends at {last}")
        self.anchor: Entry | None = None
        self.anchor_handed = False
        self.unstable: list[Entry] = []
        self.offset = last + 1
        self.handed = 0  # unstable entries given out in a Ready, not yet advanced
        self.committed = max(state.commit, first - 1)
        if applied is not None and applied > self.committed:
            raise RaftError(f"applied {applied} is beyond the commit index {self.committed}")
        # Without `applied`, deliver again from the first index: the core cannot
        # know what the application applied before the restart.
        self.applied = max(applied if applied is not None else 0, first - 1)

    # -- reading ------------------------------------------------------------

    def first_index(self) -> int:
        if self.anchor is not None:
            return self.anchor.index + 1
        return self.storage.first_index()

    def last_index(self) -> int:
        if self.unstable:
            return self.unstable[-1].index
        if self.anchor is not None:
            return self.anchor.index
        return self.offset - 1

    def last_term(self) -> int:
        term = self.term(self.last_index())
        assert term is not None  # the entry before the first is always known
        return term

    def stable_last_index(self) -> int:
        """The last index the application has persisted (for the leader's own match)."""
        return self.offset - 1

    def term(self, index: int) -> int | None:
        """The term at `index`, or None if this log does not know it."""
        position = index - self.offset
        if position >= 0:
            return self.unstable[position].term if position < len(self.unstable) else None
        if self.anchor is not None:
            return self.anchor.term if index == self.anchor.index else None
        try:
            return self.storage.term(index)
        except EntriesUnavailable:
            return None

    def matches(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        """Entries [lo, hi) within max_bytes (at least one). May raise
        EntriesUnavailable when the stable part cannot be read now."""
        out: list[Entry] = []
        if lo < self.offset:
            stable_hi = min(hi, self.offset)
            out = list(self.storage.entries(lo, stable_hi, max_bytes))
            if out[-1].index < stable_hi - 1 or stable_hi == hi:
                return out
            max_bytes -= sum(len(e.data) for e in out)
            if max_bytes <= 0:
                return out
            lo = stable_hi
        tail = self.unstable[lo - self.offset : hi - self.offset]
        return out + limit_bytes(tail, max_bytes) if out else limit_bytes(tail, max_bytes)

    def is_up_to_date(self, index: int, term: int) -> bool:
        """Paper 5.4.1: is a log ending at (index, term) at least as up to date as ours?"""
        last_term = self.last_term()
        return term > last_term or (term == last_term and index >= self.last_index())

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """The largest (i, t) with i <= index whose term t <= `term` (or whose
        term is unknown, t = 0): where a log with `term` at `index` may match."""
        while index > 0:
            ours = self.term(index)
            if ours is None:
                return index, 0
            if ours <= term:
                return index, ours
            index -= 1
        return 0, 0

    # -- changing -----------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        """Add entries after the last one (the leader's own proposals)."""
        self.unstable.extend(entries)

    def truncate_and_append(self, entries: Sequence[Entry]) -> None:
        """Add entries, replacing our suffix from entries[0].index on."""
        after = entries[0].index - 1
        if after < self.committed:
            raise RaftError(
                f"refusing to overwrite committed entry {after + 1} (commit {self.committed})"
            )
        keep = after + 1 - self.offset  # unstable entries that stay
        if keep >= len(self.unstable):
            self.unstable.extend(entries)
        elif keep >= 0:
            del self.unstable[keep:]
            self.unstable.extend(entries)
            self.handed = min(self.handed, keep)
        else:
            if self.anchor is not None:
                raise RaftError(f"cannot truncate at {after + 1}: the log restarts after it")
            self.offset = after + 1
            self.unstable = list(entries)
            self.handed = 0

    def maybe_append(
        self, prev_index: int, prev_term: int, entries: Sequence[Entry], leader_commit: int
    ) -> int | None:
        """Figure 2's AppendEntries receiver rules 2-5. Returns the index of the
        last entry now known to match the leader's, or None on a mismatch."""
        if not self.matches(prev_index, prev_term):
            return None
        return self.append_matched(prev_index, entries, leader_commit)

    def append_matched(self, prev_index: int, entries: Sequence[Entry], leader_commit: int) -> int:
        """Append entries known to follow a matching `prev_index`."""
        last_new = prev_index + len(entries)
        if entries:
            conflict = self._find_conflict(entries)
            if conflict:
                self.truncate_and_append(entries[conflict - prev_index - 1 :])
        self.commit_to(min(leader_commit, last_new))
        return last_new

    def _find_conflict(self, entries: Sequence[Entry]) -> int:
        """The first index where `entries` disagree with (or extend) our log; 0 if none."""
        last = self.last_index()
        if entries[0].index > last:
            return entries[0].index
        for entry in entries:
            if entry.index > last or self.term(entry.index) != entry.term:
                return entry.index
        return 0

    def install(self, anchor: Entry, entries: Sequence[Entry]) -> None:
        """Restart the log after `anchor` (index, term), a committed entry."""
        anchor_index = anchor.index
        self.anchor = anchor
        self.anchor_handed = False
        self.unstable = list(entries)
        self.offset = anchor_index + 1
        self.handed = 0
        self.committed = max(self.committed, anchor_index)
        self.applied = max(self.applied, anchor_index)

    def commit_to(self, index: int) -> bool:
        if index > self.committed:
            self.committed = index
            return True
        return False

    # -- Ready / advance ----------------------------------------------------

    def has_unstable(self) -> bool:
        return (self.anchor is not None and not self.anchor_handed) or self.handed < len(
            self.unstable
        )

    def take_unstable(self) -> list[Entry]:
        """Unstable entries not yet handed out (after the anchor, if pending)."""
        out = self.unstable[self.handed :]
        self.handed = len(self.unstable)
        if self.anchor is not None and not self.anchor_handed:
            self.anchor_handed = True
            out.insert(0, self.anchor)
        return out

    def stable_to(self, persisted: Sequence[Entry]) -> None:
        """The application persisted `persisted` (a Ready's entries)."""
        if persisted[0].kind == ANCHOR:
            if self.anchor != persisted[0] or not self.anchor_handed:
                return  # a newer install replaced it; that one is still to persist
            self.anchor = None
        elif self.anchor is not None:
            return
        last = persisted[-1]
        position = last.index - self.offset
        if 0 <= position < len(self.unstable) and self.unstable[position].term == last.term:
            del self.unstable[: position + 1]
            self.offset = last.index + 1
            self.handed = max(0, self.handed - position - 1)

    def has_committed(self) -> bool:
        """Are there committed entries to deliver (after the next take_unstable)?"""
        return min(self.committed, self.last_index()) > self.applied

    def take_committed(self, max_bytes: int) -> list[Entry]:
        """Committed entries after `applied`, in order, within max_bytes."""
        hi = min(self.committed, self.offset + self.handed - 1)
        if hi <= self.applied:
            return []
        return self.entries(self.applied + 1, hi + 1, max_bytes)
