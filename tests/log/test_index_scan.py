"""The recovery scan on hand-built segments (no files, no event loop)."""

from __future__ import annotations

from laminar.log.index import (
    ENTRY_BYTES,
    FLUSH_END,
    MAX_FLUSHES_IN_FLIGHT,
    decode_header,
    encode_entry,
    encode_header,
    entry_at,
    mark_flush_end,
    payload_checksum,
    scan_segment,
)


def build(flushes: list[list[bytes]], base: int = 0) -> tuple[bytearray, bytearray]:
    """Index and store bytes for `flushes`, each a list of record values."""
    index = bytearray(encode_header(base))
    store = bytearray()
    for values in flushes:
        for k, value in enumerate(values):
            flags = FLUSH_END if k == len(values) - 1 else 0
            index += encode_entry(len(store), len(value), payload_checksum(value), 1, 99, flags)
            store += value
    return index, store


def test_header_round_trip_and_rejection() -> None:
    assert decode_header(encode_header(12345)) == 12345
    assert decode_header(b"\0" * 16) is None
    assert decode_header(b"LMIX") is None


def test_entry_checksum_catches_any_flipped_bit() -> None:
    index, _ = build([[b"abc"]])
    assert entry_at(index, 0) is not None
    for bit in range(ENTRY_BYTES * 8):
        damaged = bytearray(index)
        damaged[16 + bit // 8] ^= 1 << (bit % 8)
        assert entry_at(damaged, 0) is None


def test_mark_flush_end_keeps_fields() -> None:
    index = bytearray(encode_header(0)) + encode_entry(5, 6, 7, 8, 9)
    mark_flush_end(index, 0)
    entry = entry_at(index, 0)
    assert entry is not None
    assert (entry.position, entry.length, entry.checksum, entry.term, entry.timestamp_ms) == (
        5,
        6,
        7,
        8,
        9,
    )
    assert entry.flags == FLUSH_END


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


def test_without_store_bytes_only_entries_are_checked() -> None:
    index, store = build([[b"abc"], [b"def"]])
    store[0] ^= 0xFF
    assert scan_segment(index, len(store), None).entries == 2
    assert scan_segment(index, 3, None).entries == 1  # bounds still checked
