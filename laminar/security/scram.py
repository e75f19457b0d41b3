"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), on `scramp`, with no I/O.

Facts that shape this module:

- The server stores, per user and mechanism, a salt, an iteration count,
  StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey =
  HMAC(SaltedPassword, "Server Key") (`ScramCredential`). Never the password:
  StoredKey checks a proof but cannot make one, so a copy of the store does not
  log anyone in (it still allows an offline guess at weak passwords; the
  iteration count is what makes each guess cost).
- One exchange is four messages: client-first (`n,,n=user,r=cnonce`),
  server-first (`r=cnonce+snonce,s=salt,i=iterations`), client-final
  (`c=biws,r=...,p=proof`), server-final (`v=signature` or `e=error`).
  Kafka's SaslHandshake/SaslAuthenticate carry exactly these bytes, and so will
  laminar's own auth frames: `ScramServer.receive(bytes) -> Step` serves both
  doors. A `Challenge` is sent and the next client message awaited; the
  exchange ends in `Authenticated` (the principal) or `Refused`.
- The server nonce is fresh for every exchange (`secrets`, or given by a test),
  so a client-final recorded from one exchange proves nothing in another.
- Unknown users are not told apart from wrong passwords: an unknown name gets a
  decoy credential (salt and keys derived from `decoy_key` and the name, so
  the same name always gets the same salt) and the exchange fails at the proof
  with `e=invalid-proof`, as a wrong password does (RFC 5802 section 5.1).
  `Refused.failure` still says UNKNOWN_USER for the server's log. The decoy key
  must be the same on every node and across restarts, or a name's changing
  salt gives it away.
- Bounds: each client message at most `MESSAGE_BYTES_MAX` bytes (a username,
  a nonce and a proof fit in far less); iterations `ITERATIONS_MIN`..
  `ITERATIONS_MAX`, Kafka's range, which the client enforces too (a hostile
  server must not make it hash for minutes).
- No channel binding (the -PLUS mechanisms): Kafka's SCRAM has none, and TLS
  already binds the server. A client asking for it (`p=`) is refused.
- Kafka's `tokenauth=true` extension (delegation tokens) is not served: it is
  ignored, so such a client's proof, made from a token, fails as a wrong
  password would.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from types import ModuleType
from typing import Final

from laminar.security.errors import AuthenticationError, AuthFailure
from laminar.security.principal import PrincipalError, user_principal

ITERATIONS_MIN: Final = 4096
ITERATIONS_MAX: Final = 16384
ITERATIONS_DEFAULT: Final = 8192
"""Within Kafka's range; PBKDF2 at this count costs a client a few ms per login."""
SALT_BYTES: Final = 32
MESSAGE_BYTES_MAX: Final = 1024
PASSWORD_CHARS_MAX: Final = 1024


def _scramp() -> ModuleType:
    """`scramp`, imported when first needed: it costs a process ~80 ms to
    import (asn1crypto), and every shard and CLI process imports this module
    while most never run an exchange."""
    return importlib.import_module("scramp")


class Mechanism(Enum):
    """The SASL mechanism names, as Kafka clients send them."""

    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"

    @property
    def digest_bytes(self) -> int:
        return 32 if self is Mechanism.SCRAM_SHA_256 else 64


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server keeps to check one user's SCRAM logins for one mechanism."""

    mechanism: Mechanism
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def check(self) -> None:
        """Raise ValueError unless the fields fit the mechanism and the bounds."""
        if not ITERATIONS_MIN <= self.iterations <= ITERATIONS_MAX:
            raise ValueError(f"iterations must be {ITERATIONS_MIN}-{ITERATIONS_MAX}")
        if not 12 <= len(self.salt) <= 64:
            raise ValueError("a salt has 12-64 bytes")
        size = self.mechanism.digest_bytes
        if len(self.stored_key) != size or len(self.server_key) != size:
            raise ValueError(f"{self.mechanism.value} keys have {size} bytes")


def password_line(text: str) -> str | None:
    """The password a password file holds: its one line without the line's
    end (leading and trailing spaces are the password's own, for every
    reader: the CLI, the Spark connector, the bootstrap user file); None
    unless the text is one non-empty line."""
    line = text.removesuffix("\n").removesuffix("\r")
    return line if line and "\n" not in line and "\r" not in line else None


def make_credential(
    mechanism: Mechanism,
    password: str,
    *,
    iterations: int = ITERATIONS_DEFAULT,
    salt: bytes | None = None,
) -> ScramCredential:
    """Salt and hash `password` into a credential (a fresh random salt unless
    one is given); the password itself is not kept."""
    if not 0 < len(password) <= PASSWORD_CHARS_MAX:
        raise ValueError(f"a password has 1-{PASSWORD_CHARS_MAX} characters")
    if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
        raise ValueError(f"iterations must be {ITERATIONS_MIN}-{ITERATIONS_MAX}")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    scramp = _scramp()
    try:
        salt, stored_key, server_key, iterations = scramp.ScramMechanism(
            mechanism.value
        ).make_auth_info(password, iteration_count=iterations, salt=salt)
    except scramp.ScramException as exc:
        raise ValueError(str(exc)) from None
    credential = ScramCredential(mechanism, salt, iterations, stored_key, server_key)
    credential.check()
    return credential


