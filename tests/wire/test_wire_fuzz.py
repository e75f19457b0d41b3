"""Fuzz: whatever bytes arrive, the wire layer raises ProtocolError and nothing else."""

from __future__ import annotations

import contextlib
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from laminar.wire import (
    NEED_DATA,
    FetchedRecord,
    FetchResponse,
    Frame,
    FrameDecoder,
    MetadataResponse,
    ProduceRequest,
    ProtocolError,
    ShardInfo,
    TopicInfo,
    decode_frame,
    decode_record,
    decode_request,
    decode_response,
    encode_record,
)

VALID = [
    ProduceRequest.from_values(1, [b"a" * 10, b"b"], keys=[b"k", None]).encode(1),
    FetchResponse(
        2, (FetchedRecord(5, 6, encode_record(b"v", b"k", {"h": b"x"})),), 0, 6, 6
    ).encode(2),
    MetadataResponse(
        "n", "127.0.0.1", 7070, "ebpf", (ShardInfo(0, "h", 1),), (TopicInfo("t", 1, 2, {"a": 1}),)
    ).encode(3),
]


def consume(data: bytes) -> int:
    """Feed `data` to a decoder and decode whatever comes out; returns frames seen."""
    decoder = FrameDecoder(max_frame_bytes=4096)
    seen = 0
    try:
        decoder.feed(data)
        while (frame := decoder.next_frame()) is not NEED_DATA:
            assert isinstance(frame, Frame)
            seen += 1
            decode_any(frame)
    except ProtocolError:
        pass
    return seen


def decode_any(frame: Frame) -> None:
    try:
        if frame.is_response:
            message = decode_response(frame)
            if isinstance(message, FetchResponse):
                for record in message.records:
                    record.decode()
        else:
            request = decode_request(frame)
            if isinstance(request, ProduceRequest):
                for blob in request.blobs:
                    decode_record(blob)
    except ProtocolError as exc:
        assert not exc.fatal  # message-level errors keep the stream usable


@given(st.binary(max_size=200))
def test_random_bytes(data: bytes) -> None:
    consume(data)
    with contextlib.suppress(ProtocolError):
        decode_frame(data)
    with contextlib.suppress(ProtocolError):
        decode_record(data)


@given(st.binary(max_size=100))
def test_random_bytes_after_a_valid_prefix(tail: bytes) -> None:
    # Keep the magic and version so the fuzz reaches the header and payload code.
    for valid in VALID:
        consume(valid[:6] + tail)
        consume(valid[:24] + tail)


@settings(max_examples=20)
@given(st.integers(0, 2**32 - 1))
def test_mutated_valid_frames(seed: int) -> None:
    rng = random.Random(seed)
    for valid in VALID:
        for _ in range(25):
            data = bytearray(valid)
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            consume(bytes(data))
            consume(bytes(data[: rng.randrange(len(data) + 1)]))
