"""A connection's login (`laminar.security.login`), sans-IO: a genuine
exchange logs in with either mechanism, a verified certificate names its CN,
and hostile sequences of login messages (truncated, oversized, garbage,
out of order, a client-final replayed from another exchange, a mechanism
switched midway) never log anyone in; a refusal is for good."""

from __future__ import annotations

import contextlib

from hypothesis import example, given, settings
from hypothesis import strategies as st

from laminar.security.credentials import DeleteUser, PutUser
from laminar.security.errors import AuthenticationError, AuthFailure
from laminar.security.login import Login
from laminar.security.scram import (
    MESSAGE_BYTES_MAX,
    Authenticated,
    Challenge,
    Mechanism,
    Refused,
    ScramClient,
    ScramServer,
    make_credential,
)
from laminar.security.state import SecurityState

PASSWORD = "alice-password"
FALLBACK_KEY = b"f" * 32
SHA256 = Mechanism.SCRAM_SHA_256


def security_with_alice() -> SecurityState:
    state = SecurityState()
    credentials = tuple(make_credential(m, PASSWORD, iterations=4096) for m in Mechanism)
    state.apply(PutUser("alice", credentials))
    return state


SECURITY = security_with_alice()


def test_a_genuine_exchange_logs_in_with_either_mechanism() -> None:
    for mechanism in Mechanism:
        login = Login(SECURITY, FALLBACK_KEY)
        client = ScramClient(mechanism, "alice", PASSWORD)
        challenge = login.step(mechanism.value, client.first())
        assert isinstance(challenge, Challenge) and not login.done
        done = login.step(mechanism.value, client.final(challenge.message))
        assert isinstance(done, Authenticated)
        client.verify(done.message)
        assert login.principal == "User:alice"


def test_a_wrong_password_and_an_unknown_user_are_told_the_same() -> None:
    reasons = []
    for user, password in (("alice", "not-it"), ("nobody", PASSWORD)):
        login = Login(SECURITY, FALLBACK_KEY)
        client = ScramClient(SHA256, user, password)
        challenge = login.step(SHA256.value, client.first())
        assert isinstance(challenge, Challenge)
        refused = login.step(SHA256.value, client.final(challenge.message))
        assert isinstance(refused, Refused) and login.refused is refused
        assert login.principal is None
        reasons.append(refused.reason)
    assert reasons[0] == reasons[1]


def test_a_certificate_names_its_common_name() -> None:
    login = Login(SECURITY, FALLBACK_KEY)
    assert login.by_certificate(None) is None and not login.done
    assert login.by_certificate({"subject": ((("commonName", "carol"),),)}) is None
    assert login.principal == "User:carol"
    node = Login(SECURITY, FALLBACK_KEY)  # a node's certificate is no user's
    node_certificate = {
        "subject": ((("commonName", "n1"),),),
        "subjectAltName": (("DNS", "localhost"), ("URI", "laminar-node:n1")),
    }
    assert node.by_certificate(node_certificate) is None and not node.done
    nameless = Login(SECURITY, FALLBACK_KEY)
    refused = nameless.by_certificate({"subject": ((("organizationName", "acme"),),)})
    assert isinstance(refused, Refused) and not nameless.done


def test_a_request_before_the_login_ends_it() -> None:
    login = Login(SECURITY, FALLBACK_KEY)
    refused = login.not_logged_in()
    assert refused.failure is AuthFailure.NOT_LOGGED_IN and "log in first" in refused.reason
    client = ScramClient(SHA256, "alice", PASSWORD)
    assert isinstance(login.step(SHA256.value, client.first()), Refused)