def credential_from_salted_password(
    mechanism: Mechanism, salt: bytes, iterations: int, salted_password: bytes
) -> ScramCredential:
    """The credential of a password a client salted itself (Kafka's
    AlterUserScramCredentials sends SaltedPassword = PBKDF2(password, salt,
    iterations)): its keys, not the salted password, which would log in.
    ValueError unless it fits the mechanism and the bounds."""
    if len(salted_password) != mechanism.digest_bytes:
        raise ValueError(f"a {mechanism.value} salted password has {mechanism.digest_bytes} bytes")
    digest = hashlib.sha256 if mechanism is Mechanism.SCRAM_SHA_256 else hashlib.sha512
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    server_key = hmac.new(salted_password, b"Server Key", digest).digest()
    credential = ScramCredential(
        mechanism, salt, iterations, digest(client_key).digest(), server_key
    )
    credential.check()
    return credential


def decoy_credential(mechanism: Mechanism, name: str, decoy_key: bytes) -> ScramCredential:
    """A credential for a user that does not exist: stable per name (so its salt
    does not betray it), and matching no password (its keys are not the hash
    of one)."""
    size = mechanism.digest_bytes

    def derive(label: bytes) -> bytes:
        message = label + mechanism.value.encode() + b"\0" + name.encode()
        return hmac.new(decoy_key, message, hashlib.sha512).digest()[:size]

    return ScramCredential(
        mechanism, derive(b"salt")[:SALT_BYTES], ITERATIONS_DEFAULT, derive(b"sk"), derive(b"svk")
    )


Lookup = Callable[[str, Mechanism], ScramCredential | None]
"""Finds a user's credential for a mechanism (None: no such user or mechanism)."""


@dataclass(frozen=True, slots=True)
class Challenge:
    """Send `message` to the client and feed its answer to `receive`."""

    message: bytes


@dataclass(frozen=True, slots=True)
class Authenticated:
    """The client proved it is `user`; send `message` (the server's signature,
    which lets the client check the server knew its credential)."""

    user: str
    principal: str
    message: bytes


@dataclass(frozen=True, slots=True)
class Refused:
    """The exchange failed. `failure` and `detail` are for the server's log;
    the client is told `reason` (or sent `message`, a SCRAM `e=` answer, where
    the door carries SCRAM's own last message), the same for an unknown user
    as for a wrong password."""

    failure: AuthFailure
    detail: str
    message: bytes
    reason: str


Step = Challenge | Authenticated | Refused

_FAILURES: Final = {
    "invalid-proof": AuthFailure.INVALID_PROOF,
    "unknown-user": AuthFailure.UNKNOWN_USER,
    "channel-binding-not-supported": AuthFailure.CHANNEL_BINDING,
    "unsupported-channel-binding-type": AuthFailure.CHANNEL_BINDING,
    "channel-bindings-dont-match": AuthFailure.CHANNEL_BINDING,
}

_SERVER_ERRORS: Final = {
    # An unknown user fails as a wrong password does: the same e= answer.
    AuthFailure.UNKNOWN_USER: "invalid-proof",
    AuthFailure.INVALID_PROOF: "invalid-proof",
    AuthFailure.CHANNEL_BINDING: "channel-binding-not-supported",
}
"""RFC 5802's server-error values for the `e=` answer (others: other-error)."""
_REASONS: Final = {
    AuthFailure.UNKNOWN_USER: "invalid user name or password",
    AuthFailure.INVALID_PROOF: "invalid user name or password",
    AuthFailure.MALFORMED: "not a valid SCRAM message at this point of the exchange",
    AuthFailure.TOO_LARGE: f"a SCRAM message over {MESSAGE_BYTES_MAX} bytes",
    AuthFailure.CHANNEL_BINDING: "channel binding (SCRAM-*-PLUS) is not offered",
    AuthFailure.FINISHED: "the exchange has ended",
}
"""What the client is told (an unknown user and a wrong password alike)."""


