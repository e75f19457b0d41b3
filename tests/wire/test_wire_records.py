"""Record blobs and the batch layouts of produce and fetch payloads."""

from __future__ import annotations

import struct
from array import array

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar.wire import (
    CorruptRecord,
    InvalidMessage,
    ProducerStamp,
    WireUsageError,
    decode_user_record,
)
from laminar.wire.records import (
    FetchedRecord,
    check_record,
    decode_fetch_batch,
    decode_produce_batch,
    decode_record,
    encode_fetch_batch,
    encode_fetch_columns,
    encode_produce_batch,
    encode_record,
    locate_fetch_records,
    pack_fetch_columns,
    stamp_only_record,
)

values = st.none() | st.binary(max_size=200)  # None: a null value (Kafka tombstone)
keys = st.none() | st.binary(max_size=30)
headers = st.none() | st.dictionaries(
    st.text(max_size=10), st.none() | st.binary(max_size=20), max_size=4
)


@given(values, keys, headers)
def test_record_round_trip(
    value: bytes | None, key: bytes | None, hdrs: dict[str, bytes | None] | None
) -> None:
    blob = encode_record(value, key, hdrs)
    check_record(blob)
    assert decode_record(blob) == (value, key, hdrs or None)
    assert decode_record(memoryview(blob)) == (value, key, hdrs or None)


def test_plain_record_is_one_byte_then_the_value() -> None:
    assert encode_record(b"hello") == b"\x00hello"
    assert encode_record(b"hello", None, {}) == b"\x00hello"  # empty headers = none
    assert decode_record(b"\x00") == (b"", None, None)


def test_null_value_is_the_attrs_bit_and_no_value_bytes() -> None:
    assert encode_record(None) == b"\x04"
    assert encode_record(None, b"k") == b"\x05\x00\x00\x00\x01k"
    assert decode_record(b"\x04") == (None, None, None)
    assert decode_record(b"\x00") == (b"", None, None)  # empty is not null
    with pytest.raises(CorruptRecord, match="null value has value bytes"):
        decode_record(b"\x04v")


def test_keyed_record_layout() -> None:
    assert encode_record(b"v", b"key") == b"\x01\x00\x00\x00\x03keyv"
    assert encode_record(b"v", b"") == b"\x01\x00\x00\x00\x00v"  # an empty key is a key
    blob = encode_record(b"v", None, {"h": b"x"})
    packed = msgpack.packb({"h": b"x"})
    assert blob == b"\x02" + struct.pack(">I", len(packed)) + packed + b"v"


@pytest.mark.parametrize(
    ("blob", "match"),
    [
        (b"", "empty"),
        (b"\x08abc", "unknown bits"),
        (b"\x01\x00\x00", "inside its key length"),
        (b"\x01\x00\x00\x00\x09abc", "key of 9 bytes runs past"),
        (b"\x02\x00\x00\x00\x01\xc1", "headers do not decode"),
        (b"\x02\x00\x00\x00\x01\x90", "map of str to bin"),
        (b"\x02" + struct.pack(">I", 7) + msgpack.packb({"h": "str"}), "map of str to bin"),
    ],
)
def test_corrupt_records(blob: bytes, match: str) -> None:
    with pytest.raises(CorruptRecord, match=match):
        decode_record(blob)
    with pytest.raises(CorruptRecord):
        check_record(blob)


def test_header_values_must_be_bytes() -> None:
    with pytest.raises(WireUsageError):
        encode_record(b"v", None, {"h": "text"})  # type: ignore[dict-item]


@given(st.lists(st.builds(encode_record, values, keys, headers), max_size=20))
def test_produce_batch_round_trip(blobs: list[bytes]) -> None:
    payload = b"".join(encode_produce_batch(blobs))
    assert decode_produce_batch(payload) == tuple(blobs)


def test_produce_batch_layout_keeps_blobs_contiguous() -> None:
    buffers = encode_produce_batch([b"\x00a", b"\x00bc"])
    assert buffers[0] == struct.pack(">III", 2, 2, 3)
    assert b"".join(buffers[1:]) == b"\x00a\x00bc"


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b"", "no count"),
        (b"\x00\x00", "no count"),
        (struct.pack(">II", 5, 1), "longer than its payload"),
        (struct.pack(">II", 1, 3) + b"\x00a", "add up to 3 bytes but 2"),
        (struct.pack(">II", 1, 1) + b"\x00a", "add up to 1 bytes but 2"),
    ],
)
def test_bad_produce_batches(payload: bytes, match: str) -> None:
    with pytest.raises(InvalidMessage, match=match):
        decode_produce_batch(payload)


def test_produce_batch_checks_each_record() -> None:
    payload = b"".join(encode_produce_batch([b"\x00ok", b"\x07bad", b""]))
    with pytest.raises(CorruptRecord):
        decode_produce_batch(payload)
    assert decode_produce_batch(payload, check=False) == (b"\x00ok", b"\x07bad", b"")


fetched = st.builds(
    FetchedRecord, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.binary(max_size=200)
)


@given(st.lists(fetched, max_size=20))
def test_fetch_batch_round_trip(records: list[FetchedRecord]) -> None:
    payload = b"".join(encode_fetch_batch(records))
    assert decode_fetch_batch(payload) == tuple(records)


