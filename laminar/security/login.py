"""One client connection's login, with no I/O: who it is, once it has shown it.

A connection to a node with `--auth scram` serves nothing until it has
logged in, in one of two ways:

- A client certificate the node's `--tls-ca-file` verified (mutual TLS):
  the handshake itself is the proof, and the certificate names the
  principal (`principal.principal_from_certificate`: `User:<CN>`). A
  certificate that does not verify never gets this far (the handshake
  fails); one that verifies but names nobody (no CN, or several) is refused.
  A node's certificate (it names a node: `laminar-node:<id>`) is no user's:
  it logs nobody in (the peer it belongs to opens a Raft link, PEER_HELLO,
  which the replication authenticates).
- One SCRAM exchange (`scram.ScramServer`), fed the client's messages in
  order by `step(mechanism, message)`. The first message picks the
  mechanism; every later one must name the same.

Rules, and why:

- One exchange per connection, and one try: a refusal ends the login for
  good (`refused`), and the door closes the connection after answering, so
  every guess at a password costs a new connection and the door's delay.
- Anything but a login message before the login succeeds is a refusal too
  (`not_logged_in`), and is never served: nothing a client sends before it
  has logged in is applied.
- The client is told `Refused.reason`, the same for an unknown user as for a
  wrong password; `Refused.failure` and `detail` are for the node's counters
  and log.
- Users and the decoy key are read from the replicated `SecurityState` when
  the exchange starts (every shard holds them: no lookup elsewhere).
- A SCRAM login lasts while its user does: once the user is deleted (on any
  node: the deletion replicates), the connection's next request is refused
  and the connection closed (`current`), where Kafka keeps such a connection
  until it re-authenticates. A password change leaves logged-in connections
  as they are (they proved the password that was right then), as Kafka does.
  A certificate login names no user record: it lasts as long as the
  connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from laminar.security.errors import AuthFailure
from laminar.security.principal import (
    PrincipalError,
    node_id_from_certificate,
    principal_from_certificate,
)
from laminar.security.scram import Authenticated, Mechanism, Refused, ScramServer, Step
from laminar.security.state import SecurityState

MECHANISMS: Final = ", ".join(m.value for m in Mechanism)


class Login:
    """One connection's login (see the module docstring)."""

    __slots__ = (
        "_fallback_key",
        "_mechanism",
        "_nonce",
        "_removals",
        "_security",
        "_server",
        "_user",
        "principal",
        "refused",
    )

    def __init__(
        self, security: SecurityState, fallback_decoy_key: bytes, *, nonce: str | None = None
    ) -> None:
        self._security = security
        self._fallback_key = fallback_decoy_key
        """The decoy key while the cluster has none (no users yet)."""
        self._nonce = nonce
        self._mechanism: Mechanism | None = None
        self._server: ScramServer | None = None
        self.principal: str | None = None
        """Who the connection is, once logged in."""
        self.refused: Refused | None = None
        """Why the login failed, once it has (for good)."""
        self._user: str | None = None
        """The SCRAM user logged in as (None: not, or by certificate)."""
        self._removals = 0

    @property
    def done(self) -> bool:
        """Whether the connection has logged in."""
        return self.principal is not None

    @property
    def current(self) -> bool:
        """Logged in, and a SCRAM login's user not deleted since: what a door
        asks before each request. An int compared, until a user is deleted
        anywhere; a login whose user is gone ends (`refused` says why)."""
        if self.principal is None:
            return False
        users = self._security.users
        if self._user is None or users.removals == self._removals:
            return True
        self._removals = users.removals
        if self._user in users:
            return True
        self.principal = None
        self.refused = Refused(
            AuthFailure.USER_DELETED,
            f"user {self._user} was deleted after logging in",
            b"e=other-error",
            f"authentication failed: user {self._user} was deleted; this connection "
            "serves no more requests",
        )
        return False

    def by_certificate(self, certificate: Mapping[str, Any] | None) -> Refused | None:
        """Log in with the verified client certificate the TLS handshake gave
        (None: the client showed none and must log in with SCRAM); a refusal
        for a certificate that names nobody."""
        if certificate is None:
            return None
        try:
            if node_id_from_certificate(certificate) is not None:
                return None  # a node's, for a peer link (PEER_HELLO): no user's
            self.principal = principal_from_certificate(certificate.get("subject", ()))
        except PrincipalError as exc:
            return self._refuse(
                AuthFailure.UNKNOWN_USER,
                str(exc),
                "authentication failed: the client certificate names no user (one CN)",
            )
        return None

    def step(self, mechanism: str, message: bytes) -> Step:
        """The answer to one client message of the SCRAM exchange."""
        if self.refused is not None or self.principal is not None:
            return self._refuse(
                AuthFailure.FINISHED,
                "a login message after the login ended",
                "authentication failed: one login per connection",
            )
        if self._server is None:
            try:
                self._mechanism = Mechanism(mechanism)
            except ValueError:
                return self._refuse(
                    AuthFailure.MALFORMED,
                    f"unknown mechanism {mechanism[:40]!r}",
                    f"authentication failed: the mechanisms offered are {MECHANISMS}",
                )
            security = self._security
            self._server = ScramServer(
                self._mechanism,
                security.users.credential,
                decoy_key=security.decoy_key_or(self._fallback_key),
                nonce=self._nonce,
            )
        elif mechanism != self._server.mechanism.value:
            return self._refuse(
                AuthFailure.MALFORMED,
                f"mechanism {mechanism[:40]!r} in the middle of a "
                f"{self._server.mechanism.value} exchange",
                "authentication failed: the mechanism changed during the exchange",
            )
        answer = self._server.receive(message)
        if isinstance(answer, Authenticated):
            self.principal = answer.principal
            self._user = answer.user
            self._removals = self._security.users.removals
        elif isinstance(answer, Refused):
            self.refused = answer
        return answer

    def not_logged_in(self) -> Refused:
        """The refusal of a request sent before the login succeeded."""
        return self._refuse(
            AuthFailure.NOT_LOGGED_IN,
            "a request before logging in",
            "authentication failed: log in first (this node requires --auth scram logins)",
        )

    def malformed(self, detail: str) -> Refused:
        """The refusal of a login message the door could not read."""
        return self._refuse(
            AuthFailure.MALFORMED, detail, "authentication failed: not a valid login message"
        )

    def _refuse(self, failure: AuthFailure, detail: str, reason: str) -> Refused:
        refused = Refused(failure, detail, b"e=other-error", reason)
        if self.refused is None and self.principal is None:
            self.refused = refused
        return refused
