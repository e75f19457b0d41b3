"""A Kafka client's login (SaslHandshake v1, SaslAuthenticate v0-2), sans I/O.

Kafka's order on a SASL listener (KIP-43, KIP-152), which this follows:

- Before the login succeeds a client may send ApiVersions, then one
  SaslHandshake naming its mechanism, then SaslAuthenticate requests that
  carry the mechanism's own messages (for SCRAM: client-first, then
  client-final; `laminar.security.scram.ScramServer` answers them). Any other
  request is a protocol violation: the broker closes the connection without
  an answer (`KafkaDoor` holds that gate), as Kafka's SaslServerAuthenticator does, so nothing
  a client sends before its login is ever applied.
- SaslHandshake v0 is not served: after a v0 handshake Kafka expects raw,
  unframed SASL tokens, which no client here needs (kafka-python and
  librdkafka send v1 when the broker advertises it). `codec` advertises v1.
- A mechanism other than SCRAM-SHA-256/512 answers UNSUPPORTED_SASL_MECHANISM
  with the list of mechanisms; a handshake out of turn or a SaslAuthenticate
  before a handshake answers ILLEGAL_SASL_STATE. Both end the login.
- A failed exchange answers SASL_AUTHENTICATION_FAILED with the reason a
  client may be told (the same for an unknown user as for a wrong password),
  and ends the login: the shell counts it, logs it at a bounded rate, delays
  the answer and closes the connection after it.
- Success answers the server-final message (the client checks it) with
  `session_lifetime_ms` 0: no re-authentication is asked for (KIP-368).
  After it, SaslHandshake and SaslAuthenticate answer ILLEGAL_SASL_STATE as
  on a listener without SASL (`KafkaDoor` does that).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

from laminar.kafka import messages as m
from laminar.kafka.errors import ErrorCode
from laminar.security.scram import (
    Authenticated,
    Challenge,
    Lookup,
    Mechanism,
    Refused,
    ScramServer,
)

MECHANISMS: Final = [mechanism.value for mechanism in Mechanism]
"""What SaslHandshake answers: the mechanisms served, in Kafka's spelling."""


class LoginState(Enum):
    HANDSHAKE = "handshake"
    """Waiting for SaslHandshake."""
    EXCHANGE = "exchange"
    """Mechanism chosen: SaslAuthenticate requests carry its messages."""
    DONE = "done"
    """Logged in: `KafkaLogin.principal` says who."""
    ENDED = "ended"
    """Refused: the connection closes after the answer."""


@dataclass(frozen=True, slots=True)
class LoginAnswer:
    """What to send for one login request, and what it did."""

    body: m.SaslHandshakeResponse | m.SaslAuthenticateResponse
    refusal: Refused | None = None
    """Set when the exchange failed on the client's credentials: count it, log
    it, slow the answer, then close (`ended` is then True)."""
    ended: bool = False
    """Close the connection once `body` is sent."""


class KafkaLogin:
    """One connection's login (see the module docstring)."""

    def __init__(self, lookup: Lookup, decoy_key: bytes, *, nonce: str | None = None) -> None:
        self._lookup = lookup
        self._decoy_key = decoy_key
        self._nonce = nonce
        self._server: ScramServer | None = None
        self.state = LoginState.HANDSHAKE
        self.principal: str | None = None

    @property
    def done(self) -> bool:
        return self.state is LoginState.DONE

    def handshake(self, request: m.SaslHandshakeRequest) -> LoginAnswer:
        if self.state is not LoginState.HANDSHAKE:
            return self._end(m.SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE))
        try:
            mechanism = Mechanism(request.mechanism)
        except ValueError:
            return self._end(
                m.SaslHandshakeResponse(
                    error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=MECHANISMS
                )
            )
        self._server = ScramServer(
            mechanism, self._lookup, decoy_key=self._decoy_key, nonce=self._nonce
        )
        self.state = LoginState.EXCHANGE
        return LoginAnswer(m.SaslHandshakeResponse(mechanisms=MECHANISMS))

    def authenticate(self, request: m.SaslAuthenticateRequest) -> LoginAnswer:
        server = self._server
        if self.state is not LoginState.EXCHANGE or server is None:
            return self._end(
                m.SaslAuthenticateResponse(
                    error_code=ErrorCode.ILLEGAL_SASL_STATE,
                    error_message="SaslAuthenticate without a SaslHandshake before it",
                )
            )
        step = server.receive(bytes(request.auth_bytes))
        if isinstance(step, Challenge):
            return LoginAnswer(
                m.SaslAuthenticateResponse(error_message=None, auth_bytes=step.message)
            )
        if isinstance(step, Authenticated):
            self.state = LoginState.DONE
            self.principal = step.principal
            return LoginAnswer(
                m.SaslAuthenticateResponse(error_message=None, auth_bytes=step.message)
            )
        self.state = LoginState.ENDED
        return LoginAnswer(
            m.SaslAuthenticateResponse(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=step.reason
            ),
            refusal=step,
            ended=True,
        )

    def _end(self, body: m.SaslHandshakeResponse | m.SaslAuthenticateResponse) -> LoginAnswer:
        self.state = LoginState.ENDED
        return LoginAnswer(body, ended=True)
