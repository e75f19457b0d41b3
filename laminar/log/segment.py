"""One segment: a store file, an index file, and the index kept in memory.

The whole index of a segment lives in a bytearray (48 bytes a record), so a
lookup is one `unpack_from` and reading a record costs one `pread`. The
bytearray also holds entries that are placed for the next flush but not yet
durable; `entries` counts only the released (readable) ones.

Invariants, with `n = entries` and `s = placed_entries`:
    0 <= n <= s;  len(index_buf) == HEADER_BYTES + s * ENTRY_BYTES
    store_end >= released_store_end; both are logical sizes, not file sizes
    (a file may be longer: preallocated zeros).
    `corrupt_slots` (sorted) are the slots recovery found damaged; the in-memory
    index is otherwise exactly what was written, so reads trust it except there.
"""

from __future__ import annotations

import bisect
import os
import sys
from array import array
from collections.abc import Sequence
from itertools import accumulate, repeat
from typing import NamedTuple

from laminar._native import ffi as _ffi  # the C loops (laminar/native_build.py)
from laminar._native import lib as _lib

from .errors import RecordCorrupted
from .index import (
    DURABLE,
    ENTRY,
    ENTRY_BYTES,
    FLUSH_END,
    HEADER_BYTES,
    TERM_OFFSET,
    encode_header,
    entry_at,
    marks_offset,
    payload_checksum,
    set_marks,
)
from .record import LogBatch, LogRecord
from .storage import Buffer, Storage, StorageBackend

# `_columns` reads the index in C as native words; the format is little-endian.
if sys.byteorder != "little":
    raise ImportError(
        "laminar.log reads its little-endian index natively: needs a little-endian host"
    )

STORE_SUFFIX = ".store"
INDEX_SUFFIX = ".index"


def segment_paths(directory: str, base_index: int) -> tuple[str, str]:
    stem = os.path.join(directory, f"{base_index:020d}")
    return stem + STORE_SUFFIX, stem + INDEX_SUFFIX


