"""One segment: a store file, an index file, and the index kept in memory.

The whole index of a segment lives in a bytearray (40 bytes a record), so a
lookup is one `unpack_from` and reading a record costs one `pread`. The
bytearray also holds entries that are staged for the next flush but not yet
durable; `entries` counts only the published (readable) ones.

Invariants, with `n = entries` and `s = staged_entries`:
    0 <= n <= s;  len(index_buf) == HEADER_BYTES + s * ENTRY_BYTES
    store_end >= published_store_end; both are logical sizes, not file sizes
    (a file may be longer: preallocated zeros).
"""

from __future__ import annotations

import bisect
import logging
import os
import sys
from array import array
from collections.abc import Sequence
from itertools import accumulate, repeat
from typing import NamedTuple

from .errors import LogCorrupted, RecordCorrupted
from .index import (
    ENTRY,
    ENTRY_BYTES,
    HEADER_BYTES,
    decode_header,
    encode_entry,
    encode_header,
    entry_at,
    mark_flush_end,
    payload_checksum,
    scan_segment,
)
from .record import Record, RecordBatch
from .storage import Buffer, Storage, StorageBackend

log = logging.getLogger(__name__)

# `_columns` reads the index as native u64/u32 words; the format is little-endian.
if sys.byteorder != "little":
    raise ImportError(
        "laminar.log reads its little-endian index natively: needs a little-endian host"
    )
