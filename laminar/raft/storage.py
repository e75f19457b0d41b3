"""The storage seam: what the core reads (`RaftStorage`) and `MemoryStorage`.

The core only ever *reads* storage; the application writes it, from each
`Ready`, before sending that Ready's messages (see `Ready`). Indices start at
1. A storage holds entries `[first_index, last_index]` plus the term of the
entry just before them (`term(first_index - 1)`), so an empty or compacted
log still knows the (index, term) it continues from.

Invariants a storage keeps (the core relies on them):
- entries are contiguous and their terms never decrease along the log;
- `first_index() - 1 <= hard state commit`: compaction only drops committed
  entries (for a partition log: retention only removes what was committed);
- an `append` whose first entry has kind "anchor" discards the whole log and
  restarts it after that (index, term); any other append replaces the
  conflicting suffix from its first index on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .errors import EntriesUnavailable
from .messages import ANCHOR, Entry, HardState


class RaftStorage(Protocol):
    """The read side of a node's durable Raft state, as the core sees it."""

    def initial_state(self) -> HardState:
        """The hard state last saved (HardState() for a new node)."""
        ...

    def first_index(self) -> int:
        """Index of the first entry held (last_index() + 1 if none)."""
        ...

    def last_index(self) -> int:
        """Index of the last entry held (first_index() - 1 if none)."""
        ...

    def term(self, index: int) -> int:
        """Term of the entry at `index`, for first_index() - 1 <= index <=
        last_index(); raises EntriesUnavailable outside that range."""
        ...

    def entries(self, lo: int, hi: int, max_bytes: int) -> Sequence[Entry]:
        """Entries [lo, hi) up to `max_bytes` of data, at least one.

        May raise EntriesUnavailable if they cannot be served synchronously now
        (a storage backed by async I/O loads them and the core retries later).
        """
        ...


class MemoryStorage:
    """An in-memory RaftStorage: the log and hard state live in this object.

    Whatever was passed to `append` / `set_hard_state` counts as persisted, so
    a simulator models a crash by building a new core over the same object.
    """

    def __init__(self) -> None:
        # _log[0] is the anchor: the (index, term) just before the first entry.
        self._log: list[Entry] = [Entry(0, 0, b"", ANCHOR)]
        self._hard_state = HardState()

    # -- the RaftStorage read side ---------------------------------------------

    def initial_state(self) -> HardState:
        return self._hard_state

    def first_index(self) -> int:
        return self._log[0].index + 1

    def last_index(self) -> int:
        return self._log[0].index + len(self._log) - 1

    def term(self, index: int) -> int:
        offset = index - self._log[0].index
        if offset < 0 or offset >= len(self._log):
            raise EntriesUnavailable(index)
        return self._log[offset].term

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        base = self._log[0].index
        if lo <= base or hi > base + len(self._log) or lo >= hi:
            raise EntriesUnavailable(lo)
        out = self._log[lo - base : hi - base]
        return limit_bytes(out, max_bytes)

    # -- writing (the application does this from each Ready) -------------------

    def append(self, entries: Sequence[Entry]) -> None:
        """Persist entries, replacing any conflicting suffix; an "anchor" first
        entry restarts the log after it (see the module docstring)."""
        if not entries:
            return
        first = entries[0]
        if first.kind == ANCHOR:
            self._log = [first]
            entries = entries[1:]
            if not entries:
                return
            first = entries[0]
        base = self._log[0].index
        if first.index <= base or first.index > base + len(self._log):
            raise ValueError(
                f"cannot append at {first.index}: the log holds "
                f"[{base + 1}, {base + len(self._log) - 1}] and must stay contiguous"
            )
        del self._log[first.index - base :]
        self._log.extend(entries)

    def set_hard_state(self, hard_state: HardState) -> None:
        self._hard_state = hard_state

    def compact(self, index: int) -> None:
        """Drop entries before and at `index`; it becomes the anchor (etcd's
        Compact). Only committed entries may be compacted."""
        base = self._log[0].index
        if index <= base:
            return
        if index > self.last_index():
            raise ValueError(f"cannot compact to {index}: the last index is {self.last_index()}")
        if index > self._hard_state.commit:
            raise ValueError(
                f"cannot compact to {index}: only {self._hard_state.commit} is committed"
            )
        kept = self._log[index - base :]
        kept[0] = Entry(index, kept[0].term, b"", ANCHOR)
        self._log = kept


def limit_bytes(entries: list[Entry], max_bytes: int) -> list[Entry]:
    """The longest prefix of `entries` within `max_bytes` of data, at least one."""
    total = 0
    for position, entry in enumerate(entries):
        total += len(entry.data)
        if total > max_bytes and position:
            return entries[:position]
    return entries
