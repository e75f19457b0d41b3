"""The Kafka login's order and answers (`laminar.kafka.sasl`), sans I/O."""

from __future__ import annotations

import pytest

from laminar.kafka import messages as m
from laminar.kafka.errors import ErrorCode
from laminar.kafka.sasl import MECHANISMS, KafkaLogin, LoginState
from laminar.security.errors import AuthFailure
from laminar.security.scram import Mechanism, ScramClient, ScramCredential, make_credential

DECOY = bytes(32)
USERS = {
    ("alice", mechanism): make_credential(mechanism, "alice-pw", iterations=4096)
    for mechanism in Mechanism
}


def lookup(name: str, mechanism: Mechanism) -> ScramCredential | None:
    return USERS.get((name, mechanism))


def exchange(login: KafkaLogin, client: ScramClient) -> m.SaslAuthenticateResponse:
    first = login.authenticate(m.SaslAuthenticateRequest(auth_bytes=client.first())).body
    assert isinstance(first, m.SaslAuthenticateResponse)
    if first.error_code:
        return first
    final = login.authenticate(
        m.SaslAuthenticateRequest(auth_bytes=client.final(first.auth_bytes))
    ).body
    assert isinstance(final, m.SaslAuthenticateResponse)
    return final


@pytest.mark.parametrize("mechanism", list(Mechanism))
def test_a_login_names_the_principal_and_proves_the_server(mechanism: Mechanism) -> None:
    login = KafkaLogin(lookup, DECOY)
    shake = login.handshake(m.SaslHandshakeRequest(mechanism=mechanism.value))
    assert shake.body == m.SaslHandshakeResponse(mechanisms=MECHANISMS)
    client = ScramClient(mechanism, "alice", "alice-pw")
    final = exchange(login, client)
    assert final.error_code == 0
    client.verify(final.auth_bytes)  # the server knew alice's keys
    assert login.done and login.principal == "User:alice"


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "alice-pw")])
def test_a_wrong_password_and_an_unknown_user_fail_alike(user: str, password: str) -> None:
    login = KafkaLogin(lookup, DECOY)
    login.handshake(m.SaslHandshakeRequest(mechanism=Mechanism.SCRAM_SHA_256.value))
    client = ScramClient(Mechanism.SCRAM_SHA_256, user, password)
    first = login.authenticate(m.SaslAuthenticateRequest(auth_bytes=client.first()))
    step = login.authenticate(
        m.SaslAuthenticateRequest(auth_bytes=client.final(first.body.auth_bytes))  # type: ignore[union-attr]
    )
    assert step.ended and step.refusal is not None
    assert step.body == m.SaslAuthenticateResponse(
        error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
        error_message="authentication failed: invalid user name or password",
    )
    expected = AuthFailure.INVALID_PROOF if user == "alice" else AuthFailure.UNKNOWN_USER
    assert step.refusal.failure is expected
    assert not login.done and login.principal is None


def test_out_of_order_requests_end_the_login() -> None:
    login = KafkaLogin(lookup, DECOY)
    early = login.authenticate(m.SaslAuthenticateRequest(auth_bytes=b"n,,n=alice,r=x"))
    assert early.ended and early.body.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert login.state is LoginState.ENDED
    twice = KafkaLogin(lookup, DECOY)
    twice.handshake(m.SaslHandshakeRequest(mechanism=Mechanism.SCRAM_SHA_256.value))
    again = twice.handshake(m.SaslHandshakeRequest(mechanism=Mechanism.SCRAM_SHA_256.value))
    assert again.ended and again.body.error_code == ErrorCode.ILLEGAL_SASL_STATE


def test_an_unknown_mechanism_is_answered_with_the_list() -> None:
    step = KafkaLogin(lookup, DECOY).handshake(m.SaslHandshakeRequest(mechanism="PLAIN"))
    assert step.ended
    assert step.body == m.SaslHandshakeResponse(
        error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=MECHANISMS
    )


def test_a_replayed_client_final_from_another_exchange_fails() -> None:
    recorded = KafkaLogin(lookup, DECOY, nonce="server-nonce-one")
    recorded.handshake(m.SaslHandshakeRequest(mechanism=Mechanism.SCRAM_SHA_256.value))
    client = ScramClient(Mechanism.SCRAM_SHA_256, "alice", "alice-pw", nonce="client-nonce")
    client_first = client.first()
    first = recorded.authenticate(m.SaslAuthenticateRequest(auth_bytes=client_first))
    final = client.final(first.body.auth_bytes)  # type: ignore[union-attr]
    replay = KafkaLogin(lookup, DECOY, nonce="server-nonce-two")
    replay.handshake(m.SaslHandshakeRequest(mechanism=Mechanism.SCRAM_SHA_256.value))
    replay.authenticate(m.SaslAuthenticateRequest(auth_bytes=client_first))
    step = replay.authenticate(m.SaslAuthenticateRequest(auth_bytes=final))
    assert step.ended and step.body.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert not replay.done