STEPS = st.one_of(
    st.just(("first",)),
    st.just(("final",)),
    st.just(("replayed",)),
    st.just(("forged",)),
    st.tuples(st.just("truncated"), st.sampled_from(["first", "final"]), st.integers(0, 200)),
    st.tuples(st.just("garbage"), st.binary(max_size=80)),
    st.just(("oversized",)),
    st.just(("mechanism",)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(STEPS, min_size=1, max_size=5), st.sampled_from(Mechanism))
@example([("first",), ("forged",)], SHA256)
@example([("first",), ("replayed",)], Mechanism.SCRAM_SHA_512)
@example([("first",), ("mechanism",), ("final",)], SHA256)
@example([("first",), ("final",), ("final",)], SHA256)
def test_hostile_login_messages_never_log_in(
    steps: list[tuple[object, ...]], mechanism: Mechanism
) -> None:
    """Logged in iff the first two messages are this exchange's genuine
    client-first and client-final (not one made for its challenge with a
    wrong password); once refused, never logged in."""
    login = Login(SECURITY, FALLBACK_KEY, nonce="server-nonce-of-this-exchange")
    client = ScramClient(mechanism, "alice", PASSWORD, nonce="client-nonce-a")
    first = client.first()
    # Another exchange, complete and genuine, whose client-final is replayed here.
    other_client = ScramClient(mechanism, "alice", PASSWORD, nonce="client-nonce-a")
    other = ScramServer(
        mechanism, SECURITY.users.credential, decoy_key=FALLBACK_KEY, nonce="another-server-nonce"
    )
    other_challenge = other.receive(other_client.first())
    assert isinstance(other_challenge, Challenge)
    replayed = other_client.final(other_challenge.message)
    challenge: bytes | None = None
    final: bytes | None = None

    def genuine_final() -> bytes:
        nonlocal final
        if final is None:
            final = replayed  # what a confused client sends without this exchange's challenge
            if challenge is not None:
                # The challenge may answer a truncated client-first (another nonce).
                with contextlib.suppress(AuthenticationError):
                    final = client.final(challenge)
        return final

    forger = ScramClient(mechanism, "alice", "a guess", nonce="client-nonce-a")
    forger.first()

    def forged_final() -> bytes:
        """A client-final for this very challenge, from a wrong password."""
        if challenge is None:
            return replayed
        try:
            return forger.final(challenge)
        except AuthenticationError:
            return replayed

    refused_once = False
    for step in steps:
        name = step[0]
        used = mechanism.value
        if name == "first":
            message = first
        elif name == "final":
            message = genuine_final()
        elif name == "replayed":
            message = replayed
        elif name == "forged":
            message = forged_final()
        elif name == "truncated":
            whole = first if step[1] == "first" else genuine_final()
            message = whole[: min(int(step[2]), len(whole) - 1)]  # type: ignore[call-overload]
        elif name == "garbage":
            message = step[1]  # type: ignore[assignment]
        elif name == "oversized":
            message = first + b"x" * MESSAGE_BYTES_MAX
        else:
            message = first
            used = next(m for m in Mechanism if m is not mechanism).value
        answer = login.step(used, message)
        if isinstance(answer, Challenge) and challenge is None:
            challenge = answer.message
        if isinstance(answer, Refused):
            refused_once = True
        if refused_once:
            assert not isinstance(answer, Authenticated)
    genuine = steps[:2] == [("first",), ("final",)]
    assert (login.principal == "User:alice") == genuine
    assert login.done == genuine


def _logged_in_as_alice(security: SecurityState) -> Login:
    login = Login(security, FALLBACK_KEY)
    client = ScramClient(SHA256, "alice", PASSWORD)
    challenge = login.step(SHA256.value, client.first())
    assert isinstance(challenge, Challenge)
    assert isinstance(login.step(SHA256.value, client.final(challenge.message)), Authenticated)
    return login


def test_a_login_ends_when_its_user_is_deleted_or_a_snapshot_drops_it() -> None:
    for drop in ("delete", "snapshot"):
        security = security_with_alice()
        login = _logged_in_as_alice(security)
        security.apply(PutUser("bob", security.users.snapshot()[0].credentials))
        security.apply(DeleteUser("bob"))
        assert login.current, "another user's deletion"
        if drop == "delete":
            security.apply(DeleteUser("alice"))
        else:
            security.restore({"users": [], "acls": []})
        assert not login.current and not login.done
        assert login.refused is not None and login.refused.failure is AuthFailure.USER_DELETED
        assert "alice was deleted" in login.refused.reason


def test_a_password_change_or_a_snapshot_keeping_the_user_leaves_the_login() -> None:
    security = security_with_alice()
    login = _logged_in_as_alice(security)
    kept = security.snapshot_body()
    credentials = tuple(make_credential(m, "new-password", iterations=4096) for m in Mechanism)
    security.apply(PutUser("alice", credentials))
    security.restore(kept)
    assert login.current and login.principal == "User:alice"