_U64_WORDS = ENTRY_BYTES // 8  # position, length|flags, checksum, term, timestamp, own checksum
_U32_WORDS = ENTRY_BYTES // 4  # the length is u32 word 2

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
    ) -> None:
        self.directory = directory
        self.base_index = base_index
        self.store = store
        self.index = index
        self.index_buf = index_buf
        self.entries = entries
        self.staged_entries = entries
        self.store_end = store_end
        self.published_store_end = store_end
        self.sealed = False

    # -- lifecycle -------------------------------------------------------

    @classmethod
    async def create(cls, backend: StorageBackend, directory: str, base_index: int) -> Segment:
        """Create empty files for a new segment; the header is written, not synced."""
        store_path, index_path = segment_paths(directory, base_index)
        store = await backend.open(store_path, create=True)
        index = await backend.open(index_path, create=True)
        await store.truncate(0)
        header = encode_header(base_index)
        await index.truncate(0)
        await index.writev([header], 0, sync=False)
        return cls(directory, base_index, store, index, bytearray(header), 0, 0)

    @classmethod
    async def recover(
        cls, backend: StorageBackend, directory: str, base_index: int, *, verify_payloads: bool
    ) -> Segment:
        """Open an existing segment and trim its torn tail (see `index.scan_segment`)."""
        store_path, index_path = segment_paths(directory, base_index)
        store = await backend.open(store_path, create=True)
        index = await backend.open(index_path, create=True)
        index_bytes = await index.read_at(index.size, 0)
        header_base = decode_header(index_bytes)
        if header_base is None:
            if any(index_bytes[HEADER_BYTES:]):
                raise LogCorrupted(
                    f"{index_path}: the index header is damaged but entries follow it; "
                    "refusing to guess. Move the segment away to recover the rest."
                )
            # A segment created just before a crash: nothing in it was acknowledged.
            await store.close()
            await index.close()
            return await cls.create(backend, directory, base_index)
        if header_base != base_index:
            raise LogCorrupted(
                f"{index_path}: header names base index {header_base}, file name says {base_index}"
            )
        clean = (
            not verify_payloads
            and (index.size - HEADER_BYTES) % ENTRY_BYTES == 0
            and store.size == _last_end(index_bytes)
        )
        store_bytes = None if clean else await store.read_at(store.size, 0)
        scan = scan_segment(index_bytes, store.size, store_bytes)
        if scan.corrupt_slots:
            log.warning(
                "%s: %d damaged record(s) before valid ones (first at index %d); "
                "they are kept and read as corrupt",
                index_path,
                len(scan.corrupt_slots),
                base_index + scan.corrupt_slots[0],
            )
        debris = store_bytes is not None and any(memoryview(store_bytes)[scan.store_bytes :])
        if scan.trimmed_entries or debris:
            log.warning(
                "%s: trimmed a torn tail (%d index entr(ies), %d store byte(s))",
                index_path,
                scan.trimmed_entries,
                store.size - scan.store_bytes,
            )
        index_len = HEADER_BYTES + scan.entries * ENTRY_BYTES
        buf = bytearray(index_bytes[:index_len])
        segment = cls(directory, base_index, store, index, buf, scan.entries, scan.store_bytes)
        await segment.trim_files()
        # What a killed process left in the page cache may not be on disk yet:
        # make it so before anything is appended after it.
        await store.sync()
        await index.sync()
        return segment

    async def trim_files(self) -> None:
        """Cut both files to their logical sizes (drops preallocation and torn tails)."""
        index_len = HEADER_BYTES + self.staged_entries * ENTRY_BYTES
        if self.index.size != index_len:
            await self.index.truncate(index_len)
        if self.store.size != self.store_end:
            await self.store.truncate(self.store_end)

    async def seal(self) -> None:
        """Make this a read-only segment: trimmed to size and durable."""
        self.sealed = True
        await self.trim_files()
        await self.store.sync()
        await self.index.sync()

    async def close(self) -> None:
        await self.store.close()
        await self.index.close()

    async def remove(self, backend: StorageBackend) -> None:
        await self.close()
        store_path, index_path = segment_paths(self.directory, self.base_index)
        await backend.remove(index_path)
        await backend.remove(store_path)

    # -- appending (staging) --------------------------------------------------

    @property
    def end_index(self) -> int:
        """One past the last published record."""
        return self.base_index + self.entries

    @property
    def staged_end_index(self) -> int:
        return self.base_index + self.staged_entries

    def stage(self, values: Sequence[bytes], term: int, timestamp_ms: int) -> None:
        """Append entries for `values` to the in-memory index (not yet on disk)."""
        buf = self.index_buf
        position = self.store_end
        for value in values:
            length = len(value)
            buf += encode_entry(position, length, payload_checksum(value), term, timestamp_ms)
            position += length
        self.staged_entries += len(values)
        self.store_end = position

    def publish(self, entries: int, store_end: int) -> None:
        """Mark staged entries up to `entries` durable and readable."""
        self.entries = entries
        self.published_store_end = store_end

    def unstage(self) -> None:
        """Drop staged entries that were never published (after a failed flush)."""
        self.staged_entries = self.entries
        self.store_end = self.published_store_end
        del self.index_buf[HEADER_BYTES + self.entries * ENTRY_BYTES :]

    # -- reading -------------------------------------------------------------

    def _entry(self, index: int) -> tuple[int, int, int, int, int]:
        slot = index - self.base_index
        position, length, _, _, checksum, term, ts, _ = ENTRY.unpack_from(
            self.index_buf, HEADER_BYTES + slot * ENTRY_BYTES
        )
        return position, length, checksum, term, ts

    async def read(self, index: int) -> Record:
        entry = entry_at(self.index_buf, index - self.base_index)
        if entry is None:
            raise RecordCorrupted(f"record {index}: its index entry is damaged")
        value = await self.store.read_at(entry.length, entry.position)
        if len(value) != entry.length or payload_checksum(value) != entry.checksum:
            raise RecordCorrupted(
                f"record {index}: stored bytes do not match the checksum taken at append"
            )
        return Record(index, entry.term, entry.timestamp_ms, value)

    async def read_range(
        self, start: int, max_bytes: int, max_records: int, *, at_least_one: bool
    ) -> list[Record]:
        """Published records from `start` within this segment, up to `max_bytes` of
        values and `max_records` records; the first one regardless of size if
        `at_least_one`. Stops before a damaged record unless it is the first,
        which raises `RecordCorrupted`."""
        span = await self._read_span(start, max_bytes, max_records, at_least_one)
        if span is None:
            return []
        values = list(map(span.payload.__getitem__, map(slice, span.starts, span.starts[1:])))
        rows = zip(
            range(start, start + len(values)), span.terms, span.timestamps, values, strict=True
        )
        return list(map(tuple.__new__, repeat(Record), rows))  # Record(...) minus its __new__

    async def read_batch(self, start: int, max_bytes: int, max_records: int) -> RecordBatch:
        """Published records from `start` in columns (see `RecordBatch`): at least
        one, then up to `max_bytes` and `max_records`. Stops before a damaged
        record unless it is the first, which raises `RecordCorrupted`."""
        span = await self._read_span(start, max_bytes, max_records, True)
        assert span is not None
        return RecordBatch(start, span.terms, span.timestamps, span.lengths, span.payload)

    def read_batch_nowait(self, start: int, max_bytes: int, max_records: int) -> RecordBatch | None:
        """`read_batch` when the store can be read without waiting (its bytes are
        in the page cache), verified the same way; None when it cannot, or when
        the first record is damaged: `read_batch` then says what it says."""
        columns = self._columns(start, max_bytes, max_records, True)
        assert columns is not None
        payload = self.store.read_at_nowait(columns.size, columns.positions[0])
        if payload is None:
            return None
        span = columns.verified(payload)
        if not span.lengths:
            return None
        return RecordBatch(start, span.terms, span.timestamps, span.lengths, span.payload)

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
        """The index columns of the published entries from `start` on that fit
        the limits, or None if none does.

        The index is read as arrays of u64 and u32 words (48-byte entries are 6
        and 12 of them); lengths are read in growing chunks, so a small read does
        not touch the whole segment's index. Columns are strided copies into
        arrays: no Python int per record.
        """
        first = start - self.base_index
        end = min(self.entries, first + max_records)
        with (
            memoryview(self.index_buf) as raw,
            raw[HEADER_BYTES : HEADER_BYTES + end * ENTRY_BYTES] as entries,
            entries.cast("I") as u32,
            entries.cast("Q") as u64,
        ):
            count = 0
            total = 0
            upto = first
            chunk = 64
            while upto < end:
                stop = min(end, upto + chunk)
                more = u32[upto * _U32_WORDS + 2 : stop * _U32_WORDS : _U32_WORDS].tolist()
                totals = list(accumulate(more, initial=total))
                if totals[-1] > max_bytes:
                    fit = bisect.bisect_right(totals, max_bytes) - 1
                    if fit == 0 and not count and at_least_one:
                        fit = 1
                    count += fit
                    break
                count += len(more)
                total = totals[-1]
                upto = stop
                chunk *= 4
            if not count:
                return None
            a, b = first * _U64_WORDS, (first + count) * _U64_WORDS
            lengths = _column(
                "I", u32[first * _U32_WORDS + 2 : (first + count) * _U32_WORDS : _U32_WORDS]
            )
            return _Columns(
                _column("Q", u64[a:b:_U64_WORDS]),
                lengths,
                _column("Q", u64[a + 2 : b : _U64_WORDS]),
                _column("Q", u64[a + 3 : b : _U64_WORDS]),
                _column("Q", u64[a + 4 : b : _U64_WORDS]),
                list(accumulate(lengths, initial=0)),
            )

    async def truncate_to(self, index: int) -> None:
        """Remove records from `index` on, durably.

        The new last entry is rewritten with FLUSH_END, or recovery would take
        the records before it for a torn flush.
        """
        slot = index - self.base_index
        store_end = 0
        for earlier in range(slot - 1, -1, -1):
            entry = entry_at(self.index_buf, earlier)
            if entry is not None:
                store_end = entry.position + entry.length
                break
        self.entries = self.staged_entries = slot
        self.store_end = self.published_store_end = store_end
        del self.index_buf[HEADER_BYTES + slot * ENTRY_BYTES :]
        self.sealed = False
        await self.trim_files()
        if slot and entry_at(self.index_buf, slot - 1) is not None:
            mark_flush_end(self.index_buf, slot - 1)
            offset = HEADER_BYTES + (slot - 1) * ENTRY_BYTES
            await self.index.writev([bytes(self.index_buf[offset:])], offset, sync=False)
        await self.store.sync()
        await self.index.sync()

    def timestamp_of(self, index: int) -> int:
        return self._entry(index)[4]

    def term_of(self, index: int) -> int:
        return self._entry(index)[3]

    def first_index_at_or_after(self, timestamp_ms: int) -> int:
        """The first published index with a timestamp >= `timestamp_ms` (binary search)."""
        lo = bisect.bisect_left(
            range(self.base_index, self.end_index), timestamp_ms, key=self.timestamp_of
        )
        return self.base_index + lo

    @property
    def store_bytes(self) -> int:
        return self.published_store_end


