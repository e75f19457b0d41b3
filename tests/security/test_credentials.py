"""The credential store: planning and its refusals, entries that round-trip
and never carry a password, a replay equal to a snapshot, and a login
against the store."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar.security.credentials import (
    CredentialStore,
    DeleteUser,
    PutUser,
    UserInfo,
    decode_entry,
    encode_entry,
)
from laminar.security.errors import AuthFailure, Refusal, SecurityRefusal
from laminar.security.scram import (
    Authenticated,
    Challenge,
    Mechanism,
    Refused,
    ScramClient,
    ScramCredential,
    ScramServer,
    make_credential,
)

SHA256, SHA512 = Mechanism.SCRAM_SHA_256, Mechanism.SCRAM_SHA_512
PASSWORD = "pa55-Word!"
# PBKDF2 is the slow part: make the credentials once and share them.
CREDENTIALS = (
    make_credential(SHA256, PASSWORD, iterations=4096),
    make_credential(SHA512, PASSWORD, iterations=4096),
)


def store_with(*names: str, max_users: int = 1000) -> CredentialStore:
    store = CredentialStore(max_users)
    for name in names:
        store.apply(store.plan_create(name, CREDENTIALS))
    return store


def refusal_of(call: object, *args: object) -> Refusal:
    with pytest.raises(SecurityRefusal) as refused:
        call(*args)  # type: ignore[operator]
    return refused.value.refusal


def login(store: CredentialStore, name: str, password: str, mechanism: Mechanism) -> object:
    server = ScramServer(mechanism, store.credential, decoy_key=b"k" * 32)
    client = ScramClient(mechanism, name, password)
    first = server.receive(client.first())
    assert isinstance(first, Challenge)
    return server.receive(client.final(first.message))


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_a_created_user_logs_in_with_either_mechanism_until_deleted(mechanism: Mechanism) -> None:
    store = store_with("alice")
    outcome = login(store, "alice", PASSWORD, mechanism)
    assert isinstance(outcome, Authenticated) and outcome.principal == "User:alice"
    store.apply(store.plan_delete("alice"))
    outcome = login(store, "alice", PASSWORD, mechanism)
    assert isinstance(outcome, Refused) and outcome.failure is AuthFailure.UNKNOWN_USER


def test_a_password_change_replaces_the_credentials() -> None:
    store = store_with("alice")
    new = (make_credential(SHA256, "new password", iterations=4096),)
    store.apply(store.plan_set_credentials("alice", new))
    assert isinstance(login(store, "alice", "new password", SHA256), Authenticated)
    assert isinstance(login(store, "alice", PASSWORD, SHA256), Refused)
    assert store.credential("alice", SHA512) is None


def test_an_alter_applies_to_the_credentials_there_when_planned() -> None:
    """Kafka's model: an upsert makes a missing user (not a superuser), removals
    leave the other mechanisms, the last one's removal deletes the user, and
    removing what is not there is refused."""
    store = CredentialStore()
    store.apply(store.plan_alter("alice", CREDENTIALS[:1], ()))
    store.apply(store.plan_alter("alice", CREDENTIALS[1:], ()))  # the first stays
    assert store.users()[0].mechanisms == (SHA256, SHA512) and not store.users()[0].superuser
    store.apply(store.plan_alter("alice", (), (SHA256,)))
    assert store.credential("alice", SHA256) is None
    assert isinstance(login(store, "alice", PASSWORD, SHA512), Authenticated)
    assert refusal_of(store.plan_alter, "alice", (), (SHA256,)) is Refusal.UNKNOWN
    assert refusal_of(store.plan_alter, "nobody", (), (SHA256,)) is Refusal.UNKNOWN
    store.apply(store.plan_alter("alice", (), (SHA512,)))
    assert "alice" not in store
    root = CredentialStore()
    root.apply(root.plan_create("root", CREDENTIALS[:1], superuser=True))
    root.apply(root.plan_alter("root", CREDENTIALS[1:], ()))
    assert root.users()[0].superuser, "an alter keeps a superuser one"


def test_listing_shows_names_mechanisms_and_superusers_only() -> None:
    store = store_with("bob", "alice")
    store.apply(store.plan_create("root", CREDENTIALS[:1], superuser=True))
    assert store.users() == (
        UserInfo("alice", (SHA256, SHA512), False),
        UserInfo("bob", (SHA256, SHA512), False),
        UserInfo("root", (SHA256,), True),
    )
    assert store.superusers() == {"User:root"}


@pytest.mark.parametrize(
    "name", ["", "a" * 65, "al ice", "a,b", "a=b", "User:x", "*", "al\u00efce", "a\nb"]
)
def test_invalid_user_names_are_refused(name: str) -> None:
    assert refusal_of(CredentialStore().plan_create, name, CREDENTIALS) is Refusal.INVALID


def test_refusals_say_why() -> None:
    store = store_with("alice", max_users=2)
    assert refusal_of(store.plan_create, "alice", CREDENTIALS) is Refusal.EXISTS
    assert refusal_of(store.plan_delete, "bob") is Refusal.UNKNOWN
    assert refusal_of(store.plan_set_credentials, "bob", CREDENTIALS) is Refusal.UNKNOWN
    assert refusal_of(store.plan_create, "bob", ()) is Refusal.INVALID
    twice = (CREDENTIALS[0], CREDENTIALS[0])
    assert refusal_of(store.plan_create, "bob", twice) is Refusal.INVALID
    short_key = ScramCredential(SHA256, bytes(16), 4096, bytes(31), bytes(32))
    assert refusal_of(store.plan_create, "bob", (short_key,)) is Refusal.INVALID
    store.apply(store.plan_create("bob", CREDENTIALS))
    assert refusal_of(store.plan_create, "carol", CREDENTIALS) is Refusal.LIMIT


def test_applying_never_fails_and_keeps_the_bound() -> None:
    store = store_with("alice", max_users=1)
    assert not store.apply(PutUser("bob", CREDENTIALS))  # planned before the store filled
    assert not store.apply(DeleteUser("nobody"))
    assert [u.name for u in store.users()] == ["alice"]


def test_entries_round_trip_and_carry_no_password() -> None:
    for entry in (PutUser("alice", CREDENTIALS, True), DeleteUser("alice")):
        encoded = encode_entry(entry)
        assert decode_entry(encoded) == entry
        assert PASSWORD.encode() not in encoded


@given(st.binary(max_size=200))
def test_foreign_bytes_decode_to_nothing_or_a_valid_entry(value: bytes) -> None:
    entry = decode_entry(value)
    assert entry is None or isinstance(entry, PutUser | DeleteUser)


def test_damaged_entries_decode_to_nothing() -> None:
    good = encode_entry(PutUser("alice", CREDENTIALS))
    for damaged in (
        good.replace(b"user_put", b"user_xxx"),
        good.replace(b"alice", b"al ce"),
        good.replace(b"SCRAM-SHA-256", b"SCRAM-SHA-999"),
        good[:-1],
    ):
        assert decode_entry(damaged) is None


OPS = st.lists(
    st.tuples(st.sampled_from(["create", "delete", "password"]), st.sampled_from("abcde")),
    max_size=30,
)


@given(OPS)
def test_a_replay_equals_a_restored_snapshot(ops: list[tuple[str, str]]) -> None:
    """Every node applying the same entries holds the same users, and a snapshot
    taken at any point rebuilds exactly that."""
    store, replica = CredentialStore(max_users=3), CredentialStore(max_users=3)
    for op, name in ops:
        try:
            if op == "create":
                entry: PutUser | DeleteUser = store.plan_create(name, CREDENTIALS[:1])
            elif op == "delete":
                entry = store.plan_delete(name)
            else:
                entry = store.plan_set_credentials(name, CREDENTIALS[1:])
        except SecurityRefusal:
            continue
        for each in (store, replica):
            each.apply(decode_entry(encode_entry(entry)))  # type: ignore[arg-type]
    restored = CredentialStore(max_users=3)
    restored.restore(store.snapshot())
    assert restored.snapshot() == replica.snapshot() == store.snapshot()
    assert len(store.users()) <= 3
