"""Socket operations of UringEventLoop, each one io_uring operation.

They behave as the stock loop's `sock_*` methods do: the same results, and the
same exceptions for closed sockets (EBADF), resets and refused connections.
Differences worth knowing:

- A recv is in the kernel until data arrives. If its task is cancelled the
  recv is cancelled too (IORING_OP_ASYNC_CANCEL). When data (or, for accept, a
  connection) raced the cancel, it is kept for the next call on that socket:
  a `wait_for` around a recv times out without losing bytes.
- `sock_sendall` first tries the socket directly (`eager_send`, on by default,
  as the stock loop and uvloop do): a send that fits the socket buffer needs no
  completion round trip, which measured ~15% of the per-request cost. The rest
  is one IORING_OP_SEND with MSG_WAITALL: the kernel retries short sends
  itself, so a large buffer costs one operation. `UringEventLoop(eager_send=
  False)` sends everything through the ring.
- Closing a socket while one of its operations is in flight does not end that
  operation (the ring holds a reference to the file); cancel the task first.
- UDP `sock_recvfrom`/`sock_sendto` wait for readiness with IORING_OP_POLL_ADD
  and then call the socket itself (a msghdr per datagram is not worth it here).
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import struct
import weakref
from typing import Any

from laminar.iouring import abi
from laminar.iouring.native import BYTES_DATA_OFFSET, readable_address, writable_address

from .buffers import PER_CLASS as _POOL_PER_CLASS
from .core import UringLoopCore, _oserror

_Future = asyncio.Future
_MSG_SEND = socket.MSG_NOSIGNAL | socket.MSG_WAITALL
_ACCEPT_FLAGS = socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC
_POLLIN = 0x001
_POLLOUT = 0x004
_OP_RECV = abi.OP_RECV
_OP_SEND = abi.OP_SEND


def _closed_error() -> OSError:
    return OSError(errno.EBADF, "Bad file descriptor")


def pack_sockaddr(family: int, address: Any) -> bytes:
    """The C sockaddr for a Python socket address of `family`."""
    if family == socket.AF_INET:
        host, port = address[0], address[1]
        return struct.pack("<H", family) + struct.pack(
            "!H4s8x", port, socket.inet_pton(socket.AF_INET, host)
        )
    if family == socket.AF_INET6:
        host, port = address[0], address[1]
        flowinfo = address[2] if len(address) > 2 else 0
        scope_id = address[3] if len(address) > 3 else 0
        return (
            struct.pack("<H", family)
            + struct.pack("!HI16s", port, flowinfo, socket.inet_pton(socket.AF_INET6, host))
            + struct.pack("<I", scope_id)
        )
    if family == socket.AF_UNIX:
        path = address.encode() if isinstance(address, str) else bytes(address)
        if path and path[0] != 0:
            path += b"\0"
        if len(path) > 108:
            raise OSError(errno.ENAMETOOLONG, "AF_UNIX path too long")
        return struct.pack("<H", family) + path
    raise ValueError(f"unsupported address family {family}")


class SocketOps(UringLoopCore):
    """`sock_*` coroutines over io_uring."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # What a cancelled recv or accept received anyway (it raced its cancel):
        # kept for the next call on the same socket, so nothing is lost. Stock
        # asyncio waits for readiness and so never has this problem.
        # Keyed by id(socket); a finalizer drops the entry with the socket.
        self._unread: dict[int, bytearray] = {}
        self._unaccepted: dict[socket.socket, list[int]] = {}

    def close(self) -> None:
        super().close()
        for fds in self._unaccepted.values():
            for fd in fds:
                os.close(fd)
        self._unaccepted.clear()
        self._unread.clear()

    # -- receiving -------------------------------------------------------------

    async def sock_recv(self, sock: socket.socket, n: int) -> bytes:
        """Receive up to `n` bytes; b"" at end of stream."""
        fd = sock.fileno()
        if fd < 0:
            raise _closed_error()
        if n <= 0:
            if n < 0:
                raise ValueError("negative buffersize in recv")
            return b""
        if self._unread:
            stashed = self._unread.get(id(sock))
            if stashed:
                data = bytes(stashed[:n])
                del stashed[:n]
                if not stashed:
                    del self._unread[id(sock)]
                return data
        free = self._recv_free.get(n)
        if free:
            buf = free.pop()
        else:
            buf = self._bufs.take(n)
            if buf[2] is not None and len(self._recv_free) < 64:
                self._recv_free[n] = buf[2]  # next time, straight to the free list
        fut: asyncio.Future[bytes] = _Future(loop=self)
        ud = self._ring.prep(_OP_RECV, fd, buf[1], n, 0, 0, (self._fin_recv, fut, buf, sock), None)
        try:
            return await fut
        except asyncio.CancelledError:
            self._cancel_op(ud)
            raise

    def _fin_recv(self, token: tuple[Any, ...], res: int) -> None:
        fut = token[1]
        buf = token[2]
        if not fut.done():
            if res >= 0:
                fut.set_result(buf[0][:res].tobytes())
            else:
                fut.set_exception(_oserror(-res))
        elif res > 0:
            self._stash_unread(token[3], buf[0][:res])
        home = buf[2]  # BufferPool.give, inlined
        if home is not None and len(home) < _POOL_PER_CLASS:
            home.append(buf)

    async def sock_recv_into(self, sock: socket.socket, buf: Any) -> int:
        """Receive into a writable buffer; return the number of bytes."""
        fd = sock.fileno()
        if fd < 0:
            raise _closed_error()
        view = memoryview(buf).cast("B")
        if not len(view):
            return 0
        if self._unread:
            stashed = self._unread.get(id(sock))
            if stashed:
                n = min(len(view), len(stashed))
                view[:n] = stashed[:n]
                del stashed[:n]
                if not stashed:
                    del self._unread[id(sock)]
                return n
        address, pin = writable_address(view)
        fut: asyncio.Future[int] = _Future(loop=self)
        ud = self._ring.prep(
            _OP_RECV, fd, address, len(view), 0, 0, (self._fin_recv_into, fut, sock, view), pin
        )
        return await self._await_op(fut, ud)

    def _fin_recv_into(self, token: tuple[Any, ...], res: int) -> None:
        fut = token[1]
        if not fut.done():
            if res >= 0:
                fut.set_result(res)
            else:
                fut.set_exception(_oserror(-res))
        elif res > 0:
            self._stash_unread(token[2], token[3][:res])

    def _stash_unread(self, sock: socket.socket, data: memoryview) -> None:
        key = id(sock)
        stashed = self._unread.get(key)
        if stashed is None:
            self._unread[key] = bytearray(data)
            weakref.finalize(sock, self._unread.pop, key, None)
        else:
            stashed += data

    # -- sending ---------------------------------------------------------------

    async def sock_sendall(self, sock: socket.socket, data: Any) -> None:
        """Send all of `data`.

        With `eager_send` (the default, as in the stock loop and uvloop) the
        socket is first offered the data directly: a send that fits in the
        socket buffer costs one syscall and no completion round trip. What does
        not fit goes through the ring as one SEND with MSG_WAITALL, which the
        kernel finishes by itself.
        """
        fd = sock.fileno()
        if fd < 0:
            raise _closed_error()
        sent = 0
        # Only a non-blocking socket may be tried directly: a blocking one would
        # stall the whole loop (the ring handles either kind).
        if self._eager_send and sock.gettimeout() == 0.0:
            try:
                sent = sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            if type(data) is bytes:
                if sent == len(data):
                    return
            elif sent == memoryview(data).nbytes:
                return
        if type(data) is bytes:
            total = len(data)
            address = id(data) + BYTES_DATA_OFFSET
            keep: object = data
        else:
            with memoryview(data) as view:
                total = view.nbytes
            if not total:
                return
            address, keep = readable_address(data)
        while sent < total:
            fut: asyncio.Future[int] = _Future(loop=self)
            ud = self._ring.prep(
                _OP_SEND,
                fd,
                address + sent,
                total - sent,
                0,
                _MSG_SEND,
                (self._fin_result, fut),
                keep,
            )
            try:
                n = await fut
            except asyncio.CancelledError:
                self._cancel_op(ud)
                raise
            if n == 0:
                raise _oserror(errno.EPIPE)
            sent += n

    # -- connections -----------------------------------------------------------

    async def sock_accept(self, sock: socket.socket) -> tuple[socket.socket, Any]:
        """Accept a connection; the new socket is non-blocking, as with the stock loop."""
        fd = sock.fileno()
        if fd < 0:
            raise _closed_error()
        waiting = self._unaccepted.get(sock)
        if waiting:
            newfd = waiting.pop(0)
            if not waiting:
                del self._unaccepted[sock]
        else:
            fut: asyncio.Future[int] = _Future(loop=self)
            ud = self._ring.prep_accept(fd, _ACCEPT_FLAGS, (self._fin_accept, fut, sock))
            newfd = await self._await_op(fut, ud)
        conn = socket.socket(sock.family, sock.type | socket.SOCK_NONBLOCK, sock.proto, newfd)
        try:
            address = conn.getpeername()
        except OSError:
            address = None
        return conn, address

    def _fin_accept(self, token: tuple[Any, ...], res: int) -> None:
        fut = token[1]
        if not fut.done():
            if res >= 0:
                fut.set_result(res)
            else:
                fut.set_exception(_oserror(-res))
        elif res >= 0:
            if self._closing:
                os.close(res)
            else:
                self._unaccepted.setdefault(token[2], []).append(res)

    async def sock_connect(self, sock: socket.socket, address: Any) -> None:
        """Connect to `address` (host names are resolved as the stock loop does)."""
        fd = sock.fileno()
        if fd < 0:
            raise _closed_error()
        family = sock.family
        if family in (socket.AF_INET, socket.AF_INET6):
            resolved = await self._ensure_resolved(
                address, family=family, type=sock.type, proto=sock.proto, loop=self
            )
            address = resolved[0][4]
        elif family != socket.AF_UNIX:
            await self._connect_by_readiness(sock, address)
            return
        sockaddr = pack_sockaddr(family, address)
        fut: asyncio.Future[int] = _Future(loop=self)
        ud = self._ring.prep_connect(fd, sockaddr, (self._fin_result, fut))
        try:
            await self._await_op(fut, ud)
        except OSError as exc:
            raise OSError(exc.errno, f"Connect call failed {address}") from None

    async def _connect_by_readiness(self, sock: socket.socket, address: Any) -> None:
        try:
            sock.connect(address)
            return
        except (BlockingIOError, InterruptedError):
            pass
        await self._poll(sock.fileno(), _POLLOUT)
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise OSError(err, f"Connect call failed {address}")

    # -- datagrams (readiness through the ring) --------------------------------

    async def _poll(self, fd: int, events: int) -> int:
        fut: asyncio.Future[int] = _Future(loop=self)
        ud = self._ring.prep_poll(fd, events, (self._fin_result, fut))
        return await self._await_op(fut, ud)

    async def sock_recvfrom(self, sock: socket.socket, bufsize: int) -> tuple[bytes, Any]:
        while True:
            try:
                return sock.recvfrom(bufsize)
            except (BlockingIOError, InterruptedError):
                pass
            await self._poll(sock.fileno(), _POLLIN)

    async def sock_recvfrom_into(
        self, sock: socket.socket, buf: Any, nbytes: int = 0
    ) -> tuple[int, Any]:
        while True:
            try:
                return sock.recvfrom_into(buf, nbytes)
            except (BlockingIOError, InterruptedError):
                pass
            await self._poll(sock.fileno(), _POLLIN)

    async def sock_sendto(self, sock: socket.socket, data: Any, address: Any) -> int:
        while True:
            try:
                return sock.sendto(data, address)
            except (BlockingIOError, InterruptedError):
                pass
            await self._poll(sock.fileno(), _POLLOUT)
