"""Answer frames become results or typed errors; the fetch fast path matches the wire."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar.client import OffsetOutOfRangeError, ProtocolViolationError
from laminar.client.consumer import ConsumedRecord
from laminar.client.results import expect, fetched_records
from laminar.wire import (
    ErrorCode,
    ErrorResponse,
    FetchedRecord,
    FetchResponse,
    Frame,
    Op,
    Pong,
    encode_record,
)
from laminar.wire.records import decode_fetch_batch

records = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=40),  # None: a null value (a Kafka tombstone)
        st.none() | st.binary(max_size=8),
        st.none()
        | st.dictionaries(st.text(max_size=4), st.none() | st.binary(max_size=4), max_size=2),
        st.integers(0, 2**63),
    ),
    max_size=20,
)


def fetch_frame(batch: list[FetchedRecord]) -> Frame:
    return FetchResponse(1, tuple(batch), 0, len(batch), len(batch)).to_frame(9)


@given(records)
def test_fetch_fast_path_agrees_with_the_wire(items: list[tuple]) -> None:  # type: ignore[type-arg]
    batch = [
        FetchedRecord(i, ts, encode_record(value, key, headers))
        for i, (value, key, headers, ts) in enumerate(items)
    ]
    frame = fetch_frame(batch)
    got = fetched_records(frame)
    expected = [(r.index, r.timestamp_ms, *r.decode()) for r in decode_fetch_batch(frame.payload)]
    assert [tuple(r) for r in got] == expected
    consumed = fetched_records(frame, prefix=("t", 3), kind=ConsumedRecord)
    assert consumed == [ConsumedRecord("t", 3, *row) for row in expected]
    assert all(type(r) is ConsumedRecord for r in consumed)


def test_a_null_value_reads_as_none_not_empty() -> None:
    blobs = [encode_record(None), encode_record(b""), encode_record(None, b"k", {"h": None})]
    got = fetched_records(fetch_frame([FetchedRecord(i, 5, b) for i, b in enumerate(blobs)]))
    assert [(r.value, r.key, r.headers) for r in got] == [
        (None, None, None),
        (b"", None, None),
        (None, b"k", {"h": None}),
    ]


def test_fetch_errors_are_typed() -> None:
    err = ErrorResponse.for_code(Op.FETCH, ErrorCode.OFFSET_OUT_OF_RANGE, "past the end")
    with pytest.raises(OffsetOutOfRangeError, match="past the end"):
        fetched_records(err.to_frame(1))


@pytest.mark.parametrize(
    "payload",
    [
        b"\x00\x00",  # no count
        b"\x00\x00\x00\x05",  # five records, no table
        # one entry of 10 bytes, 3 present
        b"\x00\x00\x00\x01" + bytes(16) + b"\x00\x00\x00\x0a" + b"\x00ab",
        # one entry of 1 byte, 3 present
        b"\x00\x00\x00\x01" + bytes(16) + b"\x00\x00\x00\x01" + b"\x00ab",
        # a record whose attrs byte has unknown bits
        b"\x00\x00\x00\x01" + bytes(16) + b"\x00\x00\x00\x02" + b"\x80a",
    ],
)
def test_broken_fetch_payloads_are_protocol_violations(payload: bytes) -> None:
    frame = fetch_frame([])._replace(payload=payload)
    with pytest.raises(ProtocolViolationError, match="fetch answer"):
        fetched_records(frame)


def test_a_wrong_answer_type_is_a_protocol_violation() -> None:
    with pytest.raises(ProtocolViolationError, match="FetchResponse"):
        fetched_records(Pong(0, "n", 0, 0).to_frame(1))
    with pytest.raises(ProtocolViolationError, match="Pong"):
        expect(fetch_frame([]), Pong)