def _column(typecode: str, words: memoryview) -> array[int]:
    """A strided view of the index (one field of consecutive entries) as an array."""
    column = array(typecode)
    column.frombytes(words.tobytes())
    return column


class _Span(NamedTuple):
    """Records read for `read_range`/`read_batch`: columns, value offsets
    (`starts[k]` to `starts[k + 1]` in `payload`), and the store bytes."""

    lengths: array[int]
    terms: array[int]
    timestamps: array[int]
    starts: list[int]
    payload: Buffer


class _Columns(NamedTuple):
    """Index fields of consecutive entries, and where each value starts in a
    read of their store bytes (`starts[k]`; `starts[-1]` is the read's size)."""

    positions: array[int]
    lengths: array[int]
    checksums: array[int]
    terms: array[int]
    timestamps: array[int]
    starts: list[int]

    @property
    def size(self) -> int:
        return self.starts[-1]

    def verified(self, payload: Buffer) -> _Span:
        """The records whose stored bytes in `payload` (read from the first
        position on) match their checksums and sit where the index says, up to
        the first that does not. Per record only its checksum is computed in
        Python; the comparisons are of whole arrays."""
        starts = self.starts
        with memoryview(payload) as view:
            slices = map(view.__getitem__, map(slice, starts, starts[1:]))
            sums = array("Q", map(payload_checksum, slices))
        expected = array("Q", map(self.positions[0].__add__, starts))
        del expected[-1]
        positions, checksums = self.positions, self.checksums
        if sums == checksums and positions == expected and len(payload) == starts[-1]:
            return _Span(self.lengths, self.terms, self.timestamps, starts, payload)
        good = next(
            (k for k in range(len(sums)) if sums[k] != checksums[k] or positions[k] != expected[k]),
            len(sums),
        )
        return _Span(
            self.lengths[:good],
            self.terms[:good],
            self.timestamps[:good],
            starts[: good + 1],
            payload[: starts[good]],
        )


def _last_end(index_bytes: bytes) -> int:
    """End of the last entry's payload as the entry says (0 for an empty index)."""
    slots = (len(index_bytes) - HEADER_BYTES) // ENTRY_BYTES
    if slots <= 0:
        return 0
    position, length, *_ = ENTRY.unpack_from(index_bytes, HEADER_BYTES + (slots - 1) * ENTRY_BYTES)
    return int(position + length)
