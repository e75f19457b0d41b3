"""Users, ACLs and the decoy key in the metadata log (`laminar.security.state`
through `laminar.replication.metadata`), driven directly."""

from __future__ import annotations

import msgpack

from laminar.replication.metadata import (
    MetadataState,
    Snapshot,
    UnknownEntry,
    decode_entry,
    encode_entry,
)
from laminar.replication.metalog import METADATA_FRAME_BYTES_MIN
from laminar.security.acls import (
    Acl,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
)
from laminar.security.scram import ITERATIONS_MIN, Mechanism, make_credential
from laminar.security.state import DECOY_KEY_BYTES, SecurityState
from laminar.shards.config import MAX_TOPICS_CEILING
from laminar.wire import FetchedRecord, MetadataTailResponse, TopicInfo

EVENTS = Resource(ResourceType.TOPIC, "events")
ALICE = "User:alice"


def _credentials(password: str = "secret") -> tuple:
    return tuple(
        make_credential(m, password, iterations=ITERATIONS_MIN, salt=b"s" * 32) for m in Mechanism
    )


def _write(acl_op: Operation = Operation.WRITE, name: str = "events") -> Acl:
    return Acl(ALICE, ResourceType.TOPIC, PatternType.LITERAL, name, acl_op, Permission.ALLOW)


class _Log:
    """A metadata log: plan on the state, append the encoded entry, apply it."""

    def __init__(self) -> None:
        self.state = MetadataState()
        self.entries: list[bytes] = []

    def append(self, entry: object) -> None:
        value = encode_entry(entry)  # type: ignore[arg-type]
        self.entries.append(value)
        self.state.apply_value(len(self.entries) - 1, value)

    def replay(self) -> MetadataState:
        state = MetadataState()
        for index, value in enumerate(self.entries):
            state.apply_value(index, value)
        return state


def _decisions(state: MetadataState) -> tuple[bool, ...]:
    acls = state.security.acls
    return (
        acls.authorize(ALICE, Operation.WRITE, EVENTS),
        acls.authorize(ALICE, Operation.READ, EVENTS),
        acls.authorize("User:admin", Operation.DELETE, EVENTS),
    )


def test_users_acls_and_the_decoy_key_are_log_entries_a_replay_rebuilds() -> None:
    log = _Log()
    security = log.state.security
    log.append(security.plan_decoy_key(b"k" * DECOY_KEY_BYTES))
    log.append(security.users.plan_create("admin", _credentials(), superuser=True))
    log.append(security.users.plan_create("alice", _credentials()))
    log.append(security.acls.plan_add([_write()]))
    assert _decisions(log.state) == (True, False, True)  # admin: a superuser
    replayed = log.replay()
    assert replayed.security.snapshot_body() == security.snapshot_body()
    assert _decisions(replayed) == (True, False, True)
    log.append(security.users.plan_delete("admin"))
    log.append(security.acls.plan_remove([_write()]))
    assert _decisions(log.state) == (False, False, False)
    assert _decisions(log.replay()) == (False, False, False)


def test_a_snapshot_carries_users_acls_and_the_key_and_replaces_them() -> None:
    log = _Log()
    security = log.state.security
    log.append(security.plan_decoy_key(b"k" * DECOY_KEY_BYTES))
    log.append(security.users.plan_create("alice", _credentials()))
    log.append(security.acls.plan_add([_write()]))
    value = encode_entry(log.state.snapshot(at=9))
    # A state that saw other things (a user since deleted, another ACL)
    # holds exactly the snapshot's after applying it.
    behind = MetadataState()
    behind.apply_value(0, encode_entry(behind.security.users.plan_create("bob", _credentials())))
    behind.apply_value(1, encode_entry(behind.security.acls.plan_add([_write(Operation.READ)])))
    behind.apply_value(9, value)
    assert behind.security.snapshot_body() == security.snapshot_body()
    assert [u.name for u in behind.security.users.users()] == ["alice"]
    assert _decisions(behind) == (True, False, False)  # the cached READ decision is gone


def test_the_decoy_key_is_written_once() -> None:
    log = _Log()
    log.append(log.state.security.plan_decoy_key(b"a" * DECOY_KEY_BYTES))
    racing = SecurityState().plan_decoy_key(
        b"b" * DECOY_KEY_BYTES
    )  # planned before the first applied
    log.append(racing)
    assert log.state.security.decoy_key == b"a" * DECOY_KEY_BYTES


def test_damaged_security_entries_and_snapshots_are_skipped_never_applied() -> None:
    bad = [
        {"op": "user_put", "name": "a b", "superuser": False, "scram": []},
        {"op": "acl_add", "acls": [["alice", "topic", "literal", "x", "read", "allow"]]},
        {"op": "decoy_key", "key": b"short"},
        {"op": "snapshot", "next_topic_id": 1, "topics": [], "users": [{"op": "user_delete"}]},
        {"op": "snapshot", "next_topic_id": 1, "topics": [], "decoy_key": "text"},
    ]
    for body in bad:
        assert isinstance(decode_entry(msgpack.packb(body)), UnknownEntry), body


def test_a_snapshot_at_every_ceiling_fits_a_channel_answer() -> None:
    """Every topic, user and ACL the limits allow, with the longest names, is one
    entry in one answer on a shard's channel."""
    state = MetadataState()
    security = state.security
    config = {"retention.ms": 2**62, "retention.bytes": 2**62, "segment.bytes": 1 << 30}
    topics = tuple(
        TopicInfo(f"{n:0249d}", n + 1, 65536, dict(config)) for n in range(MAX_TOPICS_CEILING)
    )
    security.decoy_key = b"k" * DECOY_KEY_BYTES
    credentials = _credentials()
    for n in range(security.users.max_users):
        security.users.apply(security.users.plan_create(f"{n:064d}", credentials))
    principal = "User:" + "u" * 64
    acls = [
        Acl(principal, ResourceType.TOPIC, PatternType.PREFIXED, f"{n:0255d}", op, Permission.DENY)
        for n in range(security.acls.max_acls // 2)
        for op in (Operation.READ, Operation.DESCRIBE)
    ]
    for start in range(0, len(acls), 1000):
        security.acls.apply(security.acls.plan_add(acls[start : start + 1000]))
    snapshot = state.snapshot(at=5)
    entry = encode_entry(Snapshot(MAX_TOPICS_CEILING + 1, topics, 5, (), (), snapshot.security))
    answer = MetadataTailResponse(0, (FetchedRecord(5, 6, entry),), 5, 6, 6).encode(1)
    assert len(answer) < METADATA_FRAME_BYTES_MIN