class Segment:
    """A contiguous run of records starting at `base_index`."""

    def __init__(
        self,
        directory: str,
        base_index: int,
        store: Storage,
        index: Storage,
        index_buf: bytearray,
        entries: int,
        store_end: int,
        corrupt_slots: Sequence[int] = (),
    ) -> None:
        self.directory = directory
        self.base_index = base_index
        self.store = store
        self.index = index
        self.index_buf = index_buf
        self.entries = entries
        self.placed_entries = entries
        self.store_end = store_end
        self.released_store_end = store_end
        self.corrupt_slots = list(corrupt_slots)
        self.sealed = False
        self.closed = False
        self._top_bit_terms: tuple[int, int] | None = None
        """(entries, count) of the last whole-segment `count_top_bit_terms`."""

    # -- lifecycle -------------------------------------------------------

    @classmethod
    async def create(cls, backend: StorageBackend, directory: str, base_index: int) -> Segment:
        """Create the files of a new segment, durable before anything is appended:
        the header synced (so a lost header with records after it is damage,
        never a crash state), then the directory (so a missing store file is
        damage too). A crash before that leaves an empty segment recovery
        recognises and restores."""
        store_path, index_path = segment_paths(directory, base_index)
        store = await backend.open(store_path, create=True)
        index = await backend.open(index_path, create=True)
        for file in (store, index):
            if file.size:  # a file left by a failed removal: start empty
                await file.truncate(0)
        header = encode_header(base_index)
        await index.writev([header], 0, sync=True)
        await backend.sync_dir(directory)
        return cls(directory, base_index, store, index, bytearray(header), 0, 0)

    async def trim_files(self) -> None:
        """Cut both files to their logical sizes (drops preallocation and anything
        placed but never released)."""
        index_len = HEADER_BYTES + self.placed_entries * ENTRY_BYTES
        if self.index.size != index_len:
            await self.index.truncate(index_len)
        if self.store.size != self.store_end:
            await self.store.truncate(self.store_end)

    async def seal(self, *, sync: bool) -> None:
        """Make this a read-only segment, trimmed to size. `sync` when its flushes
        were not synced one by one: a segment followed by another must be
        durable whole before the next one exists (recovery trusts it so)."""
        self.sealed = True
        await self.trim_files()
        if sync:
            await self.store.sync()
            await self.index.sync()

    async def sync_and_mark_durable(self) -> None:
        """Sync both files, then mark the last released entry DURABLE (proof for
        recovery that everything before it is on disk; see `index`). The mark
        itself reaches the disk with the next sync."""
        await self.store.sync()
        await self.index.sync()
        if self.entries:
            await self.write_marks(self.entries - 1, DURABLE)

    async def write_marks(self, slot: int, marks: int) -> None:
        """Add `marks` to entry `slot`, in memory and on file: a one-byte write,
        which cannot tear, so an acknowledged entry is never put at risk."""
        set_marks(self.index_buf, slot, marks)
        at = marks_offset(slot)
        await self.index.writev([bytes(self.index_buf[at : at + 1])], at, sync=False)

    async def close(self) -> None:
        self.closed = True
        await self.store.close()
        await self.index.close()

    async def remove_index(self, backend: StorageBackend) -> None:
        """First step of removing the segment: unlink its index. If that fails
        nothing has changed. Removal always starts here, so a crash part-way
        leaves a store without index, which recovery knows as removal debris
        (an index without its store it reports as damage)."""
        await backend.remove(segment_paths(self.directory, self.base_index)[1])

    async def remove_store(self, backend: StorageBackend) -> None:
        """Second step: make the index's removal durable, close, unlink the store."""
        try:
            await backend.sync_dir(self.directory)
        finally:
            await self.close()
        await backend.remove(segment_paths(self.directory, self.base_index)[0])

    # -- appending (placing) --------------------------------------------------

    @property
    def end_index(self) -> int:
        """One past the last released record."""
        return self.base_index + self.entries

    @property
    def placed_end_index(self) -> int:
        return self.base_index + self.placed_entries

    def place(self, values: Sequence[bytes], term: int, timestamp_ms: int, flags: int) -> None:
        """Append entries for `values` to the in-memory index (not yet on disk).

        In C (one call whatever the count: a Python loop cost ~0.4 us a
        record); the values are joined for it and the copy dropped at once,
        so what a flush holds is still only the values themselves."""
        count = len(values)
        data = b"".join(values)
        entries = bytearray(count * ENTRY_BYTES)
        _lib.laminar_index_entries(
            _ffi.from_buffer(data),
            _ffi.from_buffer("uint32_t[]", array("I", map(len, values))),
            count,
            self.store_end,
            term,
            timestamp_ms,
            flags,
            _ffi.from_buffer(entries),
        )
        self.index_buf += entries
        self.placed_entries += count
        self.store_end += len(data)

    def release(self, entries: int, store_end: int) -> None:
        """Mark placed entries up to `entries` durable and readable."""
        self.entries = entries
        self.released_store_end = store_end

    def drop_unreleased(self) -> None:
        """Drop placed entries that were never released (after a failed flush)."""
        self.placed_entries = self.entries
        self.store_end = self.released_store_end
        del self.index_buf[HEADER_BYTES + self.entries * ENTRY_BYTES :]

    # -- reading -------------------------------------------------------------

    def _entry(self, index: int) -> tuple[int, int, int, int, int]:
        slot = index - self.base_index
        position, length, _, _, checksum, term, ts, _, _ = ENTRY.unpack_from(
            self.index_buf, HEADER_BYTES + slot * ENTRY_BYTES
        )
        return position, length, checksum, term, ts

    def first_corrupt_at_or_after(self, slot: int) -> int | None:
        """The first slot >= `slot` that recovery found damaged, if any."""
        at = bisect.bisect_left(self.corrupt_slots, slot)
        return self.corrupt_slots[at] if at < len(self.corrupt_slots) else None

    async def read(self, index: int) -> LogRecord:
        entry = entry_at(self.index_buf, index - self.base_index)
        if entry is None:
            raise RecordCorrupted(f"record {index}: its index entry is damaged")
        value = await self.store.read_at(entry.length, entry.position)
        if len(value) != entry.length or payload_checksum(value) != entry.checksum:
            raise RecordCorrupted(
                f"record {index}: stored bytes do not match the checksum taken at append"
            )
        return LogRecord(index, entry.term, entry.timestamp_ms, value)

    async def read_range(
        self, start: int, max_bytes: int, max_records: int, *, at_least_one: bool
    ) -> list[LogRecord]:
        """Released records from `start` within this segment, up to `max_bytes` of
        values and `max_records` records; the first one regardless of size if
        `at_least_one`. Stops before a damaged record unless it is the first,
        which raises `RecordCorrupted`."""
        span = await self._read_span(start, max_bytes, max_records, at_least_one)
        if span is None:
            return []
        starts = list(accumulate(span.lengths, initial=0))
        values = list(map(span.payload.__getitem__, map(slice, starts, starts[1:])))
        rows = zip(
            range(start, start + len(values)), span.terms, span.timestamps, values, strict=True
        )
        return list(map(tuple.__new__, repeat(LogRecord), rows))  # LogRecord(...) minus its __new__

    async def read_batch(self, start: int, max_bytes: int, max_records: int) -> LogBatch:
        """Released records from `start` in columns (see `LogBatch`): at least
        one, then up to `max_bytes` and `max_records`. Stops before a damaged
        record unless it is the first, which raises `RecordCorrupted`."""
        span = await self._read_span(start, max_bytes, max_records, True)
        assert span is not None
        return LogBatch(start, span.terms, span.timestamps, span.lengths, span.payload)

    def read_batch_nowait(self, start: int, max_bytes: int, max_records: int) -> LogBatch | None:
        """`read_batch` when the store can be read without waiting (its bytes are
        in the page cache), verified the same way; None when it cannot, or when
        the first record is damaged: `read_batch` then says what it says."""
        try:
            columns = self._columns(start, max_bytes, max_records, True)
        except RecordCorrupted:
            return None
        assert columns is not None
        payload = self.store.read_at_nowait(columns.size, columns.positions[0])
        if payload is None:
            return None
        span = columns.verified(payload)
        if not span.lengths:
            return None
        return LogBatch(start, span.terms, span.timestamps, span.lengths, span.payload)

    async def _read_span(
        self, start: int, max_bytes: int, max_records: int, at_least_one: bool
    ) -> _Span | None:
        """Index columns and store bytes of the records from `start` that fit the
        limits, cut before the first damaged one (`_Columns.verified`)."""
        columns = self._columns(start, max_bytes, max_records, at_least_one)
        if columns is None:
            return None
        span = columns.verified(await self.store.read_at(columns.size, columns.positions[0]))
        if not span.lengths:
            await self.read(start)  # raises RecordCorrupted with the reason
        return span

    def _columns(
        self, start: int, max_bytes: int, max_records: int, at_least_one: bool
    ) -> _Columns | None:
        """The index columns of the released entries from `start` on that fit
        the limits, or None if none does: two C loops over the in-memory index
        (how many fit, then their fields as arrays), no Python per record."""
        first = start - self.base_index
        end = min(self.entries, first + max_records)
        damaged = self.first_corrupt_at_or_after(first)
        if damaged is not None and damaged < end:
            if damaged == first:
                raise RecordCorrupted(f"record {start}: its index entry or payload is damaged")
            end = damaged  # serve what comes before it; the next read raises
        if end <= first:
            return None
        total = _ffi.new("uint64_t *")
        with _ffi.from_buffer(self.index_buf) as index:  # released at once: the index grows
            entries = index + HEADER_BYTES + first * ENTRY_BYTES
            count = _lib.laminar_fit(entries, end - first, max_bytes, at_least_one, total)
            if not count:
                return None
            columns = _Columns(
                _ZERO_U64 * count,
                _ZERO_U32 * count,
                _ZERO_U64 * count,
                _ZERO_U64 * count,
                _ZERO_U64 * count,
                total[0],
            )
            _lib.laminar_columns(
                entries,
                count,
                _ffi.from_buffer("uint64_t[]", columns.positions),
                _ffi.from_buffer("uint32_t[]", columns.lengths),
                _ffi.from_buffer("uint64_t[]", columns.checksums),
                _ffi.from_buffer("uint64_t[]", columns.terms),
                _ffi.from_buffer("uint64_t[]", columns.timestamps),
            )
        return columns

    async def truncate_to(self, index: int) -> None:
        """Remove records from `index` on, durably, never risking those before it.

        Order matters (a power cut can stop it anywhere): first the new last
        entry is marked FLUSH_END | DURABLE with a one-byte write and the index
        synced, so recovery takes the records before the cut for a complete,
        durable flush; then the index is cut and synced, so the removed entries
        cannot come back; the store is cut last (its extra bytes are debris
        recovery trims). Cutting first would leave a flush without its end
        mark, which recovery trims as torn: records before the cut would be
        lost. Cutting the store before the index is durably cut would leave
        marked-durable entries without payloads: damage.
        """
        self._top_bit_terms = None
        slot = index - self.base_index
        if slot and self.first_corrupt_at_or_after(slot - 1) == slot - 1:
            raise RecordCorrupted(
                f"cannot truncate at {index}: record {index - 1}, which would become the "
                "last one, is damaged, and recovery could not tell where the log ends"
            )
        last = entry_at(self.index_buf, slot - 1) if slot else None
        store_end = last.position + last.length if last is not None else 0
        await self._mark_new_end(slot)
        await self._cut_index(slot)
        await self._cut_store(store_end)

    async def _mark_new_end(self, slot: int) -> None:
        if slot:
            await self.write_marks(slot - 1, FLUSH_END | DURABLE)
            await self.index.sync()

    async def _cut_index(self, slot: int) -> None:
        self.entries = self.placed_entries = slot
        del self.index_buf[HEADER_BYTES + slot * ENTRY_BYTES :]
        del self.corrupt_slots[bisect.bisect_left(self.corrupt_slots, slot) :]
        self.sealed = False
        await self.index.truncate(HEADER_BYTES + slot * ENTRY_BYTES)
        await self.index.sync()

    async def _cut_store(self, store_end: int) -> None:
        self.store_end = self.released_store_end = store_end
        if self.store.size != store_end:
            await self.store.truncate(store_end)

    def timestamp_of(self, index: int) -> int:
        """The timestamp of record `index`; for a damaged entry, that of the
        nearest intact one before it (timestamps never decrease, so searches
        stay sound), or 0."""
        slot = index - self.base_index
        while slot >= 0 and self.first_corrupt_at_or_after(slot) == slot:
            slot -= 1
        return self._entry(self.base_index + slot)[4] if slot >= 0 else 0

    def term_of(self, index: int) -> int:
        """The term of record `index` from the in-memory index; RecordCorrupted if
        recovery found its entry damaged (a damaged term is never served)."""
        if self.first_corrupt_at_or_after(index - self.base_index) == index - self.base_index:
            raise RecordCorrupted(f"record {index}: its index entry or payload is damaged")
        return self._entry(index)[3]

    def count_top_bit_terms(self, start: int, end: int) -> int:
        """How many records in [start, end) have the top bit of their term set
        (Raft marks its own entries so), from the in-memory index in one
        C-level pass over the terms' top bytes (7 ns per record); a whole
        segment's count is kept until the segment changes."""
        whole = start == self.base_index and end == self.end_index
        cached = self._top_bit_terms
        if whole and cached is not None and cached[0] == self.entries:
            return cached[1]
        first = HEADER_BYTES + (start - self.base_index) * ENTRY_BYTES + TERM_OFFSET + 7
        last = HEADER_BYTES + (end - self.base_index) * ENTRY_BYTES
        tops = self.index_buf[first:last:ENTRY_BYTES]
        count = len(tops) - len(tops.translate(None, _HIGH_BYTES))
        if whole:
            self._top_bit_terms = (self.entries, count)
        return count

    def first_index_at_or_after(self, timestamp_ms: int) -> int:
        """The first released index with a timestamp >= `timestamp_ms` (binary search)."""
        lo = bisect.bisect_left(
            range(self.base_index, self.end_index), timestamp_ms, key=self.timestamp_of
        )
        return self.base_index + lo

    @property
    def store_bytes(self) -> int:
        return self.released_store_end


