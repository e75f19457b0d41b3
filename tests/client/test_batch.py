"""`RecordBatch`: the batch consume form agrees with `fetch()` and with the wire."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar.client import OffsetOutOfRangeError, ProtocolViolationError, RecordBatch
from laminar.client.results import fetched_records
from laminar.wire import (
    PRODUCER_HEADER,
    CorruptRecord,
    ErrorCode,
    ErrorResponse,
    FetchedRecord,
    FetchResponse,
    Frame,
    Op,
    Pong,
    ProducerStamp,
    encode_record,
)
from laminar.wire.records import encode_fetch_batch, locate_fetch_records, stamp_only_record

records = st.lists(
    st.tuples(
        st.binary(max_size=40),
        st.none() | st.binary(max_size=8),
        st.none() | st.dictionaries(st.text(max_size=4), st.binary(max_size=4), max_size=2),
        st.integers(0, 2**63),
    ),
    max_size=30,
)


def fetch_frame(items: list[tuple], first: int = 0) -> Frame:  # type: ignore[type-arg]
    batch = tuple(
        FetchedRecord(first + i, ts, encode_record(value, key, headers))
        for i, (value, key, headers, ts) in enumerate(items)
    )
    end = first + len(batch)
    return FetchResponse(1, batch, first, end, end).to_frame(9)


@given(records, st.integers(0, 2**40))
def test_a_batch_holds_what_fetch_returns(items: list[tuple], first: int) -> None:  # type: ignore[type-arg]
    frame = fetch_frame(items, first)
    batch = RecordBatch.from_frame(frame, partition=3)
    expected = fetched_records(frame)
    assert len(batch) == len(expected)
    assert list(batch) == expected
    assert list(batch) == expected  # iterating twice gives the same records
    assert [bytes(v) for v in batch.values()] == [r.value for r in expected]
    assert batch.indexes == [r.index for r in expected]
    assert batch.timestamps_ms == [r.timestamp_ms for r in expected]
    assert batch.next_index == first + len(items)
    assert batch.partition == 3


def test_values_are_views_into_the_one_answer_buffer() -> None:
    frame = fetch_frame([(b"v%d" % i, None, None, i) for i in range(100)])
    views = RecordBatch.from_frame(frame, 0).values()
    assert all(isinstance(v, memoryview) for v in views)
    assert {id(v.obj) for v in views} == {id(frame.payload)}  # no copies
    assert [bytes(v) for v in views] == [b"v%d" % i for i in range(100)]


def test_values_skip_keys_and_headers() -> None:
    frame = fetch_frame([(b"value", b"key", {"h": b"x"}, 1), (b"bare", None, None, 2)])
    batch = RecordBatch.from_frame(frame, 0)
    assert [bytes(v) for v in batch.values()] == [b"value", b"bare"]
    first = next(iter(batch))
    assert (first.key, first.headers) == (b"key", {"h": b"x"})


def test_to_arrow_has_the_columns_and_rows() -> None:
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (the spark extra)")
    frame = fetch_frame([(b"a", None, None, 1000), (b"b", b"k", {"h": b"v"}, 2000)], first=7)
    table = RecordBatch.from_frame(frame, partition=2).to_arrow()
    assert table.column_names == ["partition", "index", "timestamp", "key", "value", "headers"]
    rows = table.to_pylist()
    assert [r["index"] for r in rows] == [7, 8]
    assert [r["value"] for r in rows] == [b"a", b"b"]
    assert [r["key"] for r in rows] == [None, b"k"]
    assert [r["partition"] for r in rows] == [2, 2]


def test_an_empty_answer_is_an_empty_batch() -> None:
    batch = RecordBatch.from_frame(fetch_frame([]), 0)
    assert len(batch) == 0 and list(batch) == [] and batch.values() == []
    assert batch.next_index == 0


def test_errors_are_typed() -> None:
    err = ErrorResponse.for_code(Op.FETCH, ErrorCode.OFFSET_OUT_OF_RANGE, "past the end")
    with pytest.raises(OffsetOutOfRangeError, match="past the end"):
        RecordBatch.from_frame(err.to_frame(1), 0)
    with pytest.raises(ProtocolViolationError, match="FetchResponse"):
        RecordBatch.from_frame(Pong(0, "n", 0, 0).to_frame(1), 0)


@pytest.mark.parametrize(
    "payload",
    [
        b"\x00\x00",  # no count
        b"\x00\x00\x00\x05",  # five records, no table
        b"\x00\x00\x00\x00" + b"x",  # empty batch, stray byte
        b"\x00\x00\x00\x01" + bytes(16) + b"\x00\x00\x00\x0a" + b"\x00ab",  # 10 claimed, 3 there
        b"\x00\x00\x00\x01" + bytes(16) + b"\x00\x00\x00\x01" + b"\x00ab",  # 1 claimed, 3 there
        b"\x00\x00\x00\x01" + bytes(16) + b"\x00\x00\x00\x02" + b"\x80a",  # unknown attrs bit
        b"\x00\x00\x00\x01" + bytes(16) + b"\x00\x00\x00\x03" + b"\x01\x00\x00",  # key cut
        b"\x00\x00\x00\x01" + bytes(16) + b"\x00\x00\x00\x05" + b"\x01\x00\x00\x00\x09",  # key long
        b"\x00\x00\x00\x02" + bytes(16) + b"\x00\x00\x00\x00" + bytes(16) + b"\x00\x00\x00\x01\x00",
    ],
)
def test_broken_payloads_are_protocol_violations(payload: bytes) -> None:
    frame = fetch_frame([])._replace(payload=payload)
    with pytest.raises(ProtocolViolationError, match="fetch answer"):
        RecordBatch.from_frame(frame, 0)


@pytest.mark.parametrize("keyed_at", [None, 0, 7, 19])
def test_records_of_one_size_decode_as_any_other(keyed_at: int | None) -> None:
    """The one-size shortcut (blobs every `size` bytes) must still notice a
    record with a key among bare values of the same blob size."""
    items: list[tuple] = [(b"v%05d" % i, None, None, i) for i in range(20)]  # type: ignore[type-arg]
    if keyed_at is not None:
        items[keyed_at] = (b"x", b"k", None, keyed_at)  # 1 + 4 + 1 + 1 bytes: the same size
    frame = fetch_frame(items, first=100)
    expected = fetched_records(frame)
    batch = RecordBatch.from_frame(frame, 0)
    assert list(batch) == expected
    assert [bytes(v) for v in batch.values()] == [r.value for r in expected]
    assert batch.indexes == list(range(100, 120))
    assert batch.next_index == 120


@given(records, st.lists(st.booleans(), max_size=30), st.integers(0, 2**40))
def test_the_producer_stamp_is_never_shown_as_a_header(
    items: list[tuple],  # type: ignore[type-arg]
    stamped: list[bool],
    first: int,
) -> None:
    """Records an idempotent producer stamped read as the same records unstamped,
    by `fetch()` and by every view of a `RecordBatch` (bare values with only a
    stamp take the bulk path, others are decoded one by one)."""
    items = [(v, k, _without_stamp(h), ts) for v, k, h, ts in items]
    plain = fetch_frame(items, first)
    batch = tuple(
        FetchedRecord(
            first + i,
            ts,
            encode_record(value, key, {**(headers or {}), PRODUCER_HEADER: stamp.encode()})
            if i < len(stamped) and stamped[i]
            else encode_record(value, key, headers),
        )
        for i, (value, key, headers, ts) in enumerate(items)
        for stamp in [ProducerStamp(7, i, 1)]
    )
    frame = FetchResponse(1, batch, first, first + len(batch), first + len(batch)).to_frame(9)
    expected = fetched_records(plain)
    assert fetched_records(frame) == expected
    got = RecordBatch.from_frame(frame, partition=0)
    assert list(got) == expected
    assert [bytes(v) for v in got.values()] == [r.value for r in expected]


def test_stamped_bare_values_are_located_in_bulk() -> None:
    """The common shape of an idempotent producer's records (each batch's first
    stamped, no keys or headers) is simple: nothing to decode per record."""
    blobs = [stamp_only_record(b"v%d" % i, ProducerStamp(1, i, 1)) for i in range(3)]
    blobs.append(encode_record(b"bare"))
    located = locate_fetch_records(_fetch_payload(blobs))
    payload = _fetch_payload(blobs)
    assert located.simple
    assert [payload[s:e] for s, e in zip(located.value_starts, located.ends, strict=True)] == [
        b"v0", b"v1", b"v2", b"bare"
    ]  # fmt: skip
    assert not locate_fetch_records(_fetch_payload([*blobs, encode_record(b"k", b"key")])).simple
    truncated = blobs[0][:-3]  # the stamp's prefix, then too few bytes for a stamp
    with pytest.raises(CorruptRecord):
        locate_fetch_records(_fetch_payload([truncated]))


def _fetch_payload(blobs: list[bytes]) -> bytes:
    return b"".join(encode_fetch_batch([(i, 0, blob) for i, blob in enumerate(blobs)]))


def _without_stamp(headers: dict[str, bytes] | None) -> dict[str, bytes] | None:
    return {k: v for k, v in (headers or {}).items() if k != PRODUCER_HEADER} or None
