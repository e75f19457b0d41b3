"""Kafka's stream framing: each request is an int32 size, then that many bytes.

The decoder is laminar's own (`laminar.wire.FrameDecoder`: its buffer, its
bounds, `feed`, `room`, `buffered_bytes`, `last_frame_bytes`, `discard`)
with Kafka's frames, so one connection class serves both doors with the same
bounds: a frame over the limit fails before its body is buffered, and what
waits in the buffer is at most twice the frame limit.
"""

from __future__ import annotations

import struct

from laminar.wire.codec import NEED_DATA, FrameDecoder, NeedData
from laminar.wire.errors import FrameTooLarge, ProtocolError

_SIZE = struct.Struct(">i")
SIZE_BYTES = _SIZE.size
MIN_REQUEST_BYTES = 8
"""api_key, api_version and correlation_id: anything shorter is no request."""


class KafkaFramingError(ProtocolError):
    """A size prefix no Kafka client sends: the stream is out of step."""


class KafkaFrameDecoder(FrameDecoder):
    """Incremental decoder of one Kafka connection's request frames."""

    __slots__ = ()

    def next_frame(self) -> bytes | NeedData:  # type: ignore[override]
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
        self._advance(pos, end)
        return frame