@given(
    st.integers(0, 2**40),
    st.lists(st.tuples(st.integers(0, 2**63), st.binary(max_size=30)), max_size=20),
)
def test_fetch_columns_encode_like_records(first: int, rows: list[tuple[int, bytes]]) -> None:
    timestamps = [ts for ts, _ in rows]
    blobs = [blob for _, blob in rows]
    columns = encode_fetch_columns(first, timestamps, [len(b) for b in blobs], b"".join(blobs))
    triples = [(first + k, ts, blob) for k, (ts, blob) in enumerate(rows)]
    assert b"".join(columns) == b"".join(encode_fetch_batch(triples))


@pytest.mark.parametrize("count", [0, 1, 2, 127, 128, 129, 500, 4097])
def test_fetch_columns_pack_like_one_struct(count: int) -> None:
    first = 2**40 - 3
    stamps = [2**63 - i for i in range(count)]
    sizes = [(i * 7919) % 2**32 for i in range(count)]
    fields = [v for i in range(count) for v in (first + i, stamps[i], sizes[i])]
    table = pack_fetch_columns(first, stamps, sizes)
    assert table == struct.pack(">I" + "QQI" * count, count, *fields)
    assert pack_fetch_columns(first, array("Q", stamps), array("I", sizes)) == table


def test_fetch_columns_refuse_mismatched_columns() -> None:
    with pytest.raises(WireUsageError):
        pack_fetch_columns(0, [1, 2], [3])


def test_fetch_batch_layout() -> None:
    buffers = encode_fetch_batch([(7, 1000, b"\x00x")])
    assert buffers == [struct.pack(">IQQI", 1, 7, 1000, 2), b"\x00x"]


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b"\x00", "no count"),
        (struct.pack(">I", 2) + b"\x00" * 20, "longer than its payload"),
        (struct.pack(">IQQI", 1, 0, 0, 5) + b"ab", "add up to 5 bytes but 2"),
        (struct.pack(">IQQI", 1, 0, 0, 1) + b"ab", "add up to 1 bytes but 2"),
    ],
)
def test_bad_fetch_batches(payload: bytes, match: str) -> None:
    with pytest.raises(InvalidMessage, match=match):
        decode_fetch_batch(payload)


def test_fetched_record_decodes_its_blob() -> None:
    rec = FetchedRecord(3, 99, encode_record(b"v", b"k", {"a": b"b"}))
    assert rec.decode() == (b"v", b"k", {"a": b"b"})
    assert rec.index == 3


_blobs = st.one_of(
    (st.none() | st.binary(max_size=40)).map(encode_record),
    st.tuples(st.binary(max_size=20), st.binary(max_size=8)).map(lambda kv: encode_record(*kv)),
    st.tuples(
        st.binary(max_size=20),
        st.none() | st.binary(max_size=8),
        st.dictionaries(st.text(max_size=6), st.binary(max_size=8), min_size=1, max_size=3),
    ).map(lambda kvh: encode_record(*kvh)),
    st.tuples(st.binary(max_size=20), st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1)).map(
        lambda vs: stamp_only_record(vs[0], ProducerStamp(vs[1], 0, vs[2]))
    ),
)


@given(st.lists(st.tuples(st.integers(0, 2**63), _blobs), max_size=12))
def test_located_records_match_the_reference_decoder(rows: list[tuple[int, bytes]]) -> None:
    """The C loop finds what the one-by-one Python decoder finds: every blob,
    its value, and whether anything but values (and the stamp) is there."""
    payload = b"".join(encode_fetch_batch([(7 + k, ts, blob) for k, (ts, blob) in enumerate(rows)]))
    located = locate_fetch_records(payload)
    reference = decode_fetch_batch(payload)
    assert list(located.indexes) == [r.index for r in reference]
    assert list(located.timestamps_ms) == [r.timestamp_ms for r in reference]
    assert [payload[s:e] for s, e in zip(located.starts, located.ends, strict=True)] == [
        r.blob for r in reference
    ]
    decoded = [decode_user_record(r.blob) for r in reference]
    values = [payload[s:e] for s, e in zip(located.value_starts, located.ends, strict=True)]
    assert values == [b"" if value is None else value for value, _, _ in decoded]
    assert located.simple == all(
        value is not None and key is None and headers is None for value, key, headers in decoded
    )


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (struct.pack(">IQQI", 1, 0, 0, 3) + b"\x00x", InvalidMessage),  # a byte short
        (struct.pack(">IQQI", 1, 0, 0, 1) + b"\x00xy", InvalidMessage),  # stray bytes
        # a length past the payload, a key length that would lead reads far past it
        (struct.pack(">IQQII", 1, 0, 0, 2**32 - 16, 2**31) + b"\x03" + bytes(12), InvalidMessage),
        (struct.pack(">IQQI", 2, 0, 0, 1), InvalidMessage),  # the table does not fit
        (struct.pack(">IQQI", 1, 0, 0, 0), CorruptRecord),  # an empty blob
        (struct.pack(">IQQI", 1, 0, 0, 1) + b"\x08", CorruptRecord),  # unknown attrs bits
        (struct.pack(">IQQI", 1, 0, 0, 3) + b"\x01\x00\x00", CorruptRecord),  # inside a length
        (
            struct.pack(">IQQI", 1, 0, 0, 6) + b"\x01\x00\x00\x00\x09k",
            CorruptRecord,
        ),  # key too long
    ],
)
def test_located_records_refuse_what_does_not_add_up(payload: bytes, error: type) -> None:
    with pytest.raises(error):
        locate_fetch_records(payload)