class ScramServer:
    """One server-side SCRAM exchange for `mechanism`: feed it the client's
    messages in order; each returns the `Step` to take."""

    def __init__(
        self,
        mechanism: Mechanism,
        lookup: Lookup,
        *,
        decoy_key: bytes,
        nonce: str | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._decoy_key = decoy_key
        self._scramp = _scramp()
        self._server = self._scramp.ScramMechanism(mechanism.value).make_server(
            self._credential_of, s_nonce=nonce or secrets.token_urlsafe(24)
        )
        self._user: str | None = None
        self._decoy = False
        self._messages = 0
        self.outcome: Authenticated | Refused | None = None
        """The last step, once the exchange has ended."""

    def _credential_of(self, name: str) -> tuple[bytes, bytes, bytes, int]:
        self._user = name
        credential = self._lookup(name, self.mechanism)
        if credential is None:
            self._decoy = True
            credential = decoy_credential(self.mechanism, name, self._decoy_key)
        return (
            credential.salt,
            credential.stored_key,
            credential.server_key,
            credential.iterations,
        )

    def receive(self, message: bytes) -> Step:
        """The step that answers the client's next message."""
        if self.outcome is not None:  # refused, and `outcome` stays what it was
            return self._refusal(AuthFailure.FINISHED, "a message after the exchange ended")
        self._messages += 1
        if len(message) > MESSAGE_BYTES_MAX:
            return self._refuse(
                AuthFailure.TOO_LARGE, f"a {len(message)} B message (at most {MESSAGE_BYTES_MAX})"
            )
        try:
            text = message.decode("utf-8")
            if self._messages == 1:
                self._server.set_client_first(text)
                return Challenge(self._server.get_server_first().encode())
            self._server.set_client_final(text)
        except self._scramp.ScramException as exc:
            error = getattr(exc.server_error, "value", exc.server_error)
            failure = _FAILURES.get(error, AuthFailure.MALFORMED)
            if self._decoy and failure is AuthFailure.INVALID_PROOF:
                failure = AuthFailure.UNKNOWN_USER
            return self._refuse(failure, str(exc))
        except (UnicodeError, ValueError, TypeError) as exc:
            return self._refuse(AuthFailure.MALFORMED, f"{type(exc).__name__}: {exc}")
        if self._user is None:  # scramp asked for no credential: not a real exchange
            return self._refuse(AuthFailure.MALFORMED, "no user was named")
        if self._decoy:  # unreachable unless HMAC breaks: a decoy's keys match no password
            return self._refuse(AuthFailure.UNKNOWN_USER, "a decoy credential matched")
        try:
            principal = user_principal(self._user)
        except PrincipalError as exc:
            return self._refuse(AuthFailure.UNKNOWN_USER, str(exc))
        self.outcome = Authenticated(
            self._user, principal, self._server.get_server_final().encode()
        )
        return self.outcome

    def _refuse(self, failure: AuthFailure, detail: str) -> Refused:
        """End the exchange with a refusal."""
        self.outcome = self._refusal(failure, detail)
        return self.outcome

    def _refusal(self, failure: AuthFailure, detail: str) -> Refused:
        user = "" if self._user is None else f" (user {self._user[:64]!r})"
        return Refused(
            failure,
            detail + user,
            f"e={_SERVER_ERRORS.get(failure, 'other-error')}".encode(),
            f"authentication failed: {_REASONS[failure]}",
        )


class ScramClient:
    """laminar's client side of one exchange: `first()`, then `final(server_first)`,
    then `verify(server_final)`; any failure raises `AuthenticationError`."""

    def __init__(
        self, mechanism: Mechanism, user: str, password: str, *, nonce: str | None = None
    ) -> None:
        self._scramp = _scramp()
        try:
            self._client = self._scramp.ScramClient(
                [mechanism.value], user, password, c_nonce=nonce
            )
        except self._scramp.ScramException as exc:
            raise AuthenticationError(f"cannot log in as {user[:64]!r}: {exc}") from None

    def first(self) -> bytes:
        return str(self._client.get_client_first()).encode()

    def final(self, server_first: bytes) -> bytes:
        """The client-final message answering `server_first`."""
        try:
            self._client.set_server_first(_text(server_first))
            iterations = int(self._client.iterations)
            if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
                raise AuthenticationError(
                    f"the server asks for {iterations} iterations "
                    f"(accepted: {ITERATIONS_MIN}-{ITERATIONS_MAX})"
                )
            return str(self._client.get_client_final()).encode()
        except self._scramp.ScramException as exc:
            raise AuthenticationError(f"authentication failed: {exc}") from None

    def verify(self, server_final: bytes) -> None:
        """Check the server's signature (it proves the server holds our credential)."""
        try:
            self._client.set_server_final(_text(server_final))
        except self._scramp.ScramException as exc:
            raise AuthenticationError(f"authentication failed: {exc}") from None


def _text(message: bytes) -> str:
    if len(message) > MESSAGE_BYTES_MAX:
        raise AuthenticationError(f"the server sent a {len(message)} B SCRAM message")
    try:
        return message.decode("utf-8")
    except UnicodeError:
        raise AuthenticationError("the server sent a SCRAM message that is not UTF-8") from None
