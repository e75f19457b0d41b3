"""The on-disk index format and the recovery scan, with no I/O.

A segment is two files, `<base>.store` (record payloads back to back, nothing
else) and `<base>.index`:

    header (16 bytes): magic b"LMIX" | u16 version | u16 entry size | u64 base index
    entry  (48 bytes): u64 position | u32 length | u16 flags | u16 reserved
                       | u64 payload checksum | u64 term | i64 timestamp_ms
                       | u32 entry checksum | u8 marks | 3 bytes reserved

All little-endian. Entry `k` describes record `base + k`, so a lookup is
arithmetic. The payload checksum is xxh3-64 of the record bytes; the entry
checksum is the low 32 bits of xxh3-64 of the entry's first 40 bytes, so a
torn or zeroed entry is recognised without trusting any of its fields.

`flags` are fixed when the entry is written: SYNCED says its flush was
fdatasynced before anyone was told (policy "always"). `marks` live outside the
checksummed bytes because they are set later, in place, by one-byte writes
(a one-byte write cannot tear, so marking never damages an acknowledged
entry): FLUSH_END on the last entry of every group-commit flush (and on the
new last entry after a truncation), DURABLE on an entry once a sync has made it
and everything before it durable (policies "interval" and "never", and after a
truncation).

Version 2 (this one) moved the marks out of the checksum; version 1 data is
refused with a message that says so, never guessed at.

Facts the recovery scan relies on, for the segment that takes appends (a
segment followed by another was sealed, synced whole, and is never trimmed):

- A flush is acknowledged under "always" only after its store and index writes
  are synced, so an acknowledged flush is on disk whole: every entry valid, the
  last one marked FLUSH_END.
- A crash can leave unacknowledged flushes behind in any state: entries
  without payloads, payloads without entries, partial entries, zeroed
  preallocated space, or (pages persist out of order) a valid entry after an
  invalid one, e.g. an empty record after a lost one.
- At most MAX_FLUSHES_IN_FLIGHT flushes are ever in flight, so a SYNCED flush
  is acknowledged before the one MAX_FLUSHES_IN_FLIGHT places after it starts.
  Unsynced flushes ("interval", "never") prove nothing about earlier ones; a
  DURABLE mark at slot d proves slots 0..d durable.
- An incomplete flush with such a proof after it is damage to acknowledged
  data: it is kept and reported (reading it raises `RecordCorrupted`), because
  trimming would delete the good records after it. The first incomplete flush
  without one is a torn tail and is trimmed, with everything after it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import xxhash

from .errors import UnsupportedFormat

MAGIC = b"LMIX"
VERSION = 2
HEADER = struct.Struct("<4sHHQ")
HEADER_BYTES = HEADER.size  # 16
ENTRY = struct.Struct("<QIHHQQqIB3x")
ENTRY_BYTES = ENTRY.size  # 48
TERM_OFFSET = struct.calcsize("<QIHHQ")  # 24: where an entry's term starts
_ENTRY_FIELDS = struct.Struct("<QIHHQQq")  # the checksummed part: 40 bytes
_CHECKSUMMED = _ENTRY_FIELDS.size
_TRAILER = struct.Struct("<IB3x")  # entry checksum, marks
MARKS_OFFSET = _CHECKSUMMED + 4  # 44: the byte that FLUSH_END and DURABLE live in

SYNCED = 0x1  # flags
FLUSH_END = 0x1  # marks
DURABLE = 0x2  # marks
MAX_FLUSHES_IN_FLIGHT = 16

payload_checksum = xxhash.xxh3_64_intdigest
_xxh3 = xxhash.xxh3_64_intdigest


def _entry_checksum(fields: bytes | memoryview) -> int:
    return _xxh3(fields) & 0xFFFFFFFF


def encode_header(base_index: int) -> bytes:
    return HEADER.pack(MAGIC, VERSION, ENTRY_BYTES, base_index)


def decode_header(data: bytes | bytearray, path: str = "index") -> int | None:
    """The base index an index header names, or None if the bytes are not a
    header at all (zeros, a torn write). A header of another format version
    raises `UnsupportedFormat`: such data is never guessed at."""
    if len(data) < HEADER_BYTES:
        return None
    magic, version, entry_bytes, base_index = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        return None
    if version != VERSION or entry_bytes != ENTRY_BYTES:
        raise UnsupportedFormat(
            f"{path}: written in log format version {version} ({entry_bytes}-byte entries); "
            f"this laminar reads version {VERSION} ({ENTRY_BYTES}-byte entries) only. "
            "Use the laminar release that wrote it, or move the data directory away."
        )
    return int(base_index)


def encode_entry(
    position: int, length: int, checksum: int, term: int, timestamp_ms: int, flags: int = 0
) -> bytes:
    fields = _ENTRY_FIELDS.pack(position, length, flags, 0, checksum, term, timestamp_ms)
    return fields + _TRAILER.pack(_entry_checksum(fields), 0)


def marks_offset(slot: int) -> int:
    """File offset of entry `slot`'s marks byte."""
    return HEADER_BYTES + slot * ENTRY_BYTES + MARKS_OFFSET


