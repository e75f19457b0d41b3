"""Errors of the security cores: why an authentication failed, and why a change
to users or ACLs was refused.

A failed authentication is an answer (`AuthFailure` in the exchange's last
step), never an exception: a client's bad message is the remote side's fault,
and the door must answer it and count it. Exceptions are for the local side:
`AuthenticationError` on the client when the server refused it or cannot be
trusted, and `SecurityRefusal` when a planned change is not allowed.
"""

from __future__ import annotations

from enum import Enum


class AuthFailure(Enum):
    """Why an authentication exchange failed (for the server's log and counters;
    the client is told less, see `laminar.security.scram`)."""

    MALFORMED = "malformed"
    """Not a SCRAM message, or one out of its place in the exchange."""
    TOO_LARGE = "too-large"
    """A message over `scram.MESSAGE_BYTES_MAX`."""
    UNKNOWN_USER = "unknown-user"
    """No such user, or none with credentials for this mechanism."""
    INVALID_PROOF = "invalid-proof"
    """The client's proof does not match the stored key: a wrong password."""
    CHANNEL_BINDING = "channel-binding"
    """The client asked for channel binding (SCRAM-*-PLUS), which is not offered."""
    FINISHED = "finished"
    """A message after the exchange ended."""
    NOT_LOGGED_IN = "not-logged-in"
    """A request other than a login before the connection logged in."""
    USER_DELETED = "user-deleted"
    """A request on a connection whose user was deleted after it logged in."""


class AuthenticationError(Exception):
    """The client side: the server refused us, or its answers cannot be trusted
    (a wrong signature, a nonce that is not ours, iterations out of bounds)."""


class Refusal(Enum):
    """Why a change to users or ACLs was refused."""

    INVALID = "invalid"
    """A malformed name, principal, resource or credential."""
    EXISTS = "exists"
    """A user by that name exists already."""
    UNKNOWN = "unknown"
    """No user by that name."""
    LIMIT = "limit"
    """Past a configured bound (users, ACLs, ACLs in one change)."""


class SecurityRefusal(Exception):
    """A change cannot be granted; `refusal` says why, the message says how to fix it."""

    def __init__(self, refusal: Refusal, message: str) -> None:
        super().__init__(message)
        self.refusal = refusal
        self.message = message
