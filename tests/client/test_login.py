"""The client's login core against the node's (`laminar.client.login`,
`laminar.security.login`), frames and all, with no I/O: both mechanisms log
in; a refusal, an answer out of step or a server that cannot sign raise
`AuthenticationFailedError`; half the credentials are a usage error."""

from __future__ import annotations

import pytest

from laminar.client import AuthenticationFailedError
from laminar.client.login import ClientLogin, Credentials, login_options
from laminar.security.frames import AuthenticateRequest, AuthenticateResponse
from laminar.security.login import Login
from laminar.security.scram import Authenticated, Mechanism, Refused
from laminar.wire import ErrorCode, ErrorResponse, Frame
from tests.security.test_login import FALLBACK_KEY, PASSWORD, SECURITY


def node_answer(login: Login, request: AuthenticateRequest, corr: int) -> Frame:
    """What the node's door answers `request` (as `Connection._login_step` does)."""
    step = login.step(request.mechanism, request.message)
    if isinstance(step, Refused):
        return ErrorResponse(request.OP, ErrorCode.AUTHENTICATION_FAILED, step.reason).to_frame(
            corr
        )
    return AuthenticateResponse(step.message, isinstance(step, Authenticated)).to_frame(corr)


def run(credentials: Credentials, login: Login) -> None:
    client = ClientLogin(credentials)
    request: AuthenticateRequest | None = client.first()
    corr = 0
    while request is not None:
        corr += 1
        request = client.answer(node_answer(login, request, corr))


@pytest.mark.parametrize("mechanism", list(Mechanism))
def test_both_mechanisms_log_in(mechanism: Mechanism) -> None:
    login = Login(SECURITY, FALLBACK_KEY)
    run(Credentials("alice", PASSWORD, mechanism), login)
    assert login.principal == "User:alice"


def test_a_refusal_raises_with_the_reason() -> None:
    with pytest.raises(AuthenticationFailedError, match="invalid user name or password"):
        run(Credentials("alice", "wrong"), Login(SECURITY, FALLBACK_KEY))


def test_an_answer_out_of_step_or_unsigned_is_refused() -> None:
    client = ClientLogin(Credentials("alice", PASSWORD))
    client.first()
    with pytest.raises(AuthenticationFailedError, match="out of step"):
        client.answer(AuthenticateResponse(b"v=abc", done=True).to_frame(1))
    login = Login(SECURITY, FALLBACK_KEY)
    client = ClientLogin(Credentials("alice", PASSWORD))
    first = client.first()
    final = client.answer(node_answer(login, first, 1))
    assert final is not None
    login.step(final.mechanism, final.message)  # the node logs us in...
    forged = AuthenticateResponse(b"v=" + b"A" * 44, done=True).to_frame(2)  # ...but signs wrongly
    with pytest.raises(AuthenticationFailedError):
        client.answer(forged)


def test_credentials_are_both_or_neither() -> None:
    assert Credentials.of(None, None, "SCRAM-SHA-256") is None
    with pytest.raises(ValueError, match="both"):
        Credentials.of("alice", None, "SCRAM-SHA-256")
    with pytest.raises(ValueError, match="mechanism"):
        Credentials.of("alice", "pw", "PLAIN")
    credentials = Credentials.of("alice", "pw", "SCRAM-SHA-512")
    assert login_options(credentials) == {
        "username": "alice",
        "password": "pw",
        "mechanism": "SCRAM-SHA-512",
    }
    assert "pw" not in repr(credentials)
