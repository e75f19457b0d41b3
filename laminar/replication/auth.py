"""Peer authentication: a node proves who it is, with no I/O here.

Every node-to-node connection (Raft, metadata, membership) starts with a
mutual HMAC-SHA256 challenge-response before any other frame is accepted:

    initiator -> responder   hello     {node_id, nonce_i}
    responder -> initiator   challenge {node_id, nonce_r, mac_r}
    initiator -> responder   proof     {mac_i}

Each side proves with its own *node key*, bound to its node id:

    cluster_key = HMAC(secret, "laminar cluster key v1")
    key_n       = HMAC(cluster_key, "laminar node key v1" | n)
    mac_x       = HMAC(key_x, "laminar-peer-v2" | role_x | id_i | id_r | nonce_i | nonce_r)

so a proof made for node `n` authenticates `n` and nothing else, and the
session's peer id is the id whose key made the proof. Both nonces are 32
fresh random bytes, so a recorded handshake cannot be replayed; the role is
inside the MAC, so a responder's answer cannot be reflected back as a proof;
the responder proves itself first, so an initiator never sends a MAC to a
node that does not know the secret. Comparisons are constant-time.

What derived keys do not do: every node holds the cluster secret (it must
check every other node's proof), so a holder of the secret can still derive
any node's key and claim any id. Per-node certificates close that:

Certificate mode (`PeerAuth.with_certificates`: the node has
`--tls-cert-file/--tls-key-file/--tls-ca-file` and peers). Every peer
connection is mutual TLS first (`laminar.replication.transport`): both ends
present a certificate the CA file verifies, and each names one node
(`laminar.security.principal.node_id_from_certificate`: its
`URI:laminar-node:<id>` SAN). The same three messages follow, with empty
MACs: `key_of` gives way to the certificate. The responder takes the
initiator's hello only if the id it claims is the one its certificate
names (`Responder(certified=...)`); the initiator dials a node id and
takes the connection only if the responder's certificate names that id
(checked by the transport before the hello). The TLS handshake proved
possession of the certificate's key, so the handshake's result is still an
authenticated node id, now bound to a key only that node holds, and the
frames that follow are encrypted and integrity-protected.

What the HMAC mode does not do either: it authenticates the two ends once,
when the connection opens. It neither encrypts nor protects the frames that
follow against an on-path attacker who can rewrite TCP; certificate mode
does (TLS). The README's security section says so.

Without a secret (`--insecure-peers`, loopback only) the same three messages
carry node ids and empty MACs, and `PeerAuth.required` is False.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import ssl
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

PROTOCOL: Final = b"laminar-peer-v2"
NODE_KEY_LABEL: Final = b"laminar node key v1"
NONCE_BYTES: Final = 32
MAC_BYTES: Final = 32
SECRET_BYTES_MIN: Final = 16
SECRET_FILE_BYTES_MAX: Final = 4096
NODE_ID_BYTES_MAX: Final = 255


class PeerAuthError(Exception):
    """The peer failed authentication (or sent a malformed handshake message)."""


class SecretFileError(Exception):
    """The cluster secret file cannot be used (a usage error at start-up)."""


def load_secret(path: str) -> bytes:
    """The cluster secret in `path` (`read_private_file`): at least 16 bytes
    once surrounding whitespace is stripped."""
    secret = read_private_file(path, "the cluster secret file").strip()
    if len(secret) < SECRET_BYTES_MIN:
        raise SecretFileError(
            f"the cluster secret in {path} has {len(secret)} bytes; it needs at least "
            f"{SECRET_BYTES_MIN} (e.g. `head -c 32 /dev/urandom | base64 > {path}`)"
        )
    return secret


def read_private_file(path: str, what: str) -> bytes:
    """The bytes of `path`, a secret (`what` names it in errors): a regular file
    of at most 4 KiB owned by this user (or root) and not accessible by group
    or others (refused, as ssh does). The file is opened once, without
    following a symlink, and checked through that descriptor, so it cannot be
    swapped between the check and the read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise SecretFileError(f"cannot read {what} {path}: {exc}") from None
    with os.fdopen(fd, "rb") as f:
        _check_private_file(path, what, os.fstat(fd))
        try:
            data = f.read(SECRET_FILE_BYTES_MAX + 1)
        except OSError as exc:
            raise SecretFileError(f"cannot read {what} {path}: {exc}") from None
    if len(data) > SECRET_FILE_BYTES_MAX:
        raise SecretFileError(f"{what} {path} is over {SECRET_FILE_BYTES_MAX} B")
    return data


