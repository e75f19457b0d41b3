"""TLS for the client-facing ports and for the clients: contexts, and a sans-IO session.

Why sans-IO: the shard's io_uring loop has no transports, so TLS runs in
userspace over two memory BIOs (what asyncio does inside). `TlsSession` turns
ciphertext into plaintext and back and never touches a socket; thin shells
move its bytes: `laminar.stream.TlsStream` on an event loop (the shards' ports,
`AsyncClient`) and `laminar.client.tls_socket.TlsSocket` (the blocking `Client`).

Rules:

- TLS 1.2 at least; OpenSSL picks 1.3 whenever the peer speaks it.
- The server issues no session tickets (`num_tickets = 0`) and refuses
  renegotiation: after the handshake a connection's reads produce no output
  of their own, except a TLS 1.3 KeyUpdate answer, which leaves before the
  next answer (`laminar.stream.TlsStream`).
- Clients verify the node's certificate and its name (the host they dial)
  by default, against `ca_file` or the system's trust store.
- `ServerTls.reload` (SIGHUP) builds a new context from the same files: new
  handshakes use it, sessions already made keep theirs. A reload that fails
  keeps the old context and says why. A server that holds one context for
  good (the admin endpoint, on asyncio) gets `switching_context`.
- With `--tls-ca-file` the node's ports ask for a client certificate and
  verify one if shown (`CERT_OPTIONAL`: a client without one still
  connects, and logs in with SCRAM; a certificate the CA file does not
  verify fails the handshake). A verified one logs a client in as
  `User:<its CN>` (`laminar.security.login`). Peer links need it: another
  node dialing a shard port shows its node certificate
  (`peer_client_context`), and the replication takes
  the node id from it (`laminar.replication.auth`). A node dialing a peer
  verifies the peer's certificate against the same CA file, and checks the
  node id it names instead of a host name (peers are dialed by node id, at
  whatever address membership gives).
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from typing import Any, Final, cast

from laminar.wire.codec import Buffer

logger = logging.getLogger("laminar.tls")

MIN_VERSION: Final = ssl.TLSVersion.TLSv1_2


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """The node's certificate chain and key (PEM), and the CA for client certificates."""

    cert_file: str
    key_file: str
    ca_file: str = ""


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """A server context for the node's ports; `ssl.SSLError`/`OSError` if a file is bad."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = MIN_VERSION
    context.options |= ssl.OP_NO_RENEGOTIATION
    context.num_tickets = 0
    context.load_cert_chain(files.cert_file, files.key_file)
    if files.ca_file:
        context.load_verify_locations(files.ca_file)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def peer_client_context(files: TlsFiles) -> ssl.SSLContext:
    """The context a node dials its peers with: it shows the node's own
    certificate and requires one the CA file verifies; the node id that
    certificate names is checked by the caller, not a host name."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = MIN_VERSION
    context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(files.cert_file, files.key_file)
    context.load_verify_locations(files.ca_file)
    return context


def client_context(
    tls: bool | ssl.SSLContext,
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
) -> ssl.SSLContext | None:
    """The context a client connects with: `tls` itself if it is one, a
    verifying context (`ca_file`, else the system's CAs) if True, else None;
    with `cert_file` (and `key_file`, unless the key is in it) it shows that
    client certificate (mutual TLS: the node names the client by it)."""
    if key_file and not cert_file:
        raise ValueError("key_file needs cert_file")
    if isinstance(tls, ssl.SSLContext):
        if ca_file or cert_file:
            raise ValueError(
                "give ca_file/cert_file or an SSLContext, not both (load them into the context)"
            )
        return tls
    if not tls:
        if ca_file or cert_file:
            raise ValueError("ca_file and cert_file need tls=True")
        return None
    context = ssl.create_default_context(cafile=ca_file or None)
    context.minimum_version = MIN_VERSION
    if cert_file:
        context.load_cert_chain(cert_file, key_file or None)
    return context


