"""The positions log's codec: round trips, and hostile bytes only ever raise
RecordCodecError."""

from __future__ import annotations

import contextlib
import dataclasses

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar.groups.errors import RecordCodecError
from laminar.groups.messages import Position
from laminar.groups.records import (
    GroupRecord,
    GroupValue,
    MemberRecord,
    MemberValue,
    PositionRecord,
    Record,
    decode,
    encode,
)

MEMBER = MemberValue(
    instance_id="host-1",
    epoch=7,
    revision=12,
    topics=("a", "b"),
    session_timeout_ms=10_000,
    assignor="range",
    assigned=frozenset({("a", 0), ("a", 3), ("b", 1)}),
    revoking=frozenset({("a", 1)}),
    target=frozenset({("a", 0), ("a", 3), ("b", 1), ("b", 2)}),
    away=False,
)

RECORDS: list[Record] = [
    GroupRecord("g", GroupValue(3, "uniform-sticky", (("a", 4), ("b", 3)))),
    GroupRecord("g", None),
    MemberRecord("g", "00ff", MEMBER),
    MemberRecord("g", "00ff", dataclasses.replace(MEMBER, instance_id=None, away=True)),
    MemberRecord("g", "00ff", None),
    MemberRecord("g", "00ff", dataclasses.replace(MEMBER, principal="User:al\u00efce")),
    PositionRecord("g", "a", 3, Position(1234, "00ff", 7, 1_800_000_000_000)),
    PositionRecord("g", "a", 3, Position(0, "", 0, 0)),
    PositionRecord("g", "a", 3, None),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_every_record_kind_round_trips(record: Record) -> None:
    assert decode(encode(record)) == record


def test_a_record_of_another_version_or_kind_is_refused() -> None:
    row = msgpack.unpackb(encode(RECORDS[0]))
    for bad in ([2, *row[1:]], [1, 9, *row[2:]], row[:-1], [*row, None], {"a": 1}, 5):
        with pytest.raises(RecordCodecError):
            decode(msgpack.packb(bad))


def test_oversized_names_and_records_are_refused_before_decoding() -> None:
    with pytest.raises(RecordCodecError):
        decode(encode(GroupRecord("g" * 256, None)))
    with pytest.raises(RecordCodecError):  # 255 bytes in UTF-8 at most, not characters
        decode(encode(GroupRecord("\u00e9" * 128, None)))
    longest = dataclasses.replace(MEMBER, principal="User:" + "\u00e9" * 255)
    assert decode(encode(MemberRecord("g", "m", longest))) == MemberRecord("g", "m", longest)
    with pytest.raises(RecordCodecError):
        decode(b"\x91" + b"\x00" * (5 << 20))


@given(st.binary(max_size=300))
@settings(max_examples=300)
def test_random_bytes_raise_only_codec_errors(data: bytes) -> None:
    with contextlib.suppress(RecordCodecError):
        decode(data)


@given(st.sampled_from(RECORDS), st.data())
@settings(max_examples=300)
def test_mutated_records_raise_only_codec_errors_or_decode_to_valid_records(
    record: Record, data: st.DataObject
) -> None:
    raw = bytearray(encode(record))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(1, len(raw)))
    try:
        decoded = decode(bytes(raw[:cut]))
    except RecordCodecError:
        return
    assert decode(encode(decoded)) == decoded
