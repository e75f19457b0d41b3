"""The client's side of a connection's login, with no I/O.

A client given `username=` and `password=` logs every connection it opens
(bootstrap, each shard; after TLS) in before its first request: one SCRAM
exchange over AUTHENTICATE (`laminar.security.frames`), four messages. Both
clients drive the same `ClientLogin`: `first()`, then `answer(frame)` for
each answer until it returns None. A refusal raises
`AuthenticationFailedError` with the node's reason; the connection is then
closed by the node and the client never retries it with the same
credentials (the error is not retriable). A server whose signature does not
check out (it does not hold our credential) fails the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from laminar.client.errors import AuthenticationFailedError
from laminar.client.results import expect
from laminar.security.errors import AuthenticationError
from laminar.security.frames import AuthenticateRequest, AuthenticateResponse
from laminar.security.scram import Mechanism, ScramClient
from laminar.wire import Frame


@dataclass(frozen=True, slots=True)
class Credentials:
    """Who a client logs in as."""

    username: str
    password: str = field(repr=False)
    mechanism: Mechanism = Mechanism.SCRAM_SHA_256

    @classmethod
    def of(
        cls, username: str | None, password: str | None, mechanism: str | Mechanism
    ) -> Credentials | None:
        """The client's credentials from its arguments (None: it does not log
        in); ValueError for half of them or an unknown mechanism."""
        if username is None and password is None:
            return None
        if not username or not password:
            raise ValueError("give both username= and password= (or neither)")
        try:
            return cls(username, password, Mechanism(mechanism))
        except ValueError:
            offered = ", ".join(m.value for m in Mechanism)
            raise ValueError(f"mechanism must be one of {offered}, not {mechanism!r}") from None


class LoginOptions(TypedDict, total=False):
    """A client's login keyword arguments."""

    username: str
    password: str
    mechanism: str


def login_options(credentials: Credentials | None) -> LoginOptions:
    """`credentials` as a client's keyword arguments (another client that logs
    in as the same user; none without credentials)."""
    if credentials is None:
        return {}
    return {
        "username": credentials.username,
        "password": credentials.password,
        "mechanism": credentials.mechanism.value,
    }


class ClientLogin:
    """One connection's login exchange (see the module docstring)."""

    __slots__ = ("_client", "_credentials", "_sent")

    def __init__(self, credentials: Credentials, *, nonce: str | None = None) -> None:
        self._credentials = credentials
        try:
            self._client = ScramClient(
                credentials.mechanism, credentials.username, credentials.password, nonce=nonce
            )
        except AuthenticationError as exc:
            raise AuthenticationFailedError(str(exc)) from None
        self._sent = 0

    def first(self) -> AuthenticateRequest:
        self._sent = 1
        return self._request(self._client.first())

    def answer(self, frame: Frame) -> AuthenticateRequest | None:
        """The next message to send for the node's answer `frame`; None once
        logged in. Raises `AuthenticationFailedError` (or the node's other
        error) when the login failed."""
        response = expect(frame, AuthenticateResponse)
        try:
            if self._sent == 1 and not response.done:
                self._sent = 2
                return self._request(self._client.final(response.message))
            if self._sent == 2 and response.done:
                self._client.verify(response.message)
                return None
        except AuthenticationError as exc:
            raise AuthenticationFailedError(str(exc)) from None
        raise AuthenticationFailedError(
            "authentication failed: the node's answer is out of step with the login exchange"
        )

    def _request(self, message: bytes) -> AuthenticateRequest:
        return AuthenticateRequest(self._credentials.mechanism.value, message)
