"""SCRAM: RFC 7677's test vector as the oracle, interop with scramp's own
client, an independent computation of the stored keys, and hostile clients
(wrong proofs, unknown users, replays, truncated and oversized messages)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
import scramp
from hypothesis import given
from hypothesis import strategies as st

from laminar.security.errors import AuthenticationError, AuthFailure
from laminar.security.scram import (
    ITERATIONS_MAX,
    MESSAGE_BYTES_MAX,
    Authenticated,
    Challenge,
    Mechanism,
    Refused,
    ScramClient,
    ScramCredential,
    ScramServer,
    make_credential,
)

# RFC 7677 section 3: user "user", password "pencil".
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

DECOY_KEY = b"d" * 32
SHA256, SHA512 = Mechanism.SCRAM_SHA_256, Mechanism.SCRAM_SHA_512
MECHANISMS = [SHA256, SHA512]


def rfc_credential() -> ScramCredential:
    return make_credential(SHA256, "pencil", iterations=4096, salt=RFC_SALT)


def server_for(
    users: dict[str, ScramCredential], mechanism: Mechanism = SHA256, nonce: str | None = None
) -> ScramServer:
    def lookup(name: str, wanted: Mechanism) -> ScramCredential | None:
        found = users.get(name)
        return found if found is not None and found.mechanism is wanted else None

    return ScramServer(mechanism, lookup, decoy_key=DECOY_KEY, nonce=nonce)


def login(server: ScramServer, client: ScramClient) -> Authenticated | Refused:
    """Run a whole exchange; the client checks the server's signature on success."""
    first = server.receive(client.first())
    assert isinstance(first, Challenge)
    outcome = server.receive(client.final(first.message))
    assert isinstance(outcome, Authenticated | Refused)
    if isinstance(outcome, Authenticated):
        client.verify(outcome.message)
    return outcome


# -- the RFC 7677 vector -------------------------------------------------------


def test_server_answers_rfc7677_vector_exactly() -> None:
    server = server_for({"user": rfc_credential()}, nonce=RFC_SERVER_NONCE)
    assert server.receive(RFC_CLIENT_FIRST) == Challenge(RFC_SERVER_FIRST)
    outcome = server.receive(RFC_CLIENT_FINAL)
    assert outcome == Authenticated("user", "User:user", RFC_SERVER_FINAL)


