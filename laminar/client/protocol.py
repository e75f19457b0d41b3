"""One client connection's protocol state, sans-IO: correlation ids and matching.

Requests are pipelined: any number may be in flight on one connection, and
the node may answer them in any order. `ClientProtocol` hands out correlation
ids (u32, wrapping, never one still in flight), turns a message into frame
buffers, and turns received bytes into `(correlation_id, frame)` pairs for the
requests still waiting. The sync and async connections own the socket and
call it; nothing here blocks or touches a socket.

A frame that answers no request in flight breaks the protocol, except for
answers to requests the caller gave up on (`abandon`, `expire`), which are
dropped.

Silence. A request that runs out of time (`expire`) on a connection that has
received nothing at all since the request was sent says the peer is silent,
not slow: a stopped process (whose kernel still accepts connections and
data) or one cut off by the network. The shells then close the connection and
fail its other requests as lost, so each of them is retried elsewhere or
reported as of unknown outcome at once (`laminar.client.retry`) instead of
waiting out its own deadline on a dead link, and no later request is sent
into it. Any byte received counts, a part of a large answer too, so a busy
connection is never taken for a silent one; a long-poll fetch's deadline
includes its `max_wait`, so a poll the node holds on purpose never expires
early. A request's deadline is long (`timeout_s`, 30 s by default), so the
shells do not wait for it to find silence: `Liveness` watches each
connection with requests in flight, sends a ping once it has heard nothing
for `PROBE_AFTER_S`, and calls it silent when the ping is not answered
within as long again (any byte counts: a node busy with a slow request
answers the ping). An
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
    Ping,
    ProtocolError,
)
from laminar.wire.codec import Buffer

PROBE_AFTER_S: Final = 1.0
"""How long a connection with requests in flight may hear nothing before it is
probed, and the probe go unanswered before the connection is silent: half
of Raft's longest election timeout each, so a client leaves a silent leader
about when the others have elected a new one."""

# Fetch answers hold at least one record even past max_bytes, so the client
# accepts much larger frames than the node's default request limit.
CLIENT_MAX_FRAME_BYTES: Final = max(DEFAULT_MAX_FRAME_BYTES, 64 << 20)
_U32: Final = 1 << 32


class ClientProtocol:
    """Correlation bookkeeping and frame decoding for one connection."""

    __slots__ = ("_abandoned", "_decoder", "_next", "_received", "in_flight")

    def __init__(self, max_frame_bytes: int = CLIENT_MAX_FRAME_BYTES) -> None:
        self._decoder = FrameDecoder(max_frame_bytes)
        self._next = 1
        self._abandoned: set[int] = set()
        self._received = 0
        """How many times bytes arrived (the mark silence is judged by)."""
        self.in_flight: dict[int, int] = {}
        """Correlation ids sent and not yet answered -> `_received` when sent."""

    @property
    def received(self) -> int:
        """How many times bytes arrived so far (`Liveness` compares marks)."""
        return self._received

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
        in_flight[corr] = self._received
        return corr, buffers

    def probe(self) -> list[Buffer]:
        """A ping to send (`Liveness`); its answer is dropped, but counts as
        bytes received like any other."""
        corr, buffers = self.request(Ping(0))
        self.abandon(corr)
        return buffers

    def abandon(self, corr: int) -> None:
        """Stop waiting for `corr`: its answer, if it comes, is dropped."""
        if self.in_flight.pop(corr, None) is not None:
            self._abandoned.add(corr)

    def expire(self, corr: int) -> bool:
        """`corr` ran out of time: `abandon` it, and say whether the connection
        is silent (nothing at all arrived since `corr` was sent; see the module
        docstring): the caller then closes it with `silent_error`."""
        sent_at = self.in_flight.pop(corr, None)
        if sent_at is None:
            return False
        self._abandoned.add(corr)
        return sent_at == self._received

    def receive(self, data: Buffer) -> list[Frame]:
        """The answers completed by `data`, in arrival order. Raises
        `ProtocolViolationError` when the stream cannot be trusted any more."""
        decoder = self._decoder
        if len(data):
            self._received += 1
        try:
            decoder.feed(data)
            frames: list[Frame] = []
            while True:
                frame = decoder.next_frame()
                if frame is NEED_DATA:
                    return frames
                corr = frame.correlation_id
                if self.in_flight.pop(corr, None) is not None:
                    frames.append(frame)
                elif corr in self._abandoned:
                    self._abandoned.discard(corr)
                else:
                    raise _unexpected(frame)
        except ProtocolError as exc:
            raise ProtocolViolationError(
                f"the node sent bytes that do not decode ({exc.message}); connection closed"
            ) from exc


class Liveness:
    """Whether a connection with requests in flight still answers (see the
    module docstring). Sans-IO: the shells call `check` every so often with
    their clock and act on its verdict."""

    OK: Final = 0
    PROBE: Final = 1
    """Send `ClientProtocol.probe()` now."""
    SILENT: Final = 2
    """Close the connection with `silent_error`."""

    __slots__ = ("_mark", "_probed_at", "_quiet_since", "probe_after_s")

    def __init__(self, probe_after_s: float = PROBE_AFTER_S) -> None:
        self.probe_after_s = probe_after_s
        self._mark = -1
        self._quiet_since: float | None = None
        self._probed_at: float | None = None

    def check(self, now: float, proto: ClientProtocol) -> int:
        """The verdict at `now` (seconds, any monotonic clock)."""
        if not proto.in_flight:
            self._quiet_since = self._probed_at = None
            return self.OK
        if proto.received != self._mark or self._quiet_since is None:
            self._mark = proto.received
            self._quiet_since, self._probed_at = now, None
            return self.OK
        if self._probed_at is None:
            if now - self._quiet_since < self.probe_after_s:
                return self.OK
            self._probed_at = now
            return self.PROBE
        return self.SILENT if now - self._probed_at >= self.probe_after_s else self.OK


def silent_error(peer: str) -> ConnectionLostError:
    """Why a silent connection (`ClientProtocol.expire`) to `peer` was closed."""
    return ConnectionLostError(
        f"no answer from {peer} in time and nothing else from it since the request was "
        "sent (a stopped node, or one cut off by the network): connection closed"
    )


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
