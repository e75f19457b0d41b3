"""The metadata state machine (`laminar.shards.metadata`), driven directly."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar.shards.metadata import (
    FIRST_TOPIC_ID,
    MAX_PARTITIONS,
    CreateTopic,
    DeleteTopic,
    MetadataError,
    MetadataState,
    UnknownEntry,
    decode_entry,
    encode_entry,
)
from laminar.wire import ErrorCode


def test_create_assigns_increasing_ids_and_delete_never_frees_one() -> None:
    state = MetadataState()
    a = state.plan_create("a", 3)
    assert a.topic_id == FIRST_TOPIC_ID
    applied = state.apply(0, a)
    assert applied.created is not None and applied.created.name == "a"
    b = state.plan_create("b", 1, {"retention.ms": 5})
    state.apply(1, b)
    assert b.topic_id == a.topic_id + 1
    deleted = state.apply(2, state.plan_delete("a"))
    assert deleted.deleted is not None and deleted.deleted.topic_id == a.topic_id
    again = state.plan_create("a", 2)
    assert again.topic_id == b.topic_id + 1
    assert [t.name for t in state.topics()] == ["b"]
    assert state.knows_id(a.topic_id) and not state.knows_id(again.topic_id)
    assert state.by_name("b") is not None and state.by_name("b").config == {"retention.ms": 5}


@pytest.mark.parametrize(
    ("name", "partitions", "code", "words"),
    [
        ("", 1, ErrorCode.INVALID_REQUEST, "topic name"),
        ("has space", 1, ErrorCode.INVALID_REQUEST, "topic name"),
        ("x" * 250, 1, ErrorCode.INVALID_REQUEST, "topic name"),
        ("ok", 0, ErrorCode.INVALID_REQUEST, "partitions"),
        ("ok", MAX_PARTITIONS + 1, ErrorCode.INVALID_REQUEST, "partitions"),
        ("dup", 1, ErrorCode.TOPIC_EXISTS, "already exists"),
    ],
)
def test_plans_refuse_with_a_code_and_a_reason(
    name: str, partitions: int, code: ErrorCode, words: str
) -> None:
    state = MetadataState()
    state.apply(0, state.plan_create("dup", 1))
    with pytest.raises(MetadataError) as caught:
        state.plan_create(name, partitions)
    assert caught.value.code is code and words in caught.value.message
    with pytest.raises(MetadataError) as caught:
        state.plan_delete("missing")
    assert caught.value.code is ErrorCode.UNKNOWN_TOPIC


def test_apply_never_fails_on_entries_that_no_longer_make_sense() -> None:
    state = MetadataState()
    state.apply(0, CreateTopic("a", 4, 2))
    assert state.apply(1, CreateTopic("a", 9, 1)).created is None  # name taken
    assert state.apply(2, DeleteTopic("a", 999)).deleted is None  # wrong id
    assert state.apply(3, DeleteTopic("zzz", 4)).deleted is None  # wrong name
    assert state.apply(4, UnknownEntry({"op": "rename"})).created is None
    assert state.apply_value(5, b"\xc1 not msgpack").created is None
    assert state.apply(6, CreateTopic("meta", 0, 1)).created is None  # topic id 0 is reserved
    assert [t.name for t in state.topics()] == ["a"]
    assert state.next_topic_id == 10 and state.applied_index == 7


def test_entries_must_be_applied_in_order() -> None:
    state = MetadataState()
    with pytest.raises(ValueError, match="out of order"):
        state.apply(1, CreateTopic("a", 1, 1))


def test_decode_tolerates_anything() -> None:
    assert isinstance(decode_entry(b""), UnknownEntry)
    assert isinstance(decode_entry(msgpack.packb([1, 2])), UnknownEntry)
    assert isinstance(decode_entry(msgpack.packb({"op": "create", "name": 5})), UnknownEntry)
    assert isinstance(decode_entry(msgpack.packb({"op": "create"})), UnknownEntry)
    entry = CreateTopic("t", 7, 3, {"k": "v"})
    assert decode_entry(encode_entry(entry)) == entry
    assert decode_entry(encode_entry(DeleteTopic("t", 7))) == DeleteTopic("t", 7)


names = st.sampled_from(["a", "b", "c", "d"])
commands = st.lists(
    st.one_of(
        st.tuples(st.just("create"), names, st.integers(0, 5)),
        st.tuples(st.just("delete"), names, st.just(0)),
    ),
    max_size=40,
)


@given(commands)
def test_replaying_the_log_rebuilds_the_same_state(script: list[tuple[str, str, int]]) -> None:
    """What the owner decided and appended, a restarted shard replays to the same topics."""
    owner = MetadataState()
    log: list[bytes] = []
    for kind, name, partitions in script:
        try:
            entry = (
                owner.plan_create(name, partitions) if kind == "create" else owner.plan_delete(name)
            )
        except MetadataError:
            continue
        owner.apply(len(log), entry)
        log.append(encode_entry(entry))
    replica = MetadataState()
    for index, value in enumerate(log):
        replica.apply_value(index, value)
    assert replica.topics() == owner.topics()
    assert replica.next_topic_id == owner.next_topic_id
    ids = [t.topic_id for t in owner.topics()]
    assert len(set(ids)) == len(ids)
