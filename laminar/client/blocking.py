"""A blocking TCP connection to one shard, with pipelined requests.

The sync client needs no event loop and no thread of its own: `send` writes a
request's frame with one `sendmsg` (the record buffers are not joined) and
returns its correlation id; `wait(corr)` reads until that answer is in. Any
number of requests may be sent before waiting, and answers may come in any
order: frames for other requests are kept until their `wait`.

Several threads may share a connection. Sends are combined: a request's
frame joins a queue, and whichever thread holds the send lock writes
everything queued so far in one gathering `sendmsg`, so the requests of
threads that arrive while a write is under way leave together in the next
write (one syscall and one node wakeup for all of them). `send` returns only
once its own frame was written, by itself or by the thread before it. Reads
follow the leader/follower pattern: one waiting thread reads the socket at a
time and files every frame it decodes, the others sleep on a condition until
their frame is filed or the reader role is free.

The socket stays in blocking mode (one syscall per read or write). Time
limits come from the kernel: SO_RCVTIMEO ends a read after `_READ_TICK_S` so
the reader can check its deadline, SO_SNDTIMEO ends a send to a node that
stopped reading (the connection is then broken: a partial frame was written).
A connection found silent at a request's deadline is closed
(`laminar.client.protocol`).

With a TLS context the handshake runs at connect, within the connect
timeout, and the connection talks through a `TlsSocket` (same calls, same
blocking and time limits).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import threading
import time
from typing import Final

from laminar.client.errors import (
    CannotConnectError,
    ConnectionLostError,
    RequestTimeoutError,
)
from laminar.client.protocol import (
    CLIENT_MAX_FRAME_BYTES,
    ClientProtocol,
    Liveness,
    silent_error,
)
from laminar.client.routing import Address, format_address
from laminar.client.tls_socket import TlsSocket
from laminar.security.tls import TlsSession
from laminar.wire import Frame, Message
from laminar.wire.codec import Buffer

_IOV_MAX: Final = 1024
_READ_BYTES: Final = 256 << 10
_READ_TICK_S: Final = 0.25
_SEND_TIMEOUT_S: Final = 30.0


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return struct.pack("ll", whole, int((seconds - whole) * 1e6))


def connect(
    address: Address, timeout_s: float, tls: ssl.SSLContext | None = None
) -> socket.socket | TlsSocket:
    """A connected blocking TCP socket with Nagle off, through TLS with `tls`
    (the node's name checked against the host dialled); `CannotConnectError` if not."""
    try:
        sock = socket.create_connection(address, timeout=timeout_s)
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise CannotConnectError(f"cannot reach {format_address(address)}: {reason}") from exc
    conn: socket.socket | TlsSocket = sock
    if tls is not None:
        conn = TlsSocket(sock, TlsSession(tls, server_side=False, server_hostname=address[0]))
        try:
            conn.handshake()
        except (OSError, ValueError) as exc:
            sock.close()
            raise CannotConnectError(
                f"TLS handshake with {format_address(address)} failed: {tls_reason(exc)}"
            ) from exc
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(_READ_TICK_S))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(_SEND_TIMEOUT_S))
    return conn


