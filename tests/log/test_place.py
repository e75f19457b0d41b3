"""The C loop that writes a placement's index entries (`Segment.place`)
against the format written out in Python (`laminar.log.index.encode_entry`):
the same 48 bytes per record, positions following on from the store's end."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar.log.index import ENTRY_BYTES, HEADER_BYTES, encode_entry, payload_checksum
from laminar.log.segment import Segment
from laminar.log.simdisk import SimulatedDisk


def new_segment(store_end: int) -> Segment:
    async def create() -> Segment:
        disk = SimulatedDisk()
        await disk.make_dir("/p")
        return await Segment.create(disk, "/p", 0)

    segment = asyncio.run(create())
    segment.store_end = store_end
    return segment


def reference(values: list[bytes], position: int, term: int, stamp: int, flags: int) -> bytes:
    entries = []
    for value in values:
        checksum = payload_checksum(value)
        entries.append(encode_entry(position, len(value), checksum, term, stamp, flags))
        position += len(value)
    return b"".join(entries)


@given(
    placements=st.lists(
        st.tuples(
            st.lists(st.binary(max_size=2000), max_size=12),
            st.integers(0, (1 << 64) - 1),  # terms: the top bit marks control entries
            st.integers(0, (1 << 63) - 1),
            st.sampled_from([0, 1, 0xFFFF]),
        ),
        max_size=4,
    ),
    store_end=st.integers(0, 1 << 40),
)
def test_the_entries_are_those_the_format_describes(
    placements: list[tuple[list[bytes], int, int, int]], store_end: int
) -> None:
    segment = new_segment(store_end)
    expected = bytearray(segment.index_buf)
    position = store_end
    for values, term, stamp, flags in placements:
        segment.place(values, term, stamp, flags)
        expected += reference(values, position, term, stamp, flags)
        position += sum(map(len, values))
    assert segment.index_buf == expected
    assert segment.store_end == position
    placed = sum(len(values) for values, *_ in placements)
    assert segment.placed_entries == placed
    assert len(segment.index_buf) == HEADER_BYTES + placed * ENTRY_BYTES


def test_memoryviews_are_placed_as_their_bytes() -> None:
    buffer = b"0123456789" * 50
    views = [memoryview(buffer)[10:110], memoryview(buffer)[200:201]]
    segment = new_segment(0)
    segment.place(views, 3, 7, 1)
    assert segment.index_buf[HEADER_BYTES:] == reference([bytes(v) for v in views], 0, 3, 7, 1)


@pytest.mark.parametrize(("term", "stamp"), [(-1, 0), (1 << 64, 0), (0, 1 << 63)])
def test_a_field_out_of_range_is_refused_and_nothing_is_placed(term: int, stamp: int) -> None:
    segment = new_segment(0)
    with pytest.raises(OverflowError):
        segment.place([b"v"], term, stamp, 0)
    assert segment.placed_entries == 0
    assert len(segment.index_buf) == HEADER_BYTES
