"""Kafka's stream framing: each request is an int32 size, then that many bytes.

The decoder has the interface of laminar's own (`laminar.wire.FrameDecoder`:
`feed`, `next_frame`, `room`, `buffered_bytes`, `last_frame_bytes`,
`discard`), so one connection class serves both doors with the same bounds:
a frame over the limit fails before its body is buffered, and what waits in
the buffer is at most twice the frame limit.
"""

from __future__ import annotations

import struct

from laminar.wire.codec import NEED_DATA, Buffer, NeedData
from laminar.wire.errors import FrameTooLarge, ProtocolError, ReceiveBufferFull

_SIZE = struct.Struct(">i")
SIZE_BYTES = _SIZE.size
MIN_REQUEST_BYTES = 8
"""api_key, api_version and correlation_id: anything shorter is no request."""


class KafkaFramingError(ProtocolError):
    """A size prefix no Kafka client sends: the stream is out of step."""


class KafkaFrameDecoder:
    """Incremental decoder of one Kafka connection's request frames."""

    __slots__ = ("_buf", "_error", "_max_buffer", "_max_frame", "_pos", "last_frame_bytes")

    def __init__(self, max_frame_bytes: int, max_buffer_bytes: int | None = None) -> None:
        self._max_frame = max_frame_bytes
        self._max_buffer = 2 * max_frame_bytes if max_buffer_bytes is None else max_buffer_bytes
        self._buf = bytearray()
        self._pos = 0
        self._error: ProtocolError | None = None
        self.last_frame_bytes = 0

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf) - self._pos

    @property
    def room(self) -> int:
        return self._max_buffer - self.buffered_bytes

    def feed(self, data: Buffer) -> None:
        if self._error is not None:
            raise self._error
        buf = self._buf
        if self._pos:
            del buf[: self._pos]
            self._pos = 0
        if len(buf) + len(data) > self._max_buffer:
            raise ReceiveBufferFull(
                f"receive buffer holds {len(buf)} bytes; {len(data)} more would pass "
                f"its bound of {self._max_buffer}"
            )
        buf += data

    def next_frame(self) -> bytes | NeedData:
        """The next request (without its size prefix), or `NEED_DATA`."""
        if self._error is not None:
            raise self._error
        buf, pos = self._buf, self._pos
        if len(buf) - pos < SIZE_BYTES:
            return NEED_DATA
        (size,) = _SIZE.unpack_from(buf, pos)
        if size < MIN_REQUEST_BYTES:
            self._error = KafkaFramingError(f"a Kafka request of {size} bytes")
            raise self._error
        if size + SIZE_BYTES > self._max_frame:
            self._error = FrameTooLarge(
                f"a Kafka request of {size} bytes is over the node's frame limit "
                f"of {self._max_frame} bytes (--max-frame-bytes)"
            )
            raise self._error
        end = pos + SIZE_BYTES + size
        if end > len(buf):
            return NEED_DATA
        with memoryview(buf) as view:  # one copy, not two (slice, then bytes)
            frame = view[pos + SIZE_BYTES : end].tobytes()
        self.last_frame_bytes = end - pos
        if end == len(buf):
            buf.clear()
            self._pos = 0
        else:
            self._pos = end
        return frame

    def discard(self) -> None:
        self._buf = bytearray()
        self._pos = 0
