"""Peer authentication: a node proves it knows the cluster secret, with no I/O here.

Every node-to-node connection (Raft, metadata, membership) starts with a
mutual HMAC-SHA256 challenge-response before any other frame is accepted:

    initiator -> responder   hello     {node_id, nonce_i}
    responder -> initiator   challenge {node_id, nonce_r, mac_r}
    initiator -> responder   proof     {mac_i}

`mac_x = HMAC(key, "laminar-peer-v1" | role_x | id_i | id_r | nonce_i | nonce_r)`
with `key = HMAC(secret, "laminar cluster key v1")`. Both nonces are 32 fresh
random bytes, so a recorded handshake cannot be replayed; the role is inside
the MAC, so a responder's answer cannot be reflected back as a proof; the
responder proves itself first, so an initiator never sends a MAC to a node that
does not know the secret. Comparisons are constant-time.

What this does not do: it authenticates the two ends once, when the connection
opens. It neither encrypts nor protects the frames that follow against an
on-path attacker who can rewrite TCP; that is what TLS (planned) is for. The
README's security section says so.

Without a secret (allowed only when every peer is on loopback) the same three
messages carry node ids and empty MACs, and `PeerAuth.required` is False.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

PROTOCOL: Final = b"laminar-peer-v1"
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
    """The secret in `path`: at least 16 bytes once surrounding whitespace is
    stripped, and not readable by group or others (refused, as ssh does)."""
    try:
        info = os.stat(path)
        with open(path, "rb") as f:
            data = f.read(SECRET_FILE_BYTES_MAX + 1)
    except OSError as exc:
        raise SecretFileError(f"cannot read the cluster secret file {path}: {exc}") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretFileError(
            f"the cluster secret file {path} is accessible by group or others "
            f"(mode {stat.filemode(info.st_mode)}); run: chmod 600 {path}"
        )
    if len(data) > SECRET_FILE_BYTES_MAX:
        raise SecretFileError(f"the cluster secret file {path} is over {SECRET_FILE_BYTES_MAX} B")
    secret = data.strip()
    if len(secret) < SECRET_BYTES_MIN:
        raise SecretFileError(
            f"the cluster secret in {path} has {len(secret)} bytes; it needs at least "
            f"{SECRET_BYTES_MIN} (e.g. `head -c 32 /dev/urandom | base64 > {path}`)"
        )
    return secret


@dataclass(frozen=True, slots=True)
class PeerAuth:
    """This node's identity and the cluster key (None: no secret configured)."""

    node_id: str
    key: bytes | None

    @classmethod
    def from_secret(cls, node_id: str, secret: bytes | None) -> PeerAuth:
        if secret is None:
            return cls(node_id, None)
        return cls(node_id, hmac.new(secret, b"laminar cluster key v1", hashlib.sha256).digest())

    @property
    def required(self) -> bool:
        return self.key is not None

    def mac(self, role: bytes, initiator: str, responder: str, nonces: bytes) -> bytes:
        if self.key is None:
            return b""
        transcript = b"|".join((PROTOCOL, role, initiator.encode(), responder.encode(), nonces))
        return hmac.new(self.key, transcript, hashlib.sha256).digest()


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
        raise PeerAuthError(f"node {peer!r} does not know the cluster secret")


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
        _check_mac(self._auth.mac(b"responder", me, peer, nonces), message, "mac", peer)
        self.peer_id = peer
        return {"mac": self._auth.mac(b"initiator", me, peer, nonces)}


class Responder:
    """The accepting side of one handshake: `on_hello()`, then `on_proof()`."""

    def __init__(self, auth: PeerAuth, nonce: Nonce = _fresh_nonce) -> None:
        self._auth = auth
        self._nonce_r = nonce()
        self._peer: str | None = None
        self._nonces = b""

    def on_hello(self, message: Any) -> dict[str, Any]:
        peer: str = _field(message, "node_id", str, NODE_ID_BYTES_MAX)
        self._nonces = _nonce_field(message, "nonce") + self._nonce_r
        self._peer = peer
        me = self._auth.node_id
        return {
            "node_id": me,
            "nonce": self._nonce_r,
            "mac": self._auth.mac(b"responder", peer, me, self._nonces),
        }

    def on_proof(self, message: Any) -> str:
        """The authenticated peer's node id. Raises `PeerAuthError`."""
        if self._peer is None:
            raise PeerAuthError("a proof arrived before the hello")
        expected = self._auth.mac(b"initiator", self._peer, self._auth.node_id, self._nonces)
        _check_mac(expected, message, "mac", self._peer)
        return self._peer
