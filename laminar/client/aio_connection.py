"""An asyncio connection to one shard, with pipelined requests.

Built on the loop's `sock_*` methods rather than streams, so it runs on the
stock loop and on laminar's `UringEventLoop` (which has no transports), and
a request costs no stream buffering. Theory of operation:

- `request(message)` registers a future under a fresh correlation id, writes
  the frame and awaits the future. Any number of tasks may have requests in
  flight on one connection.
- Writes go through a `laminar.outbox.Outbox`: the requests made in one loop
  iteration (64 tasks each producing one record) leave together at the end of
  it in one gathering `sendmsg`, not one syscall and one node wakeup each; a
  lone request goes out in the next iteration, never after a timer. Frames
  are never interleaved, and record buffers are not joined.
- Reads: one reader task per connection receives into a fixed buffer, and the
  sans-IO `ClientProtocol` turns bytes into frames; each resolves the future
  of its correlation id, whatever order they come in.
- Failure is final: an I/O error or end of stream fails every waiting
  request with `ConnectionLostError` and the client opens a new connection.
  A failed write first lets the reader take what the node sent before it
  closed: a node answers a request it refuses unread (a frame over its
  limit) and then closes, and that answer says more than the broken write.
- A timed-out or cancelled request is abandoned: its answer, if it comes, is
  dropped. A request that times out on a connection silent since it was sent
  closes the connection, failing its other requests as lost
  (`laminar.client.protocol`). Deadlines are kept by one `Deadlines` per connection with a single
  timer, not a timer per request (a TimerHandle made and cancelled for every
  request was a tenth of the client's time per produce).
- TLS: reads and writes go through a `laminar.stream.TlsStream` (the same
  seam the shards use), whose handshake runs in `open` within the connect
  timeout; without TLS the stream is the loop's socket calls themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import ssl
from collections.abc import Callable
from typing import Final

from laminar.client.blocking import tls_reason
from laminar.client.errors import (
    CannotConnectError,
    ConnectionLostError,
    LaminarError,
    RequestTimeoutError,
)
from laminar.client.protocol import (
    CLIENT_MAX_FRAME_BYTES,
    ClientProtocol,
    Liveness,
    silent_error,
)
from laminar.client.routing import Address, format_address
from laminar.outbox import Outbox
from laminar.security.tls import TlsSession
from laminar.stream import PlainStream, Stream, TlsStream
from laminar.tasks import settle
from laminar.wire import Frame, Message

_READ_BYTES: Final = 256 << 10
_SALVAGE_S: Final = 1.0
"""After a failed write, how long the reader may take to drain what the node
sent before the connection is failed anyway (a dead socket reads at once)."""
_WATCH_S: Final = 0.25
"""How often a connection with requests in flight asks its `Liveness`."""


def _is_ip_literal(host: str) -> bool:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        return True
    return False


async def open_socket(address: Address, timeout_s: float) -> socket.socket:
    """A connected non-blocking TCP socket with Nagle off; `CannotConnectError` if not."""
    loop = asyncio.get_running_loop()
    host, port = address
    try:
        if _is_ip_literal(host):
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sockaddr: tuple[object, ...] = (host, port)
        else:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            family, _, _, _, sockaddr = infos[0]
    except OSError as exc:
        raise CannotConnectError(f"cannot resolve {format_address(address)}: {exc}") from exc
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        await asyncio.wait_for(loop.sock_connect(sock, sockaddr), timeout_s)
    except (OSError, TimeoutError) as exc:
        sock.close()
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        if isinstance(exc, TimeoutError):
            reason = f"no answer within {timeout_s:g} s"
        raise CannotConnectError(f"cannot reach {format_address(address)}: {reason}") from exc
    except BaseException:
        sock.close()
        raise
    return sock


class Deadlines:
    """The deadlines of one connection's requests, with one timer for them all.

    Requests that share a timeout expire in the order they were made (the loop's
    clock never goes back), so each timeout value keeps an insertion-ordered
    dict and only its first entry can be due. The timer is armed for the
    earliest deadline known when it was set; answered requests simply leave
    their dicts, and a timer that finds nothing due re-arms for what is next.
    """

    __slots__ = ("_groups", "_loop", "_on_expire", "_timer", "_timer_at")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, on_expire: Callable[[int, float], None]
    ) -> None:
        self._loop = loop
        self._on_expire = on_expire
        self._groups: dict[float, dict[int, float]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def add(self, corr: int, timeout_s: float) -> None:
        deadline = self._loop.time() + timeout_s
        group = self._groups.get(timeout_s)
        if group is None:
            group = self._groups[timeout_s] = {}
        group[corr] = deadline
        if deadline < self._timer_at:
            self._arm(deadline)

    def discard(self, corr: int, timeout_s: float) -> None:
        group = self._groups.get(timeout_s)
        if group is not None and group.pop(corr, None) is not None and not group:
            del self._groups[timeout_s]

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._timer_at = math.inf
        now = self._loop.time()
        expired: list[tuple[int, float]] = []
        for timeout_s, group in list(self._groups.items()):
            while group:
                corr, deadline = next(iter(group.items()))
                if deadline > now:
                    break
                del group[corr]
                expired.append((corr, timeout_s))
            if not group:
                del self._groups[timeout_s]
        if self._groups:
            self._arm(min(next(iter(g.values())) for g in self._groups.values()))
        for corr, timeout_s in expired:
            self._on_expire(corr, timeout_s)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._groups.clear()


class AsyncConnection:
    """One pipelined connection; see the module docstring."""

    def __init__(
        self,
        stream: Stream,
        address: Address,
        max_frame_bytes: int = CLIENT_MAX_FRAME_BYTES,
    ) -> None:
        self.address = address
        self._stream = stream
        self._sock = stream.sock
        self._loop = asyncio.get_running_loop()
        self._proto = ClientProtocol(max_frame_bytes)
        self._waiters: dict[int, asyncio.Future[Frame]] = {}
        self._outbox = Outbox(self._loop, stream, self._on_write_error)
        self._deadlines = Deadlines(self._loop, self._expire)
        self._error: ConnectionLostError | None = None
        self._write_error: ConnectionLostError | None = None
        self._salvage_timer: asyncio.TimerHandle | None = None
        self._liveness = Liveness()
        self._watch: asyncio.TimerHandle | None = None
        self._reader = self._loop.create_task(self._read_loop())

    @classmethod
    async def open(
        cls,
        address: Address,
        connect_timeout_s: float = 5.0,
        max_frame_bytes: int = CLIENT_MAX_FRAME_BYTES,
        tls: ssl.SSLContext | None = None,
    ) -> AsyncConnection:
        sock = await open_socket(address, connect_timeout_s)
        loop = asyncio.get_running_loop()
        if tls is None:
            return cls(PlainStream(loop, sock), address, max_frame_bytes)
        session = TlsSession(tls, server_side=False, server_hostname=address[0])
        stream = TlsStream(loop, sock, session)
        try:
            await asyncio.wait_for(stream.handshake(), connect_timeout_s)
        except (OSError, TimeoutError, ValueError) as exc:
            sock.close()
            raise CannotConnectError(
                f"TLS handshake with {format_address(address)} failed: {tls_reason(exc)}"
            ) from exc
        except BaseException:
            sock.close()
            raise
        return cls(stream, address, max_frame_bytes)

    @property
    def broken(self) -> bool:
        return self._error is not None

    @property
    def in_flight(self) -> int:
        return len(self._waiters)

    async def request(self, message: Message, timeout_s: float) -> Frame:
        """Send `message` and wait for its answer frame."""
        if self._error is not None:
            raise _copy(self._error)
        corr, buffers = self._proto.request(message)
        fut: asyncio.Future[Frame] = self._loop.create_future()
        self._waiters[corr] = fut
        self._outbox.send(buffers)
        self._deadlines.add(corr, timeout_s)
        if self._watch is None:
            self._watch = self._loop.call_later(_WATCH_S, self._check_liveness)
        try:
            return await fut
        finally:
            self._deadlines.discard(corr, timeout_s)
            if not fut.done() or fut.cancelled():
                self._waiters.pop(corr, None)
                self._proto.abandon(corr)

    def _expire(self, corr: int, timeout_s: float) -> None:
        if self._proto.expire(corr):  # silent since it was sent: fail every waiter
            self._fail(silent_error(format_address(self.address)))
            return
        fut = self._waiters.pop(corr, None)
        if fut is not None and not fut.done():
            fut.set_exception(
                RequestTimeoutError(
                    f"no answer from {format_address(self.address)} within {timeout_s:g} s"
                )
            )

    def _check_liveness(self) -> None:
        """Every `_WATCH_S` while requests are in flight (`Liveness`)."""
        self._watch = None
        if self._error is not None:
            return
        verdict = self._liveness.check(self._loop.time(), self._proto)
        if verdict == Liveness.SILENT:
            self._fail(silent_error(format_address(self.address)))
            return
        if verdict == Liveness.PROBE:
            self._outbox.send(self._proto.probe())
        if self._proto.in_flight:
            self._watch = self._loop.call_later(_WATCH_S, self._check_liveness)

    # --- writing ---------------------------------------------------------------------

    def _on_write_error(self, exc: BaseException) -> None:
        """Let the reader drain the answers already sent, then fail with this."""
        error = self._lost(exc) if isinstance(exc, OSError) else ConnectionLostError(str(exc))
        if self._error is not None or self._write_error is not None:
            return
        self._write_error = error
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_WR)
        self._salvage_timer = self._loop.call_later(_SALVAGE_S, self._fail, error)

    # --- reading ---------------------------------------------------------------------

    async def _read_loop(self) -> None:
        view = memoryview(bytearray(_READ_BYTES))
        proto = self._proto
        waiters = self._waiters
        recv_into = self._stream.recv_into
        try:
            while True:
                n = await recv_into(view[: min(_READ_BYTES, proto.receive_room)])
                if n == 0:
                    raise ConnectionLostError(
                        f"{format_address(self.address)} closed the connection"
                    )
                for frame in proto.receive(view[:n]):
                    fut = waiters.pop(frame.correlation_id, None)
                    if fut is not None and not fut.done():
                        fut.set_result(frame)
        except ConnectionLostError as exc:
            self._fail(self._write_error or exc)
        except OSError as exc:
            self._fail(self._write_error or self._lost(exc))

    # --- closing ---------------------------------------------------------------------

    async def close(self) -> None:
        """Close the connection; requests still waiting fail with ConnectionLostError."""
        reader = self._reader
        self._fail(
            ConnectionLostError(
                f"connection to {format_address(self.address)} was closed by the client"
            )
        )
        await settle(reader)

    def _fail(self, error: ConnectionLostError) -> None:
        if self._error is not None:
            return
        self._error = error
        if self._salvage_timer is not None:
            self._salvage_timer.cancel()
        waiters = list(self._waiters.values())
        self._waiters.clear()
        for fut in waiters:
            if not fut.done():
                fut.set_exception(_copy(error))
        if self._reader is not asyncio.current_task():
            self._reader.cancel()
        self._outbox.abort()
        self._deadlines.close()
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        # The reader's recv may still be in the kernel (io_uring): shut the socket
        # down now, close it once the reader has let go of it.
        self._stream.end()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        if self._reader.done():
            self._sock.close()
        else:
            self._reader.add_done_callback(lambda _task: self._sock.close())

    def _lost(self, exc: OSError) -> ConnectionLostError:
        reason = exc.strerror or str(exc) or type(exc).__name__
        return ConnectionLostError(f"connection to {format_address(self.address)} failed: {reason}")


def _copy(error: LaminarError) -> LaminarError:
    """A fresh instance per waiter, so tracebacks do not pile up on one object."""
    copy = type(error)(error.message, code=error.code)
    copy.__cause__ = error.__cause__
    return copy
