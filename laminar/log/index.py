"""The on-disk index format and the recovery scan, with no I/O.

A segment is two files, `<base>.store` (record payloads back to back, nothing
else) and `<base>.index`:

    header (16 bytes): magic b"LMIX" | u16 version | u16 entry size | u64 base index
    entry  (48 bytes): u64 position | u32 length | u16 flags | u16 reserved
                       | u64 payload checksum | u64 term | i64 timestamp_ms
                       | u64 entry checksum

All little-endian. Entry `k` describes record `base + k`, so a lookup is
arithmetic. The payload checksum is xxh3-64 of the record bytes; the entry
checksum is xxh3-64 of the entry's first 40 bytes, so a torn or zeroed entry
is recognised without trusting any of its fields. The last entry of every
group-commit flush carries the FLUSH_END flag.

Facts the recovery scan relies on:

- A flush is acknowledged only after its store and index writes are synced,
  so an acknowledged flush is on disk whole: every entry valid, the last one
  marked FLUSH_END.
- A crash can leave unacknowledged flushes behind in any state: entries
  without payloads, payloads without entries, partial entries, zeroed
  preallocated space, or (pages persist out of order) a valid entry after an
  invalid one, e.g. an empty record after a lost one.
- At most MAX_FLUSHES_IN_FLIGHT flushes are ever in flight, so a flush is
  acknowledged before the one MAX_FLUSHES_IN_FLIGHT places after it starts.
  An incomplete flush followed by that many others is therefore not a torn
  write but damage to acknowledged data: it is kept and reported (reading it
  raises `RecordCorrupted`), because trimming would delete the good records
  after it. Any other incomplete flush is a torn tail and is trimmed, together
  with everything after it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import xxhash

MAGIC = b"LMIX"
VERSION = 1
HEADER = struct.Struct("<4sHHQ")
HEADER_BYTES = HEADER.size  # 16
ENTRY = struct.Struct("<QIHHQQqQ")
ENTRY_BYTES = ENTRY.size  # 48
_ENTRY_FIELDS = struct.Struct("<QIHHQQq")  # the checksummed part: 40 bytes
_CHECKSUMMED = _ENTRY_FIELDS.size
_CHECKSUM = struct.Struct("<Q")

FLUSH_END = 0x1
MAX_FLUSHES_IN_FLIGHT = 16

payload_checksum = xxhash.xxh3_64_intdigest
_entry_checksum = xxhash.xxh3_64_intdigest


def encode_header(base_index: int) -> bytes:
    return HEADER.pack(MAGIC, VERSION, ENTRY_BYTES, base_index)


def decode_header(data: bytes | bytearray) -> int | None:
    """The base index named by an index header, or None if it is not one of ours."""
    if len(data) < HEADER_BYTES:
        return None
    magic, version, entry_bytes, base_index = HEADER.unpack_from(data, 0)
    if magic != MAGIC or version != VERSION or entry_bytes != ENTRY_BYTES:
        return None
    return int(base_index)


def encode_entry(
    position: int, length: int, checksum: int, term: int, timestamp_ms: int, flags: int = 0
) -> bytes:
    fields = _ENTRY_FIELDS.pack(position, length, flags, 0, checksum, term, timestamp_ms)
    return fields + _CHECKSUM.pack(_entry_checksum(fields))


def mark_flush_end(index: bytearray, slot: int) -> None:
    """Set FLUSH_END on entry `slot` of an in-memory index, in place."""
    offset = HEADER_BYTES + slot * ENTRY_BYTES
    position, length, flags, _, checksum, term, timestamp_ms = _ENTRY_FIELDS.unpack_from(
        index, offset
    )
    entry = encode_entry(position, length, checksum, term, timestamp_ms, flags | FLUSH_END)
    index[offset : offset + ENTRY_BYTES] = entry


@dataclass(frozen=True, slots=True)
class Entry:
    """One decoded index entry."""

    position: int
    length: int
    flags: int
    checksum: int
    term: int
    timestamp_ms: int


def entry_at(index: bytes | bytearray, slot: int) -> Entry | None:
    """Decode entry `slot`, or None if its own checksum does not hold."""
    offset = HEADER_BYTES + slot * ENTRY_BYTES
    position, length, flags, _, checksum, term, timestamp_ms, own = ENTRY.unpack_from(index, offset)
    if _entry_checksum(memoryview(index)[offset : offset + _CHECKSUMMED]) != own:
        return None
    return Entry(position, length, flags, checksum, term, timestamp_ms)


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


def scan_segment(
    index: bytes | bytearray, store_size: int, store: bytes | bytearray | None
) -> ScanResult:
    """Find what to keep of a segment from its index bytes (header included).

    With `store` (the store file's bytes) every payload is checked against its
    checksum; without it only entries and their bounds are, which suffices for a
    segment that was sealed cleanly.
    """
    slots = max(0, (len(index) - HEADER_BYTES) // ENTRY_BYTES)
    entries = [entry_at(index, slot) for slot in range(slots)]
    valid = [_holds(entry, store_size, store) for entry in entries]

    # Split the slots into flushes: each ends at a valid FLUSH_END entry; slots
    # after the last one form an unterminated (never complete) group.
    groups: list[tuple[int, int, bool]] = []  # (start, end, complete)
    start = 0
    for slot, entry in enumerate(entries):
        if valid[slot] and entry is not None and entry.flags & FLUSH_END:
            groups.append((start, slot + 1, all(valid[start : slot + 1])))
            start = slot + 1
    if start < slots:
        groups.append((start, slots, False))

    keep = slots
    complete_after = sum(1 for _, _, complete in groups if complete)
    for group_start, _, complete in groups:
        if complete:
            complete_after -= 1
        elif complete_after < MAX_FLUSHES_IN_FLIGHT:
            keep = group_start  # a torn tail: it and all after it go
            break

    cut = index[HEADER_BYTES + keep * ENTRY_BYTES : HEADER_BYTES + slots * ENTRY_BYTES]
    trimmed = sum(1 for at in range(0, len(cut), ENTRY_BYTES) if any(cut[at : at + ENTRY_BYTES]))
    ends = [e.position + e.length for e, ok in zip(entries[:keep], valid, strict=False) if ok and e]
    return ScanResult(
        entries=keep,
        store_bytes=max(ends, default=0),
        corrupt_slots=[slot for slot in range(keep) if not valid[slot]],
        trimmed_entries=trimmed,
    )


def _holds(entry: Entry | None, store_size: int, store: bytes | bytearray | None) -> bool:
    """Is `entry` intact, and (given the store's bytes) its payload too?"""
    if entry is None or entry.position + entry.length > store_size:
        return False
    if store is None:
        return True
    payload = memoryview(store)[entry.position : entry.position + entry.length]
    return payload_checksum(payload) == entry.checksum
