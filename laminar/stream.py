"""The byte stream under a connection: plain TCP, or TLS over it.

A shard's `Connection` reads through a stream and its `Outbox` writes
through one (so does `AsyncConnection`), so the framing, budgets, deadlines
and fast paths above see plaintext either way and do not change.

- `PlainStream` is the loop's own socket calls bound to the socket
  (`functools.partial`: no coroutine of its own per read or write).
- `TlsStream` runs a `laminar.security.tls.TlsSession` over the socket:
  reads take ciphertext from the socket and hand back plaintext; writes
  encrypt at most `CHUNK_BYTES` of plaintext at a time and send it.
  Ciphertext of a chunk the kernel did not take whole (`_tail`), and output
  the session made on its own while reading (a KeyUpdate answer), leave
  first on the next write: ciphertext is sent in the order it was made.
  The tail is bounded by one chunk. `end` sends close_notify (unless a
  tail is unsent), so the peer can tell a clean end from a cut connection.
- Input budget: with a budget, a `TlsStream` charges what TLS makes the
  node hold beyond the plaintext the connection charges itself: all
  ciphertext received during the handshake (at most `HANDSHAKE_BYTES_MAX`,
  then the handshake fails), afterwards the ciphertext received and not yet
  taken in. `close` releases it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Final, Protocol

from laminar.security.tls import TlsSession
from laminar.wire.codec import Buffer

_IOV_MAX: Final = 1024
CHUNK_BYTES: Final = 64 << 10
"""Plaintext encrypted and sent at once (four full TLS records)."""
RECV_BYTES_MIN: Final = 16 << 10 | 256
"""A TLS read asks the socket for at least one whole record..."""
RECV_BYTES_MAX: Final = 256 << 10
"""...and at most this (the ciphertext held is charged to the budget)."""
HANDSHAKE_BYTES_MAX: Final = 64 << 10
"""Ciphertext a client may send before its handshake is done."""


class Budget(Protocol):
    """What a stream charges its held ciphertext to (`laminar.shards.budget.InputBudget`)."""

    def charge(self, n: int) -> None: ...

    def release(self, n: int) -> None: ...


def send_gathered(sock: socket.socket, buffers: Sequence[Buffer]) -> int:
    """Send `buffers` with as few `sendmsg` calls as IOV_MAX allows; return the
    bytes the kernel took (fewer than all when the socket buffer filled).
    Raises OSError other than EAGAIN/EINTR."""
    sent = 0
    start = 0
    try:
        while start < len(buffers):
            chunk = buffers[start : start + _IOV_MAX]
            n = sock.sendmsg(chunk)
            sent += n
            if n < sum(map(len, chunk)):
                break
            start += _IOV_MAX
    except (BlockingIOError, InterruptedError):
        pass
    return sent


class Stream(Protocol):
    """What a connection reads and writes through."""

    sock: socket.socket

    async def handshake(self) -> None:
        """Whatever must happen before the first byte of plaintext (TLS: the handshake)."""

    @property
    def recv(self) -> Callable[[int], Awaitable[bytes]]:
        """Up to n bytes; b"" at end of stream."""

    @property
    def recv_into(self) -> Callable[[memoryview], Awaitable[int]]:
        """Into a buffer: the count; 0 at end of stream."""

    @property
    def send_gathered(self) -> Callable[[Sequence[Buffer]], int]:
        """Send what the kernel takes now, without blocking; the plaintext bytes taken."""

    @property
    def sendall(self) -> Callable[[Buffer], Awaitable[None]]:
        """Send all of it."""

    def end(self) -> None:
        """Tell the peer the stream ends here (TLS: close_notify), with what the
        kernel takes now; before `close`, when the owner closes the socket."""

    def close(self) -> None:
        """Release what the stream holds (the socket is its owner's to close)."""

    def peer_certificate(self) -> dict[str, Any] | None:
        """The verified certificate the other end showed (TLS), else None."""

    def detach(self) -> Stream:
        """This stream for a new owner that charges its own budget (a
        connection handed to the replication): it charges none."""


class PlainStream:
    """The socket as it is: the loop's calls bound to it."""

    __slots__ = ("recv", "recv_into", "send_gathered", "sendall", "sock")

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        self.sock = sock
        self.recv = functools.partial(loop.sock_recv, sock)
        self.recv_into = functools.partial(loop.sock_recv_into, sock)
        self.send_gathered = functools.partial(send_gathered, sock)
        self.sendall = functools.partial(loop.sock_sendall, sock)

    async def handshake(self) -> None:
        return None

    def end(self) -> None:
        return None

    def close(self) -> None:
        return None

    def peer_certificate(self) -> None:
        return None

    def detach(self) -> PlainStream:
        return self


def _chunks(buffers: Sequence[Buffer], size: int) -> Iterator[Buffer]:
    """`buffers` as runs of at most `size` bytes: small ones joined, large ones
    cut. A buffer that fits whole is only counted (a fetch answer can be a
    buffer per record); only the one a run ends in is cut."""
    run: list[Buffer] = []
    run_bytes = 0
    for buf in buffers:
        n = len(buf)  # byte buffers, as the outbox counts them
        if run_bytes + n < size:
            if n:
                run.append(buf)
                run_bytes += n
            continue
        view = memoryview(buf).cast("B")
        while run_bytes + len(view) >= size:
            room = size - run_bytes
            run.append(view[:room])
            view = view[room:]
            yield b"".join(run) if len(run) > 1 else run[0]
            run, run_bytes = [], 0
        if len(view):
            run.append(view)
            run_bytes += len(view)
    if run:
        yield b"".join(run) if len(run) > 1 else run[0]


class TlsStream:
    """TLS over a non-blocking socket, on an event loop (see the module docstring)."""

    __slots__ = ("_budget", "_charged", "_loop", "_sending", "_session", "_tail", "sock")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        session: TlsSession,
        budget: Budget | None = None,
    ) -> None:
        self.sock = sock
        self._loop = loop
        self._session = session
        self._budget = budget
        self._charged = 0
        self._tail = b""
        """Ciphertext made and not yet taken by the kernel; it leaves first."""
        self._sending = False
        """A send of ciphertext is in the loop's hands (or was cut off there)."""

    @property
    def session(self) -> TlsSession:
        return self._session

    async def handshake(self) -> None:
        """Run the handshake; `ssl.SSLError` if it fails or the peer leaves."""
        session = self._session
        while True:
            try:
                done = session.handshake()
            except ssl.SSLError:
                with contextlib.suppress(OSError):  # the alert, so the peer knows why
                    self.sock.send(session.take_output())
                raise
            out = session.take_output()
            if out:
                await self._loop.sock_sendall(self.sock, out)
            if done:
                self._hold()
                return
            data = await self._loop.sock_recv(self.sock, RECV_BYTES_MIN)
            if not data:
                raise ssl.SSLEOFError("the peer closed the connection during the TLS handshake")
            session.feed(data)
            self._hold()
            if session.handshake_bytes > HANDSHAKE_BYTES_MAX:
                raise ssl.SSLError(f"handshake sent over {HANDSHAKE_BYTES_MAX} bytes")

    def _hold(self) -> None:
        """Charge the budget for what TLS holds now (see the module docstring)."""
        budget = self._budget
        if budget is None:
            return
        session = self._session
        held = session.pending_input if session.handshaken else session.handshake_bytes
        if held > self._charged:
            budget.charge(held - self._charged)
        elif held < self._charged:
            budget.release(self._charged - held)
        self._charged = held

    async def _fill(self, want: int) -> bool:
        """Feed the session what the socket has; False at end of stream."""
        size = min(max(want, RECV_BYTES_MIN), RECV_BYTES_MAX)
        data = await self._loop.sock_recv(self.sock, size)
        if not data:
            return False
        self._session.feed(data)
        return True

    def _after_read(self) -> None:
        self._hold()
        out = self._session.take_output()
        if out:
            self._tail += out

    async def recv(self, n: int) -> bytes:
        while True:
            data = self._read_bytes(n)
            if data is not None:
                self._after_read()
                return data
            if not await self._fill(n):
                self._hold()
                return b""  # end of stream without close_notify: a plain close

    def _read_bytes(self, n: int) -> bytes | None:
        """Up to `n` bytes of the plaintext of the records fed (one read per
        record); None: feed more; b"": the peer closed."""
        session = self._session
        parts: list[bytes] = []
        left = n
        data: bytes | None = b""  # n == 0 reads nothing, as a socket's recv(0)
        while left:
            data = session.read(left)
            if not data:  # None: feed more; b"": the peer closed
                break
            parts.append(data)
            left -= len(data)
        if not parts:
            return data
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def recv_into(self, view: memoryview) -> int:
        while True:
            got = self._read_available(view)
            if got is not None:
                self._after_read()
                return got
            if not await self._fill(len(view)):
                self._hold()
                return 0  # end of stream without close_notify: a plain close

    def _read_available(self, view: memoryview) -> int | None:
        """Fill `view` with the plaintext of every whole record fed (one read
        per record: a fetch answer is many); None: feed more."""
        session = self._session
        total = 0
        while total < len(view):
            got = session.read_into(view[total:])
            if not got:  # None: feed more; 0: the peer closed
                return total if total else got
            total += got
        return total

    def send_gathered(self, buffers: Sequence[Buffer]) -> int:
        if self._tail and not self._send_tail_now():
            return 0
        taken = 0
        for chunk in _chunks(buffers, CHUNK_BYTES):
            cipher = self._session.encrypt(chunk)
            try:
                sent = self.sock.send(cipher)
            except (BlockingIOError, InterruptedError):
                sent = 0
            taken += len(chunk)
            if sent < len(cipher):
                self._tail = cipher[sent:]
                break
        return taken

    def _send_tail_now(self) -> bool:
        try:
            sent = self.sock.send(self._tail)
        except (BlockingIOError, InterruptedError):
            return False
        self._tail = self._tail[sent:]
        return not self._tail

    async def _drain_tail(self) -> None:
        while self._tail:
            tail, self._tail = self._tail, b""
            await self._send(tail)

    async def sendall(self, data: Buffer) -> None:
        for chunk in _chunks((data,), CHUNK_BYTES):
            await self._drain_tail()
            await self._send(self._session.encrypt(chunk))

    async def _send(self, cipher: bytes) -> None:
        """Through the loop; a send that fails or is cancelled leaves
        `_sending` set: the kernel may hold part of a record, so no alert may follow."""
        self._sending = True
        await self._loop.sock_sendall(self.sock, cipher)
        self._sending = False

    def end(self) -> None:
        if self._tail or self._sending:
            return  # mid-record: an alert now would corrupt the stream, a cut says as much
        alert = self._session.close_notify()
        if alert:
            with contextlib.suppress(OSError):
                self.sock.send(alert)

    def close(self) -> None:
        if self._budget is not None and self._charged:
            self._budget.release(self._charged)
        self._charged = 0
        self._tail = b""

    def peer_certificate(self) -> dict[str, Any] | None:
        return self._session.peer_certificate()

    def detach(self) -> TlsStream:
        """`close`d here; the new stream keeps the session and unsent output."""
        tail = self._tail
        self.close()
        detached = TlsStream(self._loop, self.sock, self._session)
        detached._tail = tail
        return detached
