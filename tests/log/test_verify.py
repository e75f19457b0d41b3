"""The C loop that checks a read's records (`segment.verified_count`) against
the rule it replaces, written out in Python: consecutive positions from the
first, inside the payload, xxh3 equal to the index's checksum."""

from __future__ import annotations

from array import array

from hypothesis import given
from hypothesis import strategies as st

from laminar.log.index import payload_checksum
from laminar.log.segment import verified_count


def reference(payload: bytes, positions: list[int], lengths: list[int], sums: list[int]) -> int:
    at = 0
    for k, (position, length, checksum) in enumerate(zip(positions, lengths, sums, strict=True)):
        value = payload[at : at + length]
        if position != positions[0] + at or len(value) != length:
            return k
        if payload_checksum(value) != checksum:
            return k
        at += length
    return len(lengths)


@st.composite
def reads(draw: st.DrawFn) -> tuple[bytes, list[int], list[int], list[int]]:
    values = draw(st.lists(st.binary(max_size=300), max_size=20))
    base = draw(st.integers(0, 1 << 40))
    lengths = [len(v) for v in values]
    positions, sums, at = [], [], base
    for value in values:
        positions.append(at)
        sums.append(payload_checksum(value))
        at += len(value)
    payload = bytearray(b"".join(values))
    damage = draw(st.sampled_from(["none", "byte", "checksum", "position", "short", "length"]))
    if values and damage != "none":
        k = draw(st.integers(0, len(values) - 1))
        if damage == "byte" and payload:
            payload[draw(st.integers(0, len(payload) - 1))] ^= 1 + draw(st.integers(0, 254))
        elif damage == "checksum":
            sums[k] ^= 1 << draw(st.integers(0, 63))
        elif damage == "position":
            positions[k] += draw(st.integers(1, 1 << 20))
        elif damage == "short":
            del payload[draw(st.integers(0, len(payload))) :]
        else:
            lengths[k] += draw(st.integers(1, 1 << 31))
    return bytes(payload), positions, lengths, sums


@given(reads())
def test_the_c_loop_keeps_exactly_the_records_the_rule_keeps(
    read: tuple[bytes, list[int], list[int], list[int]],
) -> None:
    payload, positions, lengths, sums = read
    got = verified_count(payload, array("Q", positions), array("I", lengths), array("Q", sums))
    assert got == reference(payload, positions, lengths, sums)


def test_a_memoryview_of_a_larger_buffer_is_read_within_its_bounds() -> None:
    value = b"v" * 100
    buffer = value + b"beyond"
    view = memoryview(buffer)[:100]
    args = (array("Q", [0]), array("I", [106]), array("Q", [payload_checksum(buffer)]))
    assert verified_count(view, *args) == 0  # the record would run past the view
    assert (
        verified_count(view, args[0], array("I", [100]), array("Q", [payload_checksum(value)])) == 1
    )