def test_client_sends_rfc7677_vector_exactly() -> None:
    client = ScramClient(SHA256, "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert client.first() == RFC_CLIENT_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)


def test_client_rejects_a_server_signature_that_is_not_the_vectors() -> None:
    client = ScramClient(SHA256, "user", "pencil", nonce=RFC_CLIENT_NONCE)
    client.first()
    client.final(RFC_SERVER_FIRST)
    forged = b"v=" + base64.b64encode(bytes(32))
    with pytest.raises(AuthenticationError):
        client.verify(forged)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_stored_keys_match_an_independent_computation(mechanism: Mechanism) -> None:
    """RFC 5802 section 3, computed with hashlib alone."""
    name = "sha256" if mechanism is SHA256 else "sha512"
    salt = bytes(range(20))
    credential = make_credential(mechanism, "correct horse", iterations=4096, salt=salt)
    salted = hashlib.pbkdf2_hmac(name, b"correct horse", salt, 4096)
    client_key = hmac.new(salted, b"Client Key", name).digest()
    assert credential.stored_key == hashlib.new(name, client_key).digest()
    assert credential.server_key == hmac.new(salted, b"Server Key", name).digest()
    assert (credential.salt, credential.iterations) == (salt, 4096)


def test_credentials_are_salted_freshly_and_bounded() -> None:
    a, b = (make_credential(SHA256, "same") for _ in range(2))
    assert a.salt != b.salt and a.stored_key != b.stored_key
    for iterations in (4095, ITERATIONS_MAX + 1):
        with pytest.raises(ValueError):
            make_credential(SHA256, "pw", iterations=iterations)
    with pytest.raises(ValueError):
        make_credential(SHA256, "")


# -- interop and outcomes ---------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_scramps_own_client_logs_in(mechanism: Mechanism) -> None:
    server = server_for({"alice": make_credential(mechanism, "s3cret")}, mechanism)
    client = scramp.ScramClient([mechanism.value], "alice", "s3cret")
    first = server.receive(client.get_client_first().encode())
    assert isinstance(first, Challenge)
    client.set_server_first(first.message.decode())
    outcome = server.receive(client.get_client_final().encode())
    assert isinstance(outcome, Authenticated) and outcome.principal == "User:alice"
    client.set_server_final(outcome.message.decode())  # raises if the signature is wrong


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_pythons_sasl_mechanism_logs_in(mechanism: Mechanism) -> None:
    """The bytes a real Kafka client puts in SaslAuthenticate, unmodified."""
    kafka_scram = pytest.importorskip("kafka.net.sasl.scram")
    server = server_for({"alice": make_credential(mechanism, "s3cret")}, mechanism)
    client = kafka_scram.SaslMechanismScram(
        sasl_plain_username="alice",
        sasl_plain_password="s3cret",
        sasl_mechanism=mechanism.value,
        security_protocol="SASL_SSL",
    )
    first = server.receive(client.auth_bytes())
    assert isinstance(first, Challenge)
    client.receive(first.message)
    outcome = server.receive(client.auth_bytes())
    assert isinstance(outcome, Authenticated) and outcome.principal == "User:alice"
    assert client.receive(outcome.message) and client.is_authenticated()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_laminars_client_logs_in_and_a_wrong_password_does_not(mechanism: Mechanism) -> None:
    users = {"alice": make_credential(mechanism, "s3cret")}
    ok = login(server_for(users, mechanism), ScramClient(mechanism, "alice", "s3cret"))
    assert isinstance(ok, Authenticated) and ok.user == "alice"
    bad = login(server_for(users, mechanism), ScramClient(mechanism, "alice", "s3creT"))
    assert isinstance(bad, Refused) and bad.failure is AuthFailure.INVALID_PROOF
    assert bad.message == b"e=invalid-proof"


def test_a_credential_of_another_mechanism_does_not_log_in() -> None:
    users = {"alice": make_credential(SHA256, "s3cret")}
    outcome = login(server_for(users, SHA512), ScramClient(SHA512, "alice", "s3cret"))
    assert isinstance(outcome, Refused) and outcome.failure is AuthFailure.UNKNOWN_USER


def test_an_unknown_user_looks_like_a_wrong_password_to_the_client() -> None:
    users = {"alice": make_credential(SHA256, "s3cret")}
    unknown = login(server_for(users), ScramClient(SHA256, "mallory", "guess"))
    wrong = login(server_for(users), ScramClient(SHA256, "alice", "guess"))
    assert isinstance(unknown, Refused) and unknown.failure is AuthFailure.UNKNOWN_USER
    assert isinstance(wrong, Refused)
    assert (unknown.message, unknown.reason) == (wrong.message, wrong.reason)
    assert "mallory" in unknown.detail  # the server's log says who


def test_an_unknown_users_challenge_is_stable_and_shaped_like_a_real_one() -> None:
    def salt_and_iterations(name: str) -> tuple[bytes, bytes]:
        step = server_for({}).receive(f"n,,n={name},r=abc".encode())
        assert isinstance(step, Challenge)
        _, salt, iterations = step.message.split(b",")
        return salt, iterations

    real = server_for({"alice": make_credential(SHA256, "pw")}).receive(b"n,,n=alice,r=abc")
    assert isinstance(real, Challenge)
    assert salt_and_iterations("mallory") == salt_and_iterations("mallory")
    assert salt_and_iterations("mallory")[0] != salt_and_iterations("trudy")[0]
    assert len(salt_and_iterations("mallory")[0]) == len(real.message.split(b",")[1])


def test_a_recorded_client_final_does_not_log_in_again() -> None:
    users = {"alice": make_credential(SHA256, "s3cret")}
    client = ScramClient(SHA256, "alice", "s3cret", nonce="fixedclientnonce")
    first_server = server_for(users)
    challenge = first_server.receive(client.first())
    assert isinstance(challenge, Challenge)
    recorded = client.final(challenge.message)
    assert isinstance(first_server.receive(recorded), Authenticated)
    replay = server_for(users)  # a new exchange: a fresh server nonce
    assert isinstance(replay.receive(b"n,,n=alice,r=fixedclientnonce"), Challenge)
    outcome = replay.receive(recorded)
    assert isinstance(outcome, Refused) and outcome.failure is AuthFailure.MALFORMED


def test_messages_after_the_end_are_refused() -> None:
    users = {"alice": make_credential(SHA256, "s3cret")}
    server = server_for(users)
    assert isinstance(login(server, ScramClient(SHA256, "alice", "s3cret")), Authenticated)
    outcome = server.receive(b"n,,n=alice,r=again")
    assert isinstance(outcome, Refused) and outcome.failure is AuthFailure.FINISHED
    assert isinstance(server.outcome, Authenticated)  # the exchange's outcome stands


def test_an_oversized_message_is_refused_before_it_is_parsed() -> None:
    name = "a" * MESSAGE_BYTES_MAX
    outcome = server_for({}).receive(f"n,,n={name},r=abc".encode())
    assert isinstance(outcome, Refused) and outcome.failure is AuthFailure.TOO_LARGE


def test_channel_binding_is_refused() -> None:
    outcome = server_for({}).receive(b"p=tls-server-end-point,,n=alice,r=abc")
    assert isinstance(outcome, Refused) and outcome.failure is AuthFailure.CHANNEL_BINDING


def test_the_client_refuses_a_server_asking_for_too_many_iterations() -> None:
    client = ScramClient(SHA256, "user", "pencil", nonce=RFC_CLIENT_NONCE)
    client.first()
    greedy = RFC_SERVER_FIRST.replace(b"i=4096", b"i=1000000")
    with pytest.raises(AuthenticationError, match="iterations"):
        client.final(greedy)


def test_the_client_refuses_a_nonce_that_does_not_extend_its_own() -> None:
    client = ScramClient(SHA256, "user", "pencil", nonce="mine")
    client.first()
    with pytest.raises(AuthenticationError):
        client.final(b"r=theirs123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")


# -- hostile bytes -------------------------------------------------------------------


@given(first=st.binary(max_size=300), final=st.binary(max_size=300))
def test_arbitrary_bytes_never_raise_and_never_authenticate(first: bytes, final: bytes) -> None:
    server = server_for({"user": rfc_credential()}, nonce=RFC_SERVER_NONCE)
    steps = [server.receive(first), server.receive(final)]
    assert all(isinstance(step, Challenge | Refused) for step in steps)


@given(data=st.data())
def test_a_damaged_client_final_is_refused(data: st.DataObject) -> None:
    """Every truncation and every single-byte change of the vector's proof fails."""
    server = server_for({"user": rfc_credential()}, nonce=RFC_SERVER_NONCE)
    assert server.receive(RFC_CLIENT_FIRST) == Challenge(RFC_SERVER_FIRST)
    message = bytearray(RFC_CLIENT_FINAL)
    if data.draw(st.booleans(), label="truncate"):
        message = message[: data.draw(st.integers(0, len(message) - 1), label="length")]
    else:
        at = data.draw(st.integers(0, len(message) - 1), label="at")
        message[at] ^= data.draw(st.integers(1, 255), label="flip")
    assert isinstance(server.receive(bytes(message)), Refused)


SCRAM_TEXT = st.text(alphabet=st.sampled_from("ab=,2CD3\x00\u00e9 *:~-"), max_size=12)


@given(
    gs2=st.sampled_from(["n,,", "y,,", "p=tls-unique,,", "n,a=user,", "x,,", "n,", ""]),
    name=SCRAM_TEXT,
    nonce=SCRAM_TEXT,
    extra=st.lists(SCRAM_TEXT, max_size=3),
    final=st.lists(SCRAM_TEXT, max_size=4),
)
def test_scram_shaped_nonsense_never_raises_and_never_authenticates(
    gs2: str, name: str, nonce: str, extra: list[str], final: list[str]
) -> None:
    """Messages with SCRAM's shape and hostile values: escapes, NULs, commas,
    missing and extra attributes, every gs2 header."""
    server = server_for({"user": rfc_credential()})
    first = ",".join([f"{gs2}n={name}", f"r={nonce}", *extra]).encode()
    steps = [server.receive(first), server.receive(",".join(final).encode())]
    assert all(isinstance(step, Challenge | Refused) for step in steps)