_HIGH_BYTES = bytes(range(0x80, 0x100))
_ZERO_U64 = array("Q", [0])
_ZERO_U32 = array("I", [0])


class _Span(NamedTuple):
    """Records read for `read_range`/`read_batch`: columns and the store bytes
    (their values back to back)."""

    lengths: array[int]
    terms: array[int]
    timestamps: array[int]
    payload: Buffer


class _Columns(NamedTuple):
    """Index fields of consecutive entries, and the size of a read of their
    store bytes."""

    positions: array[int]
    lengths: array[int]
    checksums: array[int]
    terms: array[int]
    timestamps: array[int]
    size: int

    def verified(self, payload: Buffer) -> _Span:
        """The records whose stored bytes in `payload` (read from the first
        position on) match their checksums and sit where the index says, up to
        the first that does not (one C loop over the read)."""
        good = verified_count(payload, self.positions, self.lengths, self.checksums)
        if good == len(self.lengths) and len(payload) == self.size:
            return _Span(self.lengths, self.terms, self.timestamps, payload)
        return _Span(
            self.lengths[:good],
            self.terms[:good],
            self.timestamps[:good],
            payload[: sum(self.lengths[:good])],
        )


def verified_count(
    payload: Buffer, positions: array[int], lengths: array[int], checksums: array[int]
) -> int:
    """How many records from the first are intact in `payload` (`_Columns.verified`)."""
    with memoryview(payload) as view:
        return int(
            _lib.laminar_verify(
                _ffi.from_buffer(view),
                len(view),
                _ffi.from_buffer("uint64_t[]", positions),
                _ffi.from_buffer("uint32_t[]", lengths),
                _ffi.from_buffer("uint64_t[]", checksums),
                len(lengths),
            )
        )
