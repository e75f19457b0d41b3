"""The Kafka login's order and answers (`laminar.kafka.sasl`), sans I/O."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar.kafka import messages as m
from laminar.kafka.errors import ErrorCode
from laminar.kafka.sasl import MECHANISMS, KafkaSasl, SaslReply
from laminar.security.errors import AuthFailure
from laminar.security.login import Login
from laminar.security.scram import Mechanism, ScramClient, make_credential
from laminar.security.state import SecurityState

DECOY = bytes(32)


@pytest.fixture(scope="module")
def security() -> SecurityState:
    state = SecurityState()
    credentials = tuple(make_credential(m, "alice-pw", iterations=4096) for m in Mechanism)
    state.apply(state.users.plan_create("alice", credentials))
    return state


def sasl(security: SecurityState, nonce: str | None = None) -> KafkaSasl:
    return KafkaSasl(Login(security, DECOY, nonce=nonce))


def authenticate(sasl: KafkaSasl, message: bytes) -> SaslReply:
    return sasl.step(m.SaslAuthenticateRequest(auth_bytes=message))


def handshake(sasl: KafkaSasl, mechanism: str = Mechanism.SCRAM_SHA_256.value) -> SaslReply:
    return sasl.step(m.SaslHandshakeRequest(mechanism=mechanism))


def final_reply(sasl: KafkaSasl, client: ScramClient) -> SaslReply:
    first = authenticate(sasl, client.first())
    assert first.refused is None and isinstance(first.body, m.SaslAuthenticateResponse)
    return authenticate(sasl, client.final(first.body.auth_bytes))


@pytest.mark.parametrize("mechanism", list(Mechanism))
def test_a_login_names_the_principal_and_proves_the_server(
    security: SecurityState, mechanism: Mechanism
) -> None:
    door = sasl(security)
    assert handshake(door, mechanism.value) == SaslReply(
        m.SaslHandshakeResponse(mechanisms=MECHANISMS)
    )
    client = ScramClient(mechanism, "alice", "alice-pw")
    final = final_reply(door, client)
    assert final.refused is None and isinstance(final.body, m.SaslAuthenticateResponse)
    assert final.body.error_code == 0
    client.verify(final.body.auth_bytes)  # the server knew alice's keys
    assert door.login.principal == "User:alice"


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "alice-pw")])
def test_a_wrong_password_and_an_unknown_user_fail_alike(
    security: SecurityState, user: str, password: str
) -> None:
    door = sasl(security)
    handshake(door)
    final = final_reply(door, ScramClient(Mechanism.SCRAM_SHA_256, user, password))
    assert final.body == m.SaslAuthenticateResponse(
        error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
        error_message="authentication failed: invalid user name or password",
    )
    expected = AuthFailure.INVALID_PROOF if user == "alice" else AuthFailure.UNKNOWN_USER
    assert final.refused is not None and final.refused.failure is expected
    assert not door.login.done


def test_api_versions_is_served_and_any_other_request_refused_unanswered(
    security: SecurityState,
) -> None:
    door = sasl(security)
    assert door.step(m.ApiVersionsRequest()) == SaslReply(None)
    refused = door.step(m.MetadataRequest(topics=None))
    assert refused.body is None and refused.refused is not None
    assert refused.refused.failure is AuthFailure.NOT_LOGGED_IN


def test_out_of_order_requests_end_the_login(security: SecurityState) -> None:
    early = authenticate(sasl(security), b"n,,n=alice,r=x")
    assert early.refused is not None
    assert isinstance(early.body, m.SaslAuthenticateResponse)
    assert early.body.error_code == ErrorCode.ILLEGAL_SASL_STATE
    twice = sasl(security)
    handshake(twice)
    again = handshake(twice)
    assert again.refused is not None
    assert again.body == m.SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE)


def test_an_unknown_mechanism_is_answered_with_the_list(security: SecurityState) -> None:
    reply = handshake(sasl(security), "PLAIN")
    assert reply.refused is not None
    assert reply.body == m.SaslHandshakeResponse(
        error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=MECHANISMS
    )


def test_a_replayed_client_final_from_another_exchange_fails(security: SecurityState) -> None:
    recorded = sasl(security, nonce="server-nonce-one")
    handshake(recorded)
    client = ScramClient(Mechanism.SCRAM_SHA_256, "alice", "alice-pw", nonce="client-nonce")
    client_first = client.first()
    first = authenticate(recorded, client_first)
    assert isinstance(first.body, m.SaslAuthenticateResponse)
    final = client.final(first.body.auth_bytes)
    replay = sasl(security, nonce="server-nonce-two")
    handshake(replay)
    authenticate(replay, client_first)
    reply = authenticate(replay, final)
    assert reply.refused is not None and not replay.login.done


_REQUESTS = st.one_of(
    st.builds(m.ApiVersionsRequest),
    st.builds(
        m.SaslHandshakeRequest,
        mechanism=st.sampled_from([*MECHANISMS, "PLAIN", "", "SCRAM-SHA-1"]),
    ),
    st.builds(m.SaslAuthenticateRequest, auth_bytes=st.binary(max_size=2048)),
    st.builds(
        m.SaslAuthenticateRequest,
        auth_bytes=st.sampled_from(
            [b"n,,n=alice,r=abc", b"n,,n=mallory,r=abc", b"c=biws,r=abc,p=AAAA", b"n,,n=,r="]
        ),
    ),
    st.builds(m.MetadataRequest),
)


@settings(max_examples=300, deadline=None)
@given(requests=st.lists(_REQUESTS, max_size=8))
def test_no_sequence_of_requests_without_the_password_logs_in(
    security: SecurityState, requests: list[object]
) -> None:
    """Fuzzed like the frame decoder: whatever comes in, in whatever order,
    the answers are well formed, nothing raises, and no one logs in; after a
    refusal every later request is refused too."""
    door = sasl(security)
    refused = False
    for request in requests:
        reply = door.step(request)
        assert not door.login.done
        if refused:
            assert reply.refused is not None
        refused = refused or reply.refused is not None
        if reply.body is not None:
            m.encode(reply.body, 1, bytearray())
