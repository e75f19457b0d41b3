"""The recovery scan on hand-built segments (no files, no event loop)."""

from __future__ import annotations

import pytest

from laminar.log.errors import UnsupportedFormat
from laminar.log.index import (
    DURABLE,
    ENTRY_BYTES,
    FLUSH_END,
    HEADER,
    MAGIC,
    MAX_FLUSHES_IN_FLIGHT,
    SYNCED,
    decode_header,
    encode_entry,
    encode_header,
    entry_at,
    payload_checksum,
    scan_segment,
    set_marks,
)


def build(
    flushes: list[list[bytes]], base: int = 0, flags: int = SYNCED
) -> tuple[bytearray, bytearray]:
    """Index and store bytes for `flushes`, each a list of record values."""
    index = bytearray(encode_header(base))
    store = bytearray()
    slot = 0
    for values in flushes:
        for value in values:
            index += encode_entry(len(store), len(value), payload_checksum(value), 1, 99, flags)
            store += value
            slot += 1
        set_marks(index, slot - 1, FLUSH_END)
    return index, store


def test_header_round_trip_and_rejection() -> None:
    assert decode_header(encode_header(12345)) == 12345
    assert decode_header(b"\0" * 16) is None
    assert decode_header(b"LMIX") is None


def test_another_format_version_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedFormat, match=r"format version 1 .* reads version 2"):
        decode_header(HEADER.pack(MAGIC, 1, 48, 0), "x.index")


def test_entry_checksum_catches_any_flipped_bit_outside_the_marks() -> None:
    index, _ = build([[b"abc"]])
    assert entry_at(index, 0) is not None
    marks_byte = 16 + 44
    for bit in range(ENTRY_BYTES * 8):
        damaged = bytearray(index)
        damaged[16 + bit // 8] ^= 1 << (bit % 8)
        byte = 16 + bit // 8
        if byte == marks_byte or byte > marks_byte:
            assert entry_at(damaged, 0) is not None  # marks and padding are not covered
        else:
            assert entry_at(damaged, 0) is None


def test_marks_change_one_byte_and_keep_the_entry_valid() -> None:
    index = bytearray(encode_header(0)) + encode_entry(5, 6, 7, 8, 9, SYNCED)
    before = bytes(index)
    set_marks(index, 0, FLUSH_END | DURABLE)
    assert [i for i in range(len(index)) if index[i] != before[i]] == [16 + 44]
    entry = entry_at(index, 0)
    assert entry is not None
    fields = (entry.position, entry.length, entry.checksum, entry.term, entry.timestamp_ms)
    assert fields == (5, 6, 7, 8, 9)
    assert (entry.flags, entry.marks) == (SYNCED, FLUSH_END | DURABLE)


def test_clean_segment_keeps_everything() -> None:
    index, store = build([[b"a", b"bb"], [b"ccc"]])
    scan = scan_segment(index, len(store), store)
    assert (scan.entries, scan.store_bytes, scan.corrupt_slots, scan.trimmed_entries) == (
        3,
        6,
        [],
        0,
    )


def test_unterminated_last_flush_is_torn() -> None:
    index, store = build([[b"a"], [b"b", b"c"]])
    del index[-ENTRY_BYTES:]  # the FLUSH_END entry of the last flush never made it
    scan = scan_segment(index, len(store), store)
    assert (scan.entries, scan.store_bytes, scan.trimmed_entries) == (1, 1, 1)


def test_valid_empty_record_after_a_lost_one_is_still_torn() -> None:
    """Pages persisting out of order: the last flush's empty record is intact,
    the one before it lost its payload. The whole flush goes."""
    index, store = build([[b"keep"], [b"lost", b""]])
    scan = scan_segment(index, len(b"keep"), store[: len(b"keep")])
    assert (scan.entries, scan.store_bytes) == (1, 4)


def test_zeroed_preallocation_is_not_counted_as_debris() -> None:
    index, store = build([[b"a"]])
    scan = scan_segment(index + bytes(ENTRY_BYTES * 10), len(store) + 4096, store + bytes(4096))
    assert (scan.entries, scan.store_bytes, scan.trimmed_entries) == (1, 1, 0)


def test_old_damage_is_kept_and_reported() -> None:
    flushes = [[bytes([i])] for i in range(MAX_FLUSHES_IN_FLIGHT + 3)]
    index, store = build(flushes)
    store[1] ^= 0xFF  # flush 1 is followed by more flushes than can be in flight
    scan = scan_segment(index, len(store), store)
    assert scan.entries == len(flushes)
    assert scan.corrupt_slots == [1]


def test_recent_damage_is_a_torn_tail() -> None:
    flushes = [[bytes([i])] for i in range(MAX_FLUSHES_IN_FLIGHT)]
    index, store = build(flushes)
    store[1] ^= 0xFF  # only MAX-2 flushes follow: it may have been in flight
    scan = scan_segment(index, len(store), store)
    assert (scan.entries, scan.corrupt_slots) == (1, [])


def test_unsynced_flushes_prove_nothing_about_earlier_ones() -> None:
    """Under "interval"/"never" a lost flush followed by many intact ones is
    crash debris, not acknowledged data: it is trimmed, not kept as a hole."""
    flushes = [[bytes([i])] for i in range(MAX_FLUSHES_IN_FLIGHT + 10)]
    index, store = build(flushes, flags=0)
    store[1] ^= 0xFF
    scan = scan_segment(index, len(store), store)
    assert (scan.entries, scan.corrupt_slots) == (1, [])


def test_a_durable_mark_proves_everything_before_it() -> None:
    flushes = [[bytes([i])] for i in range(5)]
    index, store = build(flushes, flags=0)
    set_marks(index, 3, DURABLE)
    store[1] ^= 0xFF
    scan = scan_segment(index, len(store), store)
    assert (scan.entries, scan.corrupt_slots) == (5, [1])
    store[4] ^= 0xFF  # after the mark: torn
    scan = scan_segment(index, len(store), store)
    assert (scan.entries, scan.corrupt_slots) == (4, [1])


def test_without_store_bytes_only_entries_are_checked() -> None:
    index, store = build([[b"abc"], [b"def"]])
    store[0] ^= 0xFF
    assert scan_segment(index, len(store), None).entries == 2
    assert scan_segment(index, 3, None).entries == 1  # bounds still checked
