"""TLS for the blocking client: the socket calls `BlockingConnection` makes,
over a `laminar.security.tls.TlsSession`.

Why not `ssl.SSLSocket`: the blocking connection reads in one thread while
others write, and one OpenSSL connection must not be used by two threads at
once; `SSLSocket` has no lock. Here the session is only touched under
`_lock`, while the socket I/O happens outside it: a reader blocked in
`recv` does not hold up a writer. Writers are already serialised by the
connection's send lock, and the ciphertext the session makes is taken from
it and sent in that order (output a read made, a KeyUpdate answer, waits in
`_pending` and leaves first with the next write).

Blocking and time limits stay the socket's: SO_RCVTIMEO still ends a read
with `BlockingIOError` (TLS's own want-read never leaks out), and a send that
times out breaks the connection as before.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Sequence
from typing import Final

from laminar.security.tls import TlsSession
from laminar.wire.codec import Buffer

_RECV_BYTES: Final = 256 << 10


class TlsSocket:
    """A connected blocking socket speaking TLS (see the module docstring)."""

    def __init__(self, sock: socket.socket, session: TlsSession) -> None:
        self._sock = sock
        self._session = session
        self._lock = threading.Lock()
        self._pending = b""
        self._sending = 0
        """Sends of ciphertext under way (or cut off by an error): no alert then."""

    @property
    def session(self) -> TlsSession:
        return self._session

    def handshake(self) -> None:
        """Run the handshake under the socket's current timeout; `ssl.SSLError`
        (certificate verification included) or `OSError` if it fails."""
        session = self._session
        while True:
            try:
                done = session.handshake()
            except ssl.SSLError:
                with contextlib.suppress(OSError):  # the alert, so the node knows why
                    self._sock.sendall(session.take_output())
                raise
            out = session.take_output()
            if out:
                self._sock.sendall(out)
            if done:
                return
            data = self._sock.recv(_RECV_BYTES)
            if not data:
                raise ssl.SSLEOFError("the node closed the connection during the TLS handshake")
            session.feed(data)

    def sendmsg(self, buffers: Sequence[Buffer]) -> int:
        """Encrypt and send all of `buffers`; their plaintext size."""
        plain = b"".join(buffers)
        with self._lock:
            cipher = self._pending + self._session.encrypt(plain)
            self._pending = b""
            self._sending += 1
        self._sock.sendall(cipher)
        with self._lock:
            self._sending -= 1
        return len(plain)

    def recv_into(self, view: memoryview, nbytes: int = 0, flags: int = 0) -> int:
        """Plaintext into `view` (at most `nbytes` if given); 0 at end of stream."""
        target = view[:nbytes] if nbytes else view
        while True:
            with self._lock:
                got = self._session.read_into(target)
                self._pending += self._session.take_output()
            if got is not None:
                return got
            data = self._sock.recv(_RECV_BYTES, flags)
            if not data:
                return 0
            with self._lock:
                self._session.feed(data)

    def recv(self, n: int, flags: int = 0) -> bytes:
        """The socket's own bytes (ciphertext): for MSG_PEEK probes of liveness."""
        return self._sock.recv(n, flags)

    def shutdown(self, how: int) -> None:
        if how != socket.SHUT_RD:
            self._end()
        self._sock.shutdown(how)

    def close(self) -> None:
        self._end()
        self._sock.close()

    def _end(self) -> None:
        """close_notify (the session says it once), with what the kernel takes
        now (never blocking; not while a send is under way or after output
        still waiting: it would land inside a record or out of order)."""
        with self._lock:
            alert = b"" if self._pending or self._sending else self._session.close_notify()
        if alert:
            with contextlib.suppress(OSError):
                self._sock.send(alert, socket.MSG_DONTWAIT)