class ServerTls:
    """The context new connections handshake with, and the one this node dials
    its peers with (with a CA file); swapped whole on `reload`."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self.context = server_context(files)
        self.peer_context = peer_client_context(files) if files.ca_file else None

    def reload(self) -> bool:
        """Load the files again for new handshakes; True if it worked (else the
        old contexts stay and the reason is logged)."""
        try:
            context = server_context(self.files)
            self.peer_context = peer_client_context(self.files) if self.files.ca_file else None
            self.context = context
        except (OSError, ssl.SSLError) as exc:
            logger.error("TLS certificate reload failed, keeping the old one: %s", exc)
            return False
        logger.info("TLS certificate reloaded from %s", self.files.cert_file)
        return True

    def dial_context(self) -> ssl.SSLContext:
        """The current context to dial peers with; `ValueError` without a CA file."""
        if self.peer_context is None:
            raise ValueError("dialing peers needs --tls-ca-file")
        return self.peer_context

    def switching_context(self) -> ssl.SSLContext:
        """A context for a server that keeps the one it is given (asyncio's
        `start_server`, the admin endpoint): every handshake switches to the
        current `context` as it reads the ClientHello (an SNI callback, which
        OpenSSL calls with or without a server name)."""
        front = server_context(self.files)
        front.sni_callback = self._switch
        return front

    def _switch(self, obj: ssl.SSLObject, _name: str | None, _front: ssl.SSLContext) -> None:
        obj.context = self.context


class TlsSession:
    """One TLS connection's state, fed and drained as bytes (no I/O).

    `feed` ciphertext received, then `handshake` (until True) and `read`;
    `encrypt` plaintext to send; after every call, `take_output` holds the
    ciphertext to send, in order.
    """

    __slots__ = ("_ended", "_in", "_obj", "_out", "handshake_bytes", "handshaken")

    def __init__(
        self, context: ssl.SSLContext, *, server_side: bool, server_hostname: str | None = None
    ) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = context.wrap_bio(
            self._in, self._out, server_side=server_side, server_hostname=server_hostname
        )
        self.handshaken = False
        self._ended = False
        self.handshake_bytes = 0
        """Ciphertext fed before the handshake finished (what it made the node hold)."""

    @property
    def pending_input(self) -> int:
        """Ciphertext fed and not yet taken in by TLS."""
        return self._in.pending

    @property
    def version(self) -> str | None:
        return self._obj.version()

    def peer_certificate(self) -> dict[str, Any] | None:
        """The certificate the other end showed and the context verified
        (`getpeercert()`), None if it showed none."""
        return self._obj.getpeercert() or None

    def feed(self, data: bytes) -> None:
        if not self.handshaken:
            self.handshake_bytes += len(data)
        self._in.write(data)

    def handshake(self) -> bool:
        """Advance the handshake; True once done. Raises `ssl.SSLError` if it failed."""
        if self.handshaken:
            return True
        try:
            self._obj.do_handshake()
        except ssl.SSLWantReadError:
            return False
        self.handshaken = True
        return True

    def read(self, n: int) -> bytes | None:
        """Up to `n` bytes of plaintext; None: feed more; b"": the peer closed
        (close_notify). Raises `ssl.SSLError` on a broken stream, bytes
        after close_notify included."""
        try:
            data = self._obj.read(n)
        except ssl.SSLWantReadError:
            return None
        except ssl.SSLZeroReturnError:
            return self._closed()
        return data if data or not n else self._closed()  # b"": close_notify came

    def read_into(self, view: memoryview) -> int | None:
        """`read`, into `view`: the count, None (feed more) or 0 (closed)."""
        try:
            # With a buffer the read answers a count (typeshed says bytes).
            got = cast(int, self._obj.read(len(view), view))
        except ssl.SSLWantReadError:
            return None
        except ssl.SSLZeroReturnError:
            return len(self._closed())
        return got if got or not len(view) else len(self._closed())

    def _closed(self) -> bytes:
        if self._in.pending:
            raise ssl.SSLError(f"{self._in.pending} bytes after the peer's close_notify")
        return b""

    def encrypt(self, data: Buffer) -> bytes:
        """`data` as ciphertext, behind any output still waiting in the session."""
        self._obj.write(data)
        return self._out.read()

    def close_notify(self) -> bytes:
        """The alert that ends the session cleanly (close_notify), as ciphertext
        to send, so the peer can tell the end from a cut; b"" before the
        handshake finished, on a broken session, or once said. The peer's
        own close_notify is not waited for."""
        if not self.handshaken or self._ended:
            return b""
        self._ended = True
        try:
            self._obj.unwrap()
        except ssl.SSLWantReadError:
            pass  # sent ours; the peer's would come next
        except (ssl.SSLError, ValueError):
            return b""
        return self.take_output()

    def take_output(self) -> bytes:
        """Ciphertext the session made on its own (handshake messages, a KeyUpdate answer)."""
        return self._out.read() if self._out.pending else b""
