"""SegmentedLogStorage: a partition's SegmentedLog as a Raft log.

How the synchronous core meets the asynchronous log:

- Raft index i is log record i - 1 (partition offsets keep starting at 0).
  Terms are stored per record by the log; the core's term reads are answered
  synchronously from the log's in-memory index (`SegmentedLog.term_of`).
  Entries the core makes itself (no-op, membership) are stored with the top
  bit of the term set and "<kind>\\0" before their data; a reader of the
  partition skips records whose stored term has that bit.
- Timestamps (`stamped=True`, what partitions use): a normal entry's data
  starts with the leader's u64 big-endian timestamp_ms; it is stored in the
  log's timestamp field, not in the record, so fetches return the record as
  the client sent it and every replica seeks by the same timestamps.
- Entry payloads are served synchronously from a bounded cache of recently
  appended entries. Anything older raises EntriesUnavailable and is noted in
  `wanted`; the shell then `await storage.load()`s it and calls
  `core.retry_storage()`. A restart therefore re-delivers committed entries in
  steps of `load_bytes`.
- Persisting a Ready is two awaits: `await storage.append(rd.entries)` (a
  conflicting suffix is truncated first; every log append is durable on
  return, so the log must use flush="always") and then
  `await storage.set_hard_state(rd.hard_state)`, which, when the term or
  vote changed, replaces the small state file `raft-state.json` in the
  partition directory atomically (`laminar.log.storage.atomic_replace`:
  write `raft-state.json.tmp`, sync it, rename, sync the directory), through
  the log's own storage backend, so the power-cut simulator sees it; a new
  commit index alone stays in memory. The temporary name is no segment's
  (those are numbers), so recovery of the log never takes it for one.
- An install (a Ready whose first entry is an anchor) first records the
  anchor in the state file, then resets the log to start after it; a crash in
  between is finished on the next open.
- The applied membership: the shell reports every Ready's committed entries
  (`note_applied`); a membership change among them is written to the state
  file (with the commit index, which is never written beyond what was
  applied), so a restarted node resumes with the voters and learners its log
  applied (`applied_membership`), not with whatever its caller guesses. The
  membership in effect at the commit index a reopen starts from is therefore
  always the latest one recorded: every change at or below it was applied,
  hence written, before that commit index was.
- The term before the first index: the anchor from the state file when the
  log starts right after it; otherwise (retention removed older segments) the
  log's first record serves as the anchor, so Raft's view starts one record
  later than the log's. Retention must only remove applied records.
"""

from __future__ import annotations

import asyncio
import json
import os
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

from laminar.log import LogConfig, LogRecord, SegmentedLog, StorageBackend
from laminar.log.storage import atomic_replace, read_whole
from laminar.raft.config import Membership
from laminar.raft.errors import EntriesUnavailable, RaftError
from laminar.raft.messages import ANCHOR, CONFIG, ENTRY_KINDS, NORMAL, Entry, HardState
from laminar.raft.storage import limit_bytes

STATE_FILE = "raft-state.json"
CONTROL_TERM_BIT = 1 << 63  # set on the stored term of entries the core made
REBUILT_VOTE = "-rebuilt"
"""The vote of a replica rebuilt after its state was lost (`laminar.replication.repair`):
no node id starts with "-", so it grants no vote in its term."""
APPEND_CHUNK_BYTES = 1 << 20  # one log append per chunk (the log bounds batch size)
_FLUSH_ALWAYS = 'Raft needs flush="always" (an acknowledgement promises durability), not {!r}'


