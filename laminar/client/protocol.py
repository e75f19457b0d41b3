"""One client connection's protocol state, sans-IO: correlation ids and matching.

Requests are pipelined: any number may be in flight on one connection, and
the node may answer them in any order. `ClientProtocol` hands out correlation
ids (u32, wrapping, never one still in flight), turns a message into frame
buffers, and turns received bytes into `(correlation_id, frame)` pairs for the
requests still waiting. The sync and async connections own the socket and
call it; nothing here blocks or touches a socket.

A frame that answers no request in flight breaks the protocol, except for
answers to requests the caller gave up on (`abandon`), which are dropped. An
error frame whose correlation id is unknown is the node's last word before it
closes a connection it could not decode: it becomes the `ProtocolViolationError`
raised for every request still waiting.
"""

from __future__ import annotations

from typing import Final

from laminar.client.errors import (
    CannotConnectError,
    ConnectionLostError,
    ProtocolViolationError,
    server_error,
)
from laminar.wire import (
    DEFAULT_MAX_FRAME_BYTES,
    NEED_DATA,
    ErrorResponse,
    Flags,
    Frame,
    FrameDecoder,
    Message,
    ProtocolError,
)
from laminar.wire.codec import Buffer

# Fetch answers hold at least one record even past max_bytes, so the client
# accepts much larger frames than the node's default request limit.
CLIENT_MAX_FRAME_BYTES: Final = max(DEFAULT_MAX_FRAME_BYTES, 64 << 20)
_U32: Final = 1 << 32


class ClientProtocol:
    """Correlation bookkeeping and frame decoding for one connection."""

    __slots__ = ("_abandoned", "_decoder", "_next", "in_flight")

    def __init__(self, max_frame_bytes: int = CLIENT_MAX_FRAME_BYTES) -> None:
        self._decoder = FrameDecoder(max_frame_bytes)
        self._next = 1
        self._abandoned: set[int] = set()
        self.in_flight: set[int] = set()
        """Correlation ids sent and not yet answered."""

    @property
    def receive_room(self) -> int:
        """Read at most this many bytes before the next `receive`."""
        return self._decoder.room

    def request(self, message: Message) -> tuple[int, list[Buffer]]:
        """A fresh correlation id for `message` and its frame as buffers for writev.
        The id counts as in flight from now on."""
        corr = self._next
        in_flight = self.in_flight
        while corr in in_flight or corr in self._abandoned:
            corr = corr + 1 if corr + 1 < _U32 else 1
        self._next = corr + 1 if corr + 1 < _U32 else 1
        buffers = message.encode_buffers(corr)
        in_flight.add(corr)
        return corr, buffers

    def abandon(self, corr: int) -> None:
        """Stop waiting for `corr`: its answer, if it comes, is dropped."""
        if corr in self.in_flight:
            self.in_flight.discard(corr)
            self._abandoned.add(corr)

    def receive(self, data: Buffer) -> list[Frame]:
        """The answers completed by `data`, in arrival order. Raises
        `ProtocolViolationError` when the stream cannot be trusted any more."""
        decoder = self._decoder
        try:
            decoder.feed(data)
            frames: list[Frame] = []
            while True:
                frame = decoder.next_frame()
                if frame is NEED_DATA:
                    return frames
                corr = frame.correlation_id
                if corr in self.in_flight:
                    self.in_flight.discard(corr)
                    frames.append(frame)
                elif corr in self._abandoned:
                    self._abandoned.discard(corr)
                else:
                    raise _unexpected(frame)
        except ProtocolError as exc:
            raise ProtocolViolationError(
                f"the node sent bytes that do not decode ({exc.message}); connection closed"
            ) from exc


def _unexpected(frame: Frame) -> ConnectionLostError:
    if frame.flags & Flags.ERROR:
        try:
            err = ErrorResponse.from_frame(frame)
        except ProtocolError:
            pass
        else:
            cause = server_error(err.code, err.message)
            if isinstance(cause, CannotConnectError):  # refused before anything was read
                return cause
            exc = ProtocolViolationError(f"the node closed the connection: {cause}")
            exc.__cause__ = cause
            return exc
    return ProtocolViolationError(
        f"the node answered correlation id {frame.correlation_id}, which no request "
        "in flight has; connection closed"
    )
