"""The Kafka door's request framing: pipelined and partial frames come out
whole, and a size no client sends fails before any body is buffered."""

from __future__ import annotations

import struct

import pytest

from laminar.kafka.framing import KafkaFrameDecoder, KafkaFramingError
from laminar.wire.codec import NEED_DATA
from laminar.wire.errors import FrameTooLarge, ReceiveBufferFull


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def test_pipelined_and_split_frames_come_out_whole_and_in_order() -> None:
    decoder = KafkaFrameDecoder(1024)
    stream = _frame(b"a" * 8) + _frame(b"b" * 20) + _frame(b"c" * 9)
    out = []
    for i in range(len(stream)):  # one byte at a time
        decoder.feed(stream[i : i + 1])
        while (frame := decoder.next_frame()) is not NEED_DATA:
            out.append((frame, decoder.last_frame_bytes))
    assert out == [(b"a" * 8, 12), (b"b" * 20, 24), (b"c" * 9, 13)]
    assert decoder.buffered_bytes == 0


@pytest.mark.parametrize("size", [-1, 0, 7])
def test_a_size_no_request_has_stops_the_stream(size: int) -> None:
    decoder = KafkaFrameDecoder(1024)
    decoder.feed(struct.pack(">i", size))
    with pytest.raises(KafkaFramingError):
        decoder.next_frame()
    with pytest.raises(KafkaFramingError):  # the stream stays failed
        decoder.feed(b"more")


def test_an_oversized_frame_fails_on_its_size_alone() -> None:
    decoder = KafkaFrameDecoder(1024)
    decoder.feed(struct.pack(">i", 1021))  # 4 + 1021 > 1024
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


def test_the_buffer_holds_two_frames_at_most() -> None:
    decoder = KafkaFrameDecoder(1024)
    decoder.feed(b"\x00" * 2048)
    assert decoder.room == 0
    with pytest.raises(ReceiveBufferFull):
        decoder.feed(b"\x00")
