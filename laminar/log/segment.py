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
from collections.abc import Sequence
from itertools import accumulate

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
from .storage import Storage, StorageBackend

log = logging.getLogger(__name__)

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
        entries, total = self._entries_within(start, max_bytes, max_records, at_least_one)
        if not entries:
            return []
        first_position = entries[0][0]
        blob = await self.store.read_at(total, first_position)
        records: list[Record] = []
        append = records.append
        new_record = tuple.__new__  # Record(...) without its Python-level __new__
        for index, (position, length, _, _, checksum, term, ts, _) in enumerate(entries, start):
            at = position - first_position
            value = blob[at : at + length]
            if payload_checksum(value) != checksum or len(value) != length:
                if records:
                    break  # serve the good prefix; the next read raises for this one
                return [await self.read(index)]
            append(new_record(Record, (index, term, ts, value)))
        return records

    async def read_batch(self, start: int, max_bytes: int, max_records: int) -> RecordBatch:
        """Published records from `start` in columns (see `RecordBatch`): at least
        one, then up to `max_bytes` and `max_records`. Checksums are verified
        with C-level loops only; a damaged record ends the batch before it, or
        raises `RecordCorrupted` if it is the first."""
        entries, total = self._entries_within(start, max_bytes, max_records, True)
        positions, lengths, _, _, checksums, terms, stamps, _ = zip(*entries, strict=True)
        first_position = positions[0]
        payload = await self.store.read_at(total, first_position)
        starts = list(accumulate(lengths, initial=0))
        expected_positions = tuple(first_position + at for at in starts[:-1])
        with memoryview(payload) as view:
            slices = map(view.__getitem__, map(slice, starts, starts[1:]))
            sums = tuple(map(payload_checksum, slices))
        if sums == checksums and positions == expected_positions:
            return RecordBatch(start, terms, stamps, lengths, payload)
        good = next(
            k
            for k in range(len(sums))
            if sums[k] != checksums[k] or positions[k] != expected_positions[k]
        )
        if good == 0:
            record = await self.read(start)  # raises RecordCorrupted with the reason
            value = record.value
            return RecordBatch(start, (record.term,), (record.timestamp_ms,), (len(value),), value)
        return RecordBatch(
            start, terms[:good], stamps[:good], lengths[:good], payload[: starts[good]]
        )

    def _entries_within(
        self, start: int, max_bytes: int, max_records: int, at_least_one: bool
    ) -> tuple[list[tuple[int, ...]], int]:
        """Decoded entries from `start` on that fit the limits, and their byte total.

        Unpacks in growing chunks with `iter_unpack` (one C loop per chunk), so
        a small read does not decode the whole segment's index.
        """
        slot = start - self.base_index
        end_slot = min(self.entries, slot + max_records)
        entries: list[tuple[int, ...]] = []
        total = 0
        chunk = 32
        with memoryview(self.index_buf) as view:
            while slot < end_slot:
                upto = min(end_slot, slot + chunk)
                span = view[HEADER_BYTES + slot * ENTRY_BYTES : HEADER_BYTES + upto * ENTRY_BYTES]
                for entry in ENTRY.iter_unpack(span):
                    length = entry[1]
                    if total + length > max_bytes and (entries or not at_least_one):
                        return entries, total
                    total += length
                    entries.append(entry)
                slot = upto
                chunk *= 4
        return entries, total

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

    def first_index_at_or_after(self, timestamp_ms: int) -> int:
        """The first published index with a timestamp >= `timestamp_ms` (binary search)."""
        lo = bisect.bisect_left(
            range(self.base_index, self.end_index), timestamp_ms, key=self.timestamp_of
        )
        return self.base_index + lo

    @property
    def store_bytes(self) -> int:
        return self.published_store_end


def _last_end(index_bytes: bytes) -> int:
    """End of the last entry's payload as the entry says (0 for an empty index)."""
    slots = (len(index_bytes) - HEADER_BYTES) // ENTRY_BYTES
    if slots <= 0:
        return 0
    position, length, *_ = ENTRY.unpack_from(index_bytes, HEADER_BYTES + (slots - 1) * ENTRY_BYTES)
    return int(position + length)
