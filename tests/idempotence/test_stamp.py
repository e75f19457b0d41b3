"""The wire side of idempotent produce: the stamp, the request fields, the codes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar.wire import (
    PRODUCER_HEADER,
    CorruptRecord,
    ErrorCode,
    FrameDecoder,
    InvalidMessage,
    ProduceRequest,
    ProducerStamp,
    WireUsageError,
    decode_record,
    decode_request,
    encode_frame,
    encode_record,
    producer_stamp,
)
from laminar.wire.ops import Op

u64 = st.integers(0, 2**64 - 1)


@given(u64, u64, st.integers(1, 2**32 - 1))
def test_stamp_round_trips(producer_id: int, first: int, count: int) -> None:
    stamp = ProducerStamp(producer_id, first, count)
    assert ProducerStamp.decode(stamp.encode()) == stamp


def test_a_bad_stamp_is_a_corrupt_record() -> None:
    with pytest.raises(CorruptRecord):
        ProducerStamp.decode(b"short")
    with pytest.raises(WireUsageError):
        ProducerStamp(2**64, 0, 1).encode()


@given(
    u64,
    u64,
    st.lists(st.binary(max_size=8), min_size=1, max_size=5),
    st.booleans(),
)
def test_from_values_stamps_the_first_record_only(
    producer_id: int, sequence: int, values: list[bytes], keyed: bool
) -> None:
    keys = [b"k%d" % i for i in range(len(values))] if keyed else None
    headers = [{"h": b"v"}] + [None] * (len(values) - 1)
    req = ProduceRequest.from_values(
        9, values, keys, headers, producer_id=producer_id, sequence=sequence
    )
    assert producer_stamp(req.blobs[0]) == ProducerStamp(producer_id, sequence, len(values))
    assert all(producer_stamp(b) is None for b in req.blobs[1:])
    value, key, hdrs = decode_record(req.blobs[0])
    assert value == values[0] and hdrs is not None and hdrs["h"] == b"v"
    assert key == (b"k0" if keyed else None)
    # The fields travel in the header and come back.
    decoder = FrameDecoder()
    decoder.feed(req.encode(5))
    again = decode_request(decoder.next_frame())  # type: ignore[arg-type]
    assert again == req


def test_a_plain_produce_sends_no_producer_fields() -> None:
    req = ProduceRequest.from_values(9, [b"a"])
    assert req.to_frame(1).header == {}
    assert producer_stamp(req.blobs[0]) is None


def test_the_stamp_header_name_is_reserved() -> None:
    with pytest.raises(WireUsageError, match="reserved"):
        ProduceRequest.from_values(
            1, [b"a"], headers=[{PRODUCER_HEADER: b"x"}], producer_id=1, sequence=0
        )


def test_producer_id_and_sequence_come_together() -> None:
    with pytest.raises(WireUsageError):
        ProduceRequest(1, (b"\x00a",), producer_id=3)
    frame = encode_frame(Op.PRODUCE, 1, 1, {"producer_id": 3}, b"\x00\x00\x00\x00")
    decoder = FrameDecoder()
    decoder.feed(frame)
    with pytest.raises(InvalidMessage, match="both"):
        decode_request(decoder.next_frame())  # type: ignore[arg-type]


def test_new_codes_keep_their_numbers() -> None:
    assert ErrorCode.OUT_OF_ORDER_SEQUENCE == 17
    assert ErrorCode.DUPLICATE_SEQUENCE == 18
    assert not ErrorCode.OUT_OF_ORDER_SEQUENCE.retriable


def test_a_plain_record_with_the_header_bytes_in_its_value_has_no_stamp() -> None:
    blob = encode_record(PRODUCER_HEADER.encode() * 2, None, {"x": b"y"})
    assert producer_stamp(blob) is None