def tls_reason(exc: BaseException) -> str:
    """Why a TLS handshake failed, in words (a verification failure says what was wrong)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the node's certificate was not accepted: {exc.verify_message}"
    if isinstance(exc, TimeoutError):
        return "no answer in time (is the port speaking TLS?)"
    if isinstance(exc, ssl.SSLError):
        return f"{exc.reason or exc} (does the port speak TLS?)"
    return str(exc) or type(exc).__name__


class BlockingConnection:
    """One blocking connection; thread-safe; broken for good after any I/O error."""

    def __init__(
        self,
        address: Address,
        connect_timeout_s: float = 5.0,
        max_frame_bytes: int = CLIENT_MAX_FRAME_BYTES,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.address = address
        self._sock = connect(address, connect_timeout_s, tls)
        self._proto = ClientProtocol(max_frame_bytes)
        self._liveness = Liveness()
        self._send_lock = threading.Lock()
        self._out: list[Buffer] = []
        """Frames queued for the next write (guarded by `_cond`)."""
        self._queued = 0
        self._written = 0
        """Frames queued / written so far: a sender's frame is out once `_written`
        reaches the count at its queueing."""
        self._cond = threading.Condition(threading.Lock())
        self._done: dict[int, Frame] = {}
        self._reading = False
        self._error: ConnectionLostError | None = None
        self._buf = bytearray(_READ_BYTES)
        self._view = memoryview(self._buf)

    @property
    def broken(self) -> bool:
        return self._error is not None

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._proto.in_flight)

    def peer_closed(self) -> bool:
        """True when the connection is known dead: broken here, or closed by the
        node while idle (checked without blocking). Called before sending a
        request that must not be sent into a connection that is already gone."""
        if self._error is not None:
            return True
        if self._proto.in_flight or self._reading:
            return False
        try:
            data = self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except OSError as exc:
            self._fail(self._lost(exc))
            return True
        if data:
            return False
        self._fail(ConnectionLostError(f"{self._name()} closed the connection"))
        return True

    def send(self, message: Message) -> int:
        """Write `message` (with the frames other threads queued meanwhile);
        return its correlation id for `wait`."""
        with self._cond:
            if self._error is not None:
                raise self._error
            corr, buffers = self._proto.request(message)
            self._out.extend(buffers)
            self._queued += 1
            ticket = self._queued
        with self._send_lock:
            with self._cond:
                batch, self._out = self._out, []
                upto = self._queued
                error = self._error
            if batch and error is None:
                try:
                    self._send_buffers(batch)
                except OSError as exc:
                    error = self._lost(exc)
                    self._fail(error, salvage=True)
                    if self._answered(corr):  # refused before it closed (FRAME_TOO_LARGE)
                        return corr
                    raise error from exc
                except BaseException:
                    # Interrupted mid-frame (KeyboardInterrupt): the stream is out of step.
                    self._fail(ConnectionLostError(f"send to {self._name()} was interrupted"))
                    raise
                self._written = upto
            if self._written < ticket:  # a thread before us failed to write our frame
                raise error or ConnectionLostError(f"send to {self._name()} failed")
        return corr

    def _send_probe(self) -> None:
        """Ask the node for any answer at all (`Liveness`); a failed write is
        the reader's to find."""
        with self._cond:
            buffers = self._proto.probe()
        with self._send_lock, contextlib.suppress(OSError):
            self._send_buffers(buffers)

    def _send_buffers(self, buffers: list[Buffer]) -> None:
        sock = self._sock
        while buffers:
            batch = buffers[:_IOV_MAX]
            sent = sock.sendmsg(batch)
            total = 0
            for b in batch:
                total += len(b)
            if sent == total:
                del buffers[: len(batch)]
                continue
            # A short write (a signal, or the send buffer filled): skip what went out.
            i = 0
            while sent >= len(buffers[i]):
                sent -= len(buffers[i])
                i += 1
            buffers[i] = memoryview(buffers[i])[sent:]
            del buffers[:i]

    def wait(self, corr: int, deadline: float | None) -> Frame:
        """The answer to `corr`, reading the socket as needed. `deadline` is a
        `time.monotonic()` value; past it, `RequestTimeoutError`, or when
        nothing at all came since `corr` was sent, the connection is closed as
        silent and every waiter gets its `ConnectionLostError`."""
        cond = self._cond
        while True:
            probe = False
            with cond:
                while True:
                    frame = self._done.pop(corr, None)
                    if frame is not None:
                        return frame
                    if self._error is not None:
                        raise self._error
                    verdict = self._liveness.check(time.monotonic(), self._proto)
                    if verdict == Liveness.SILENT:
                        silent = silent_error(self._name())
                        self._fail_locked(silent)
                        raise silent
                    probe = verdict == Liveness.PROBE
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        if self._proto.expire(corr):  # silent since it was sent
                            silent = silent_error(self._name())
                            self._fail_locked(silent)
                            raise silent
                        raise RequestTimeoutError(
                            f"no answer from {self._name()} in time (correlation id {corr})"
                        )
                    if not self._reading:
                        self._reading = True
                        break
                    cond.wait(remaining if remaining is None else min(remaining, _READ_TICK_S))
            if probe:
                self._send_probe()
            mine = self._read_once(corr)
            if mine is not None:
                return mine

    def _read_once(self, corr: int) -> Frame | None:
        """One read as the reader: file the frames it completes and return the
        one for `corr` if it came."""
        frames: list[Frame] = []
        error: ConnectionLostError | None = None
        try:
            n = self._sock.recv_into(self._view, min(_READ_BYTES, self._proto.receive_room))
        except BlockingIOError:  # SO_RCVTIMEO tick: let the caller check its deadline
            n = -1
        except OSError as exc:
            error = self._lost(exc)
            n = -1
        except BaseException:
            with self._cond:
                self._reading = False
                self._cond.notify_all()
            raise
        with self._cond:
            self._reading = False
            if self._error is not None:  # closed under the read (close() or a send)
                self._cond.notify_all()
                raise self._error
            try:
                if n == 0:
                    error = ConnectionLostError(f"{self._name()} closed the connection")
                elif n > 0:
                    frames = self._proto.receive(self._view[:n])
            except ConnectionLostError as exc:
                error = exc
            if error is not None:
                self._fail_locked(error)
                raise error
            mine = None
            for frame in frames:
                if frame.correlation_id == corr:
                    mine = frame
                else:
                    self._done[frame.correlation_id] = frame
            self._cond.notify_all()
            return mine

    def abandon(self, corr: int) -> None:
        """Forget `corr` without its answer (the caller gave up on it)."""
        with self._cond:
            self._proto.abandon(corr)
            self._done.pop(corr, None)

    def close(self) -> None:
        self._fail(ConnectionLostError(f"connection to {self._name()} was closed by the client"))

    def _answered(self, corr: int) -> bool:
        with self._cond:
            return corr in self._done

    def _fail(self, error: ConnectionLostError, *, salvage: bool = False) -> None:
        """Break the connection for good. With `salvage` (a send failed), first
        keep the answers the node sent before it closed: a node that refuses a
        request it cannot read (a frame over its limit) answers, then closes,
        and the refusal says more than the broken send."""
        with self._cond:
            if salvage and self._error is None and not self._reading:
                self._salvage_locked()
            self._fail_locked(error)

    def answered(self, corr: int) -> bool:
        """Whether `wait(corr)` would not wait: its answer is filed (read now,
        without blocking, unless another thread is the reader, which files it
        as it comes) or the connection broke."""
        with self._cond:
            if corr not in self._done and self._error is None and not self._reading:
                self._file_available_locked(fail=True)
            return corr in self._done or self._error is not None

    def _salvage_locked(self) -> None:
        """File the complete answers already received, without blocking."""
        self._file_available_locked(fail=False)

    def _file_available_locked(self, *, fail: bool) -> None:
        """File the complete answers the socket holds now, without blocking;
        with `fail`, a socket found closed or failing breaks the connection."""
        error: ConnectionLostError | None = None
        while error is None:
            try:
                n = self._sock.recv_into(
                    self._view, min(_READ_BYTES, self._proto.receive_room), socket.MSG_DONTWAIT
                )
            except BlockingIOError:
                break
            except OSError as exc:
                error = self._lost(exc)
                break
            if n == 0:
                error = ConnectionLostError(f"{self._name()} closed the connection")
                break
            try:
                frames = self._proto.receive(self._view[:n])
            except ConnectionLostError as exc:
                error = exc
                break
            for frame in frames:
                self._done[frame.correlation_id] = frame
        if fail and error is not None:
            self._fail_locked(error)
        self._cond.notify_all()

    def _fail_locked(self, error: ConnectionLostError) -> None:
        if self._error is None:
            self._error = error
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
        self._cond.notify_all()

    def _lost(self, exc: OSError) -> ConnectionLostError:
        reason = exc.strerror or str(exc) or type(exc).__name__
        return ConnectionLostError(f"connection to {self._name()} failed: {reason}")

    def _name(self) -> str:
        return format_address(self.address)