def write_secret(path: str | os.PathLike[str]) -> None:
    """Make a fresh owner-only cluster secret file at `path` (test and benchmark
    clusters; an operator may use `head -c 32 /dev/urandom | base64`)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(fd, 0o600)
        f.write(base64.b64encode(secrets.token_bytes(32)) + b"\n")


def _check_private_file(path: str, what: str, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise SecretFileError(f"{what} {path} is not a regular file")
    if info.st_uid not in (os.geteuid(), 0):
        raise SecretFileError(
            f"{what} {path} belongs to uid {info.st_uid}, not to this "
            f"user (uid {os.geteuid()}) or root; run: chown {os.geteuid()} {path}"
        )
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretFileError(
            f"{what} {path} is accessible by group or others "
            f"(mode {stat.filemode(info.st_mode)}); run: chmod 600 {path}"
        )


@dataclass(frozen=True, slots=True)
class PeerAuth:
    """This node's identity, and how peers prove theirs: the cluster key, or
    certificates (neither: `--insecure-peers`)."""

    node_id: str
    key: bytes | None
    """The cluster key: derives every node's key (see the module docstring)."""
    dial_context: Callable[[], ssl.SSLContext] | None = None
    """Certificate mode: the TLS context to dial peers with now (it is
    reloaded on SIGHUP); the key is then None."""

    @classmethod
    def from_secret(cls, node_id: str, secret: bytes | None) -> PeerAuth:
        if secret is None:
            return cls(node_id, None)
        return cls(node_id, hmac.new(secret, b"laminar cluster key v1", hashlib.sha256).digest())

    @classmethod
    def with_certificates(
        cls, node_id: str, dial_context: Callable[[], ssl.SSLContext]
    ) -> PeerAuth:
        return cls(node_id, None, dial_context)

    @property
    def certificates(self) -> bool:
        """Whether peers are named by their TLS certificates."""
        return self.dial_context is not None

    @property
    def required(self) -> bool:
        return self.key is not None or self.certificates

    def key_of(self, node_id: str) -> bytes:
        """Node `node_id`'s key (the one seam per-node certificates replace)."""
        if self.key is None:
            raise ValueError("no cluster secret: there are no node keys")
        label = NODE_KEY_LABEL + b"|" + node_id.encode()
        return hmac.new(self.key, label, hashlib.sha256).digest()

    def mac(self, prover: str, role: bytes, initiator: str, responder: str, nonces: bytes) -> bytes:
        """The MAC node `prover` makes (or must have made) in that role."""
        if self.key is None:
            return b""
        transcript = b"|".join((PROTOCOL, role, initiator.encode(), responder.encode(), nonces))
        return hmac.new(self.key_of(prover), transcript, hashlib.sha256).digest()


Nonce = Callable[[], bytes]


def _fresh_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def _field(message: Any, name: str, kind: type[str | bytes], size_max: int) -> Any:
    if not isinstance(message, dict):
        raise PeerAuthError("the handshake message is not a map")
    value = message.get(name)
    if not isinstance(value, (str, bytes)) or type(value) is not kind or len(value) > size_max:
        raise PeerAuthError(f"the handshake message has no valid {name!r}")
    return value


def _nonce_field(message: Any, name: str) -> bytes:
    value: bytes = _field(message, name, bytes, NONCE_BYTES)
    if len(value) != NONCE_BYTES:
        raise PeerAuthError(f"the handshake's {name!r} is not {NONCE_BYTES} bytes")
    return value


def _check_mac(expected: bytes, message: Any, name: str, peer: str) -> None:
    got: bytes = _field(message, name, bytes, MAC_BYTES)
    if not hmac.compare_digest(expected, got):
        raise PeerAuthError(
            f"the peer failed to prove it is node {peer!r} (it has no or another cluster secret)"
        )


class Initiator:
    """The connecting side of one handshake: `hello()`, then `on_challenge()`."""

    def __init__(self, auth: PeerAuth, nonce: Nonce = _fresh_nonce) -> None:
        self._auth = auth
        self._nonce_i = nonce()
        self.peer_id: str | None = None

    def hello(self) -> dict[str, Any]:
        return {"node_id": self._auth.node_id, "nonce": self._nonce_i}

    def on_challenge(self, message: Any) -> dict[str, Any]:
        """Check the responder's proof; return our own. Raises `PeerAuthError`."""
        peer: str = _field(message, "node_id", str, NODE_ID_BYTES_MAX)
        nonces = self._nonce_i + _nonce_field(message, "nonce")
        me = self._auth.node_id
        _check_mac(self._auth.mac(peer, b"responder", me, peer, nonces), message, "mac", peer)
        self.peer_id = peer
        return {"mac": self._auth.mac(me, b"initiator", me, peer, nonces)}


class Responder:
    """The accepting side of one handshake: `on_hello()`, then `on_proof()`.
    In certificate mode `certified` is the node id the initiator's verified
    certificate names (None: it showed none that names a node)."""

    def __init__(
        self, auth: PeerAuth, nonce: Nonce = _fresh_nonce, certified: str | None = None
    ) -> None:
        self._auth = auth
        self._nonce_r = nonce()
        self._certified = certified
        self._peer: str | None = None
        self._nonces = b""

    def on_hello(self, message: Any) -> dict[str, Any]:
        peer: str = _field(message, "node_id", str, NODE_ID_BYTES_MAX)
        if self._auth.certificates and peer != self._certified:
            raise PeerAuthError(
                f"a peer claims to be node {peer!r} but its certificate names "
                + ("no node" if self._certified is None else f"node {self._certified!r}")
            )
        self._nonces = _nonce_field(message, "nonce") + self._nonce_r
        self._peer = peer
        me = self._auth.node_id
        return {
            "node_id": me,
            "nonce": self._nonce_r,
            "mac": self._auth.mac(me, b"responder", peer, me, self._nonces),
        }

    def on_proof(self, message: Any) -> str:
        """The authenticated peer's node id. Raises `PeerAuthError`."""
        if self._peer is None:
            raise PeerAuthError("a proof arrived before the hello")
        auth = self._auth
        expected = auth.mac(self._peer, b"initiator", self._peer, auth.node_id, self._nonces)
        _check_mac(expected, message, "mac", self._peer)
        return self._peer