@dataclass(frozen=True)
class _State:
    term: int = 0
    vote: str | None = None
    commit: int = 0
    anchor_index: int = 0
    anchor_term: int = 0
    anchor_data: bytes = b""  # the membership at the anchor, as the install carried it
    membership_index: int = 0  # the last membership change applied (0: none recorded)
    membership: bytes = b""  # that change's encoded membership

    def encode(self) -> bytes:
        body = json.dumps(
            {
                "version": 1,
                "term": self.term,
                "vote": self.vote,
                "commit": self.commit,
                "anchor": [self.anchor_index, self.anchor_term, self.anchor_data.hex()],
                "membership": [self.membership_index, self.membership.hex()],
            },
            sort_keys=True,
        ).encode()
        return body + b"\n" + b"%08x\n" % zlib.crc32(body)

    @classmethod
    def decode(cls, raw: bytes, path: str) -> _State:
        body, _, tail = raw.rstrip(b"\n").rpartition(b"\n")
        try:
            if int(tail, 16) != zlib.crc32(body):
                raise ValueError("checksum mismatch")
            fields = json.loads(body)
            if fields["version"] != 1:
                raise ValueError(f"version {fields['version']} is not 1")
            index, term, data = fields["anchor"]
            # Files written before memberships were recorded have none.
            membership_index, membership = fields.get("membership", (0, ""))
            return cls(
                fields["term"],
                fields["vote"],
                fields["commit"],
                index,
                term,
                bytes.fromhex(data),
                membership_index,
                bytes.fromhex(membership),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise RaftError(
                f"{path}: the Raft state file is damaged ({exc}); refusing to guess"
            ) from exc


class SegmentedLogStorage:
    """A RaftStorage over a SegmentedLog. Open with `await SegmentedLogStorage.open(...)`."""

    def __init__(
        self,
        log: SegmentedLog,
        directory: str,
        state: _State,
        cache_bytes: int,
        load_bytes: int,
        stamped: bool = False,
    ) -> None:
        self.log = log
        self.stamped = stamped
        self.directory = directory
        self._state = state
        self._cache_bytes = cache_bytes
        self._load_bytes = load_bytes
        self._tail: list[Entry] = []  # recently appended entries, contiguous
        self._tail_bytes = 0
        self._loaded: list[Entry] = []  # the window the last load() read
        self.wanted: int | None = None  # an index the core asked for and the cache lacked
        self._applied = max(state.commit, state.membership_index)
        """What the shell applied (`note_applied`): the state file's commit never passes it."""

    @classmethod
    async def open(
        cls,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        backend: StorageBackend | None = None,
        cache_bytes: int = 64 << 20,
        load_bytes: int = 4 << 20,
        stamped: bool = False,
    ) -> SegmentedLogStorage:
        config = config or LogConfig()
        if config.flush != "always":
            raise ValueError(_FLUSH_ALWAYS.format(config.flush))
        log = await SegmentedLog.open(os.fspath(directory), config, backend=backend)
        return await cls.over(log, cache_bytes=cache_bytes, load_bytes=load_bytes, stamped=stamped)

    @classmethod
    async def over(
        cls,
        log: SegmentedLog,
        *,
        cache_bytes: int = 64 << 20,
        load_bytes: int = 4 << 20,
        stamped: bool = False,
    ) -> SegmentedLogStorage:
        """A storage over a log opened elsewhere (a shard's partition manager
        keeps opening, retention and deletion of partition logs in one place)."""
        if log.config.flush != "always":
            raise ValueError(_FLUSH_ALWAYS.format(log.config.flush))
        path = log.directory
        state = await read_state(log.backend, path)
        if log.lowest_index < state.anchor_index:
            await log.reset(state.anchor_index)  # an install that a crash interrupted
        storage = cls(log, path, state, cache_bytes, load_bytes, stamped)
        storage._anchor()  # fails now, not later, if the term before the log is unknown
        return storage

    async def close(self) -> None:
        await self.log.close()

    # -- the RaftStorage read side ---------------------------------------------------

    def initial_state(self) -> HardState:
        s = self._state
        # A recorded membership change was applied, so it is committed too.
        return HardState(s.term, s.vote, max(s.commit, s.membership_index))

    def applied_membership(self) -> Membership | None:
        """The membership in effect at `initial_state().commit`: the last change
        the shell applied or the last install's anchor, whichever is later;
        None when neither was recorded (the group's first membership holds)."""
        s = self._state
        index, data = max((s.membership_index, s.membership), (s.anchor_index, s.anchor_data))
        if not data:
            return None
        try:
            return Membership.decode(data)
        except ValueError as exc:
            raise RaftError(f"{self.directory}: the membership at {index}: {exc}") from exc

    def _anchor(self) -> tuple[int, int]:
        """(index, term) of the entry just before first_index()."""
        log = self.log
        if log.lowest_index == self._state.anchor_index:
            return self._state.anchor_index, self._state.anchor_term
        if log.lowest_index < log.highest_index:
            return log.lowest_index + 1, self._stored_term(log.lowest_index)
        raise RaftError(
            f"{self.directory}: the log is empty at {log.lowest_index} and the term before it "
            "is unknown (retention removed records Raft had not anchored)"
        )

    def first_index(self) -> int:
        return self._anchor()[0] + 1

    def last_index(self) -> int:
        return self.log.highest_index

    def term(self, index: int) -> int:
        anchor_index, anchor_term = self._anchor()
        if index == anchor_index:
            return anchor_term
        if anchor_index < index <= self.log.highest_index:
            return self._stored_term(index - 1)
        raise EntriesUnavailable(index)

    def _stored_term(self, record_index: int) -> int:
        return self.log.term_of(record_index) & ~CONTROL_TERM_BIT

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        for window in (self._tail, self._loaded):
            if window and window[0].index <= lo <= window[-1].index:
                first = window[0].index
                return limit_bytes(window[lo - first : hi - first], max_bytes)
        if not self.first_index() <= lo < hi <= self.last_index() + 1:
            raise EntriesUnavailable(lo)
        self.wanted = lo
        raise EntriesUnavailable(lo)

    async def load(self) -> None:
        """Read what the core last asked for (`wanted`) into the cache."""
        lo, self.wanted = self.wanted, None
        if lo is None or lo > self.log.highest_index or lo - 1 < self.log.lowest_index:
            return  # past the end, or compacted since it was asked for (the core re-checks)
        records = await self.log.read_range(lo - 1, max_bytes=self._load_bytes)
        self._loaded = [_decode(record, self.stamped) for record in records]

    # -- writing (the shell does this from each Ready) ----------------------------------

    async def append(self, entries: Sequence[Entry]) -> None:
        """Persist entries durably, replacing any conflicting suffix; an anchor
        first restarts the log after it (see RaftStorage)."""
        if not entries:
            return
        if entries[0].kind == ANCHOR:
            await self._install(entries[0])
            entries = entries[1:]
            if not entries:
                return
        log = self.log
        start = entries[0].index - 1  # the log index of the first entry
        if start > log.highest_index or start < log.lowest_index:
            raise RaftError(
                f"cannot append at {entries[0].index}: the log holds raft indices "
                f"[{self.first_index()}, {self.last_index()}] and must stay contiguous"
            )
        if start < log.highest_index:
            await log.truncate(start)
            self._drop_cached_from(entries[0].index)
        # Place every run before waiting for any, so that the log's group commit
        # makes them durable together: a Ready's entries carry as many
        # timestamps as the milliseconds their proposals spanned, and a flush
        # (write + fdatasync) per run, one after the other, bounded replicated
        # throughput. Order holds: runs are placed in order, synchronously, or
        # (when placing must wait) through `append`, which keeps placing order.
        placed: list[asyncio.Future[None]] = []
        for term, timestamp_ms, values in _chunks(entries, self.stamped):
            now = log.place_nowait(values, term, timestamp_ms)
            if now is None:
                await log.append(values, term, timestamp_ms)
            else:
                placed.append(now[2])
        outcomes = await asyncio.gather(*placed, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        self._cache(entries)

    async def set_hard_state(self, hard_state: HardState) -> None:
        """Persist a term or vote change (with the commit index of the moment).
        A change of the commit index alone is not written: it may stay volatile
        (a restart learns the newer one from the leader), and replacing the
        file costs two fsyncs, which every produce would otherwise pay on
        every replica (the core asks for a sync whenever a Ready has entries)."""
        old = self._state
        self._state = replace(
            old, term=hard_state.term, vote=hard_state.vote, commit=hard_state.commit
        )
        if (old.term, old.vote) != (hard_state.term, hard_state.vote):
            await self._write_state()

    async def note_applied(self, entries: Sequence[Entry]) -> None:
        """The shell applied these committed entries (in order): a membership
        change among them is made durable before this returns."""
        if not entries:
            return
        self._applied = max(self._applied, entries[-1].index)
        changes = [e for e in entries if e.kind == CONFIG]
        if changes and changes[-1].index > self._state.membership_index:
            last = changes[-1]
            self._state = replace(self._state, membership_index=last.index, membership=last.data)
            await self._write_state()

    async def _install(self, anchor: Entry) -> None:
        self._applied = max(self._applied, anchor.index)  # the anchor's membership covers it
        self._state = replace(
            self._state, anchor_index=anchor.index, anchor_term=anchor.term, anchor_data=anchor.data
        )
        await self._write_state()  # first: a crash after it finishes the reset on open
        await self.log.reset(anchor.index)
        self._tail, self._tail_bytes, self._loaded = [], 0, []

    async def _write_state(self) -> None:
        # Never a commit index beyond what was applied: a membership change at
        # or below it must already be recorded (see the module docstring).
        state = replace(self._state, commit=min(self._state.commit, self._applied))
        path = os.path.join(self.directory, STATE_FILE)
        await atomic_replace(self.log.backend, path, state.encode())

    def anchor_membership(self) -> bytes:
        """The encoded membership at the anchor of the last install (b"" if none)."""
        return self._state.anchor_data

    # -- the cache -----------------------------------------------------------------------

    def _cache(self, entries: Sequence[Entry]) -> None:
        tail = self._tail
        if tail and tail[-1].index + 1 != entries[0].index:
            tail.clear()
            self._tail_bytes = 0
        tail.extend(entries)
        self._tail_bytes += sum(len(e.data) for e in entries)
        drop = 0
        while self._tail_bytes > self._cache_bytes and drop < len(tail) - 1:
            self._tail_bytes -= len(tail[drop].data)
            drop += 1
        del tail[:drop]

    def _drop_cached_from(self, index: int) -> None:
        for window in (self._tail, self._loaded):
            if window and window[0].index <= index:
                del window[index - window[0].index :]
            elif window:
                window.clear()
        self._tail_bytes = sum(len(e.data) for e in self._tail)


_STAMP = struct.Struct(">Q")


def _encode(entry: Entry, stamped: bool) -> tuple[int, int | None, bytes]:
    """(stored term, timestamp_ms or None for the log's clock, stored value)."""
    if entry.kind != NORMAL:
        # Stamped: a control entry takes the previous record's timestamp (0 is
        # raised to it), never a local clock, so every replica stores the same.
        control = entry.kind.encode() + b"\0" + entry.data
        return entry.term | CONTROL_TERM_BIT, 0 if stamped else None, control
    if not stamped:
        return entry.term, None, entry.data
    if len(entry.data) < _STAMP.size:
        raise RaftError(f"entry {entry.index} has no timestamp")
    (timestamp_ms,) = _STAMP.unpack_from(entry.data)
    return entry.term, timestamp_ms, entry.data[_STAMP.size :]


def _decode(record: LogRecord, stamped: bool) -> Entry:
    index, term = record.index + 1, record.term
    if not term & CONTROL_TERM_BIT:
        value = _STAMP.pack(record.timestamp_ms) + record.value if stamped else record.value
        return Entry(index, term, value)
    kind, _, data = record.value.partition(b"\0")
    name = kind.decode(errors="replace")
    if name not in ENTRY_KINDS:
        raise RaftError(f"record {record.index}: unknown Raft entry kind {name!r}")
    return Entry(index, term & ~CONTROL_TERM_BIT, data, name)


def _chunks(entries: Sequence[Entry], stamped: bool) -> list[tuple[int, int | None, list[bytes]]]:
    """Runs of entries with one stored term and timestamp, each within APPEND_CHUNK_BYTES."""
    out: list[tuple[int, int | None, list[bytes]]] = []
    size = 0
    for entry in entries:
        term, timestamp_ms, value = _encode(entry, stamped)
        if (
            not out
            or out[-1][0] != term
            or out[-1][1] != timestamp_ms
            or size + len(value) > APPEND_CHUNK_BYTES
        ):
            out.append((term, timestamp_ms, []))
            size = 0
        out[-1][2].append(value)
        size += len(value)
    return out


async def read_state(backend: StorageBackend, directory: str) -> _State:
    """The Raft state file of the replica at `directory` (a missing one is the
    state of a new replica); raises RaftError if it is damaged."""
    path = os.path.join(directory, STATE_FILE)
    raw = await read_whole(backend, path)
    return _State() if raw is None else _State.decode(raw, path)
