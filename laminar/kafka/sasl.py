"""A Kafka client's login (SaslHandshake v1, SaslAuthenticate v0-2), sans I/O.

The login itself is `laminar.security.login.Login`, the same for both doors
(one SCRAM exchange, one try, the reasons a client may be told); this module
carries it in Kafka's requests, in Kafka's order (KIP-43, KIP-152):

- Before the login succeeds a client may send ApiVersions (served as usual),
  then one SaslHandshake naming its mechanism, then SaslAuthenticate requests
  carrying the mechanism's own messages (for SCRAM: client-first, then
  client-final). Any other request is a protocol violation: the broker closes
  the connection without an answer, as Kafka's SaslServerAuthenticator does,
  so nothing a client sends before its login is ever applied.
- SaslHandshake v0 is not served: after a v0 handshake Kafka expects raw,
  unframed SASL tokens, which no client here needs (kafka-python and
  librdkafka send v1 when the broker advertises it; `codec` advertises v1).
- A mechanism other than SCRAM-SHA-256/512 answers UNSUPPORTED_SASL_MECHANISM
  with the list of mechanisms; a second handshake or a SaslAuthenticate before
  one answers ILLEGAL_SASL_STATE. Both end the login, as a failed exchange
  does: SASL_AUTHENTICATION_FAILED with the reason a client may be told (the
  same for an unknown user as for a wrong password). The connection then
  counts, logs, delays and closes (`laminar.shards.connection`).
- Success answers the server-final message (the client checks it) with
  `session_lifetime_ms` 0: no re-authentication is asked for (KIP-368).
  After it, SaslHandshake and SaslAuthenticate answer ILLEGAL_SASL_STATE as
  on a listener without SASL (`KafkaDoor` does that).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from laminar.kafka import messages as m
from laminar.kafka.errors import ErrorCode
from laminar.security.login import Login
from laminar.security.scram import Mechanism, Refused

MECHANISMS: Final = [mechanism.value for mechanism in Mechanism]
"""What SaslHandshake answers: the mechanisms served, in Kafka's spelling."""


@dataclass(frozen=True, slots=True)
class SaslReply:
    """What to do with one request before the login succeeded."""

    body: m.SaslHandshakeResponse | m.SaslAuthenticateResponse | None
    """The answer (None: serve the request as usual if `refused` is None, or
    close without an answer)."""
    refused: Refused | None = None
    """The login failed: answer after the delay, then close the connection."""


class KafkaSasl:
    """One connection's login, spoken in Kafka's requests (see the module docstring)."""

    def __init__(self, login: Login) -> None:
        self.login = login
        self._mechanism: str | None = None

    def step(self, body: object) -> SaslReply:
        """The reply to one decoded request body sent before the login succeeded."""
        if self.login.refused is not None:  # ended: the connection is closing
            return SaslReply(None, self.login.refused)
        if isinstance(body, m.ApiVersionsRequest):
            return SaslReply(None)
        if isinstance(body, m.SaslHandshakeRequest):
            return self._handshake(body)
        if isinstance(body, m.SaslAuthenticateRequest):
            return self._authenticate(body)
        return SaslReply(None, self.login.not_logged_in())

    def _handshake(self, request: m.SaslHandshakeRequest) -> SaslReply:
        if self._mechanism is not None:
            return SaslReply(
                m.SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE),
                self.login.malformed("a second SaslHandshake"),
            )
        if request.mechanism not in MECHANISMS:
            return SaslReply(
                m.SaslHandshakeResponse(
                    error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=MECHANISMS
                ),
                self.login.malformed(f"unknown mechanism {request.mechanism[:40]!r}"),
            )
        self._mechanism = request.mechanism
        return SaslReply(m.SaslHandshakeResponse(mechanisms=MECHANISMS))

    def _authenticate(self, request: m.SaslAuthenticateRequest) -> SaslReply:
        if self._mechanism is None:
            refused = self.login.malformed("SaslAuthenticate before SaslHandshake")
            return SaslReply(
                m.SaslAuthenticateResponse(
                    error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message=refused.reason
                ),
                refused,
            )
        step = self.login.step(self._mechanism, bytes(request.auth_bytes))
        if isinstance(step, Refused):
            return SaslReply(
                m.SaslAuthenticateResponse(
                    error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=step.reason
                ),
                step,
            )
        return SaslReply(m.SaslAuthenticateResponse(error_message=None, auth_bytes=step.message))