def set_marks(index: bytearray, slot: int, marks: int) -> None:
    """Add `marks` to entry `slot` of an in-memory index, in place."""
    index[marks_offset(slot)] |= marks


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """One decoded index entry."""

    position: int
    length: int
    flags: int
    checksum: int
    term: int
    timestamp_ms: int
    marks: int


def entry_at(index: bytes | bytearray, slot: int) -> IndexEntry | None:
    """Decode entry `slot`, or None if its own checksum does not hold."""
    offset = HEADER_BYTES + slot * ENTRY_BYTES
    position, length, flags, _, checksum, term, timestamp_ms, own, marks = ENTRY.unpack_from(
        index, offset
    )
    if _entry_checksum(memoryview(index)[offset : offset + _CHECKSUMMED]) != own:
        return None
    return IndexEntry(position, length, flags, checksum, term, timestamp_ms, marks)


@dataclass(slots=True)
class ScanResult:
    """What the recovery scan found in one segment.

    `entries` is the number of slots to keep; `store_bytes` is where the store's
    valid data ends. `corrupt_slots` lists kept slots whose entry or payload is
    damaged (they read as `RecordCorrupted`). `trimmed_entries` counts torn
    slots cut off the end (zeroed preallocated slots are not counted).
    """

    entries: int
    store_bytes: int
    corrupt_slots: list[int] = field(default_factory=list)
    trimmed_entries: int = 0


def scan_sealed(index: bytes | bytearray, entries: int, store_size: int) -> ScanResult:
    """A sealed segment's `entries` slots (the next segment's base says how many):
    nothing is trimmed, damaged entries are reported. Payloads are checked when
    read, as for every segment."""
    corrupt: list[int] = []
    store_bytes = 0
    for slot in range(entries):
        entry = entry_at(index, slot)
        if entry is None or entry.position + entry.length > store_size:
            corrupt.append(slot)
        else:
            store_bytes = max(store_bytes, entry.position + entry.length)
    return ScanResult(entries, store_bytes, corrupt)


def scan_segment(
    index: bytes | bytearray, store_size: int, store: bytes | bytearray | None
) -> ScanResult:
    """Find what to keep of the write segment from its index bytes (header included).

    With `store` (the store file's bytes) every payload is checked against its
    checksum; without it only entries and their bounds are.
    """
    slots = max(0, (len(index) - HEADER_BYTES) // ENTRY_BYTES)
    entries = [entry_at(index, slot) for slot in range(slots)]
    valid = [_holds(entry, store_size, store) for entry in entries]
    # A DURABLE mark counts on an intact entry only: garbage may have any bits set.
    durable_upto = max(
        (slot + 1 for slot, e in enumerate(entries) if e is not None and e.marks & DURABLE),
        default=0,
    )

    # Split the slots into flushes: each ends at a valid FLUSH_END entry; slots
    # after the last one form an unterminated (never complete) group.
    groups: list[tuple[int, int, bool, bool]] = []  # (start, end, complete, synced)
    start = 0
    for slot, entry in enumerate(entries):
        if valid[slot] and entry is not None and entry.marks & FLUSH_END:
            complete = all(valid[start : slot + 1])
            groups.append((start, slot + 1, complete, complete and bool(entry.flags & SYNCED)))
            start = slot + 1
    if start < slots:
        groups.append((start, slots, False, False))

    keep = slots
    synced_after = sum(1 for group in groups if group[3])
    for group_start, group_end, complete, synced in groups:
        synced_after -= synced
        acknowledged = group_end <= durable_upto or synced_after >= MAX_FLUSHES_IN_FLIGHT
        if not complete and not acknowledged:
            keep = group_start  # a torn tail: it and all after it go
            break

    cut = index[HEADER_BYTES + keep * ENTRY_BYTES : HEADER_BYTES + slots * ENTRY_BYTES]
    trimmed = sum(1 for at in range(0, len(cut), ENTRY_BYTES) if any(cut[at : at + ENTRY_BYTES]))
    ends = [e.position + e.length for e, ok in zip(entries[:keep], valid, strict=False) if ok and e]
    corrupt = [slot for slot in range(keep) if not valid[slot]]
    store_bytes = max(ends, default=0)
    if corrupt and not valid[keep - 1]:
        # Damaged records are last: where their payloads end is unknown, so the
        # store keeps everything it has (never trim acknowledged bytes).
        store_bytes = store_size
    return ScanResult(keep, store_bytes, corrupt, trimmed)


def _holds(entry: IndexEntry | None, store_size: int, store: bytes | bytearray | None) -> bool:
    """Is `entry` intact, and (given the store's bytes) its payload too?"""
    if entry is None or entry.position + entry.length > store_size:
        return False
    if store is None:
        return True
    payload = memoryview(store)[entry.position : entry.position + entry.length]
    return payload_checksum(payload) == entry.checksum
