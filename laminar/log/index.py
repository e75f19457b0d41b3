"""The on-disk index format and the recovery scan, with no I/O.

A segment is two files, `<base>.store` (record payloads back to back, nothing
else) and `<base>.index`:

    header (16 bytes): magic b"LMIX" | u16 version | u16 entry size | u64 base index
    entry  (40 bytes): u64 position | u32 length | u64 payload checksum
                       | u64 term | i64 timestamp_ms | u32 entry checksum

All little-endian. Entry `k` describes record `base + k`, so a lookup is
arithmetic. The payload checksum is xxh3-64 of the record bytes; the entry
checksum is xxh32 of the entry's first 36 bytes, so a torn or zeroed entry is
recognised without trusting any of its fields.

Facts the recovery scan relies on:

- A flush writes the store before the index and acknowledges only after both
  are synced, so every acknowledged record has a complete entry and payload.
- What a crash can leave behind the last acknowledged record: payload bytes
  without entries, a partial entry, zeroed preallocated space, or entries
  whose payload never reached the disk. All of it is a *tail*: nothing valid
  follows it.
- Damage before a valid record is not a torn write but corruption of data that
  may have been acknowledged. Trimming it would delete good records after it,
  so it is kept and reported, and reading it raises `RecordCorrupted`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import xxhash

MAGIC = b"LMIX"
VERSION = 1
HEADER = struct.Struct("<4sHHQ")
HEADER_BYTES = HEADER.size  # 16
ENTRY = struct.Struct("<QIQQqI")
ENTRY_BYTES = ENTRY.size  # 40
_ENTRY_FIELDS = struct.Struct("<QIQQq")  # the checksummed part: 36 bytes
_CHECKSUMMED = _ENTRY_FIELDS.size

payload_checksum = xxhash.xxh3_64_intdigest
_entry_checksum = xxhash.xxh32_intdigest


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


def encode_entry(position: int, length: int, checksum: int, term: int, timestamp_ms: int) -> bytes:
    fields = _ENTRY_FIELDS.pack(position, length, checksum, term, timestamp_ms)
    return fields + _entry_checksum(fields).to_bytes(4, "little")


@dataclass(frozen=True, slots=True)
class Entry:
    """One decoded index entry."""

    position: int
    length: int
    checksum: int
    term: int
    timestamp_ms: int


def entry_at(index: bytes | bytearray, slot: int) -> Entry | None:
    """Decode entry `slot`, or None if its own checksum does not hold."""
    offset = HEADER_BYTES + slot * ENTRY_BYTES
    position, length, checksum, term, timestamp_ms, own = ENTRY.unpack_from(index, offset)
    if _entry_checksum(memoryview(index)[offset : offset + _CHECKSUMMED]) != own:
        return None
    return Entry(position, length, checksum, term, timestamp_ms)


@dataclass(slots=True)
class ScanResult:
    """What the recovery scan found in one segment.

    `entries` is the number of slots to keep; `store_bytes` is where the store's
    valid data ends. `corrupt_slots` lists kept slots whose entry or payload is
    damaged (they read as `RecordCorrupted`). `trimmed_entries` counts torn slots
    after the last valid one (zeroed preallocated slots are not counted).
    """

    entries: int
    store_bytes: int
    corrupt_slots: list[int] = field(default_factory=list)
    trimmed_entries: int = 0


def scan_segment(
    index: bytes | bytearray, store_size: int, store: bytes | bytearray | None
) -> ScanResult:
    """Find the valid prefix of a segment from its index bytes (header included).

    With `store` (the store file's bytes) every payload is checked against its
    checksum; without it only entries and their bounds are, which suffices for a
    segment that was sealed cleanly.
    """
    slots = max(0, (len(index) - HEADER_BYTES) // ENTRY_BYTES)
    valid: list[bool] = []
    ends: list[int] = []
    for slot in range(slots):
        entry = entry_at(index, slot)
        ok = entry is not None and entry.position + entry.length <= store_size
        if ok and store is not None:
            assert entry is not None
            payload = memoryview(store)[entry.position : entry.position + entry.length]
            ok = payload_checksum(payload) == entry.checksum
        valid.append(ok)
        ends.append(entry.position + entry.length if ok and entry is not None else 0)
    keep = slots
    while keep and not valid[keep - 1]:
        keep -= 1
    torn = index[HEADER_BYTES + keep * ENTRY_BYTES : HEADER_BYTES + slots * ENTRY_BYTES]
    # Zeroed slots are preallocated space, not damage; count only real debris.
    trimmed = sum(
        1
        for slot in range(keep, slots)
        if any(torn[(slot - keep) * ENTRY_BYTES : (slot - keep + 1) * ENTRY_BYTES])
    )
    return ScanResult(
        entries=keep,
        store_bytes=max(ends[:keep], default=0),
        corrupt_slots=[slot for slot in range(keep) if not valid[slot]],
        trimmed_entries=trimmed,
    )
