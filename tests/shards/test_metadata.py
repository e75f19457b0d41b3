"""The metadata state machine (`laminar.replication.metadata`), driven directly."""

from __future__ import annotations

from unittest import mock

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar.log import LogConfig
from laminar.replication import metadata
from laminar.replication.metadata import (
    FIRST_TOPIC_ID,
    MAX_PARTITIONS,
    AlterTopic,
    CreateTopic,
    Decommission,
    DeleteTopic,
    MetadataError,
    MetadataState,
    Snapshot,
    TopicLimits,
    UnknownEntry,
    decode_entry,
    encode_entry,
)
from laminar.replication.metadata_home import LocalMetadata
from laminar.replication.metalog import METADATA_FRAME_BYTES_MIN
from laminar.replication.topic_config import log_config
from laminar.shards.config import MAX_TOPICS_CEILING
from laminar.wire import ErrorCode, FetchedRecord, MetadataTailResponse, TopicInfo


def test_create_assigns_increasing_ids_and_delete_never_frees_one() -> None:
    state = MetadataState()
    a = state.plan_create("a", 3)
    assert a.topic_id == FIRST_TOPIC_ID
    applied = state.apply(0, a)
    assert [t.name for t in applied.created] == ["a"]
    b = state.plan_create("b", 1, {"retention.ms": 5})
    state.apply(1, b)
    assert b.topic_id == a.topic_id + 1
    deleted = state.apply(2, state.plan_delete("a"))
    assert [t.topic_id for t in deleted.deleted] == [a.topic_id]
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
        (".", 1, ErrorCode.INVALID_REQUEST, "not '.' or '..'"),
        ("..", 1, ErrorCode.INVALID_REQUEST, "not '.' or '..'"),
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
    assert state.apply(1, CreateTopic("a", 9, 1)).created == ()  # name taken
    assert state.apply(2, DeleteTopic("a", 999)).deleted == ()  # wrong id
    assert state.apply(3, DeleteTopic("zzz", 4)).deleted == ()  # wrong name
    assert state.apply(4, UnknownEntry({"op": "rename"})).created == ()
    assert state.apply_value(5, b"\xc1 not msgpack").created == ()
    assert state.apply(6, CreateTopic("meta", 0, 1)).created == ()  # topic id 0 is reserved
    assert [t.name for t in state.topics()] == ["a"]
    assert state.next_topic_id == 10 and state.applied_index == 7


def test_entries_must_be_applied_in_order() -> None:
    state = MetadataState()
    state.apply(1, CreateTopic("a", 1, 1))  # index 0 was Raft's own entry: a gap is fine
    with pytest.raises(ValueError, match="out of order"):
        state.apply(1, CreateTopic("b", 2, 1))


def test_decode_tolerates_anything() -> None:
    assert isinstance(decode_entry(b""), UnknownEntry)
    assert isinstance(decode_entry(msgpack.packb([1, 2])), UnknownEntry)
    assert isinstance(decode_entry(msgpack.packb({"op": "create", "name": 5})), UnknownEntry)
    assert isinstance(decode_entry(msgpack.packb({"op": "create"})), UnknownEntry)
    entry = CreateTopic("t", 7, 3, {"retention.ms": 5})
    assert decode_entry(encode_entry(entry)) == entry
    alter = AlterTopic("t", 7, {"segment.ms": 60_000})
    assert decode_entry(encode_entry(alter)) == alter
    snap = Snapshot(9, (TopicInfo("t", 7, 3, {"retention.bytes": 10}),))
    assert decode_entry(encode_entry(snap)) == snap
    assert decode_entry(encode_entry(DeleteTopic("t", 7))) == DeleteTopic("t", 7)


def test_topic_configs_take_known_keys_with_typed_values_only() -> None:
    state = MetadataState()
    ok = state.plan_create("t", 1, {"retention.ms": -1, "segment.bytes": 1 << 20})
    assert ok.config == {"retention.ms": -1, "segment.bytes": 1 << 20}
    for config, words in (
        ({"cleanup.policy": "compact"}, "unknown topic config 'cleanup.policy'"),
        ({"retention.ms": "1d"}, "must be an integer"),
        ({"retention.ms": -2}, "must be an integer in -1.."),
        ({"segment.bytes": 10}, "must be an integer in 4096.."),
        ({"flush.messages": 2}, "must be an integer in 1..1"),
    ):
        with pytest.raises(MetadataError) as caught:
            state.plan_create("t", 1, config)  # type: ignore[arg-type]
        assert caught.value.code is ErrorCode.INVALID_REQUEST
        assert words in caught.value.message
    # A stored config with keys this version does not know is applied without them.
    state.apply(0, CreateTopic("old", 1, 1, {"x": "y", "retention.ms": 5}))  # type: ignore[dict-item]
    assert state.by_name("old") == TopicInfo("old", 1, 1, {"retention.ms": 5})


def test_the_topic_count_is_bounded() -> None:
    state = MetadataState(max_topics=2)
    for index, name in enumerate(("a", "b")):
        state.apply(index, state.plan_create(name, 1))
    with pytest.raises(MetadataError) as caught:
        state.plan_create("c", 1)
    assert "limit of 2 topics" in caught.value.message
    state.apply(2, state.plan_delete("a"))
    assert state.plan_create("c", 1).name == "c"


def test_alter_sets_and_removes_keys() -> None:
    state = MetadataState()
    state.apply(0, state.plan_create("t", 2, {"retention.ms": 10, "segment.ms": 99}))
    entry = state.plan_alter("t", {"retention.bytes": 1 << 20}, ("segment.ms",))
    applied = state.apply(1, entry)
    expected = TopicInfo("t", 1, 2, {"retention.ms": 10, "retention.bytes": 1 << 20})
    assert applied.altered == (expected,) and state.by_name("t") == expected
    for config, remove in (({"bogus": 1}, ()), ({}, ("bogus",))):
        with pytest.raises(MetadataError, match="unknown topic config 'bogus'"):
            state.plan_alter("t", config, remove)  # type: ignore[arg-type]
    with pytest.raises(MetadataError) as caught:
        state.plan_alter("nope", {})
    assert caught.value.code is ErrorCode.UNKNOWN_TOPIC


names = st.sampled_from(["a", "b", "c", "d"])
commands = st.lists(
    st.one_of(
        st.tuples(st.just("create"), names, st.integers(0, 5)),
        st.tuples(st.just("delete"), names, st.just(0)),
        st.tuples(st.just("alter"), names, st.integers(1, 1000)),
    ),
    max_size=120,
)


@given(commands, st.data(), st.sampled_from([1, 3, 8]), st.integers(0, 3))
def test_replaying_the_compacted_log_rebuilds_the_same_state(
    script: list[tuple[str, str, int]], data: st.DataObject, every: int, keep_before: int
) -> None:
    """What the owner decided and appended, compacting as it goes (a snapshot, then
    the entries before it dropped), a restarted shard replays to the same topics,
    and a shard that fell behind the dropped entries catches up to them too,
    learning from the snapshot what was created, deleted and altered meanwhile.
    Snapshots are due every few entries here (`every`, not 64), so short scripts
    compact too. A cluster keeps a few entries before the snapshot (Raft's
    anchor, whole segments): `keep_before` of them, which whoever starts after a
    gap skips (`resync`)."""
    lag = data.draw(st.integers(0, len(script)), label="lag")  # steps the far shard keeps up
    with mock.patch.object(metadata, "SNAPSHOT_MIN_ENTRIES", every):
        replay_compacted(script, lag, every, keep_before)


def replay_compacted(
    script: list[tuple[str, str, int]], lag: int, every: int, keep_before: int = 0
) -> None:
    owner = MetadataState()
    log: dict[int, bytes] = {}  # index -> entry, the retained part of the log
    end = 0

    def append(entry: CreateTopic | DeleteTopic | AlterTopic | Snapshot) -> None:
        nonlocal end
        owner.apply(end, entry)
        log[end] = encode_entry(entry)
        end += 1

    behind = MetadataState()
    for step, (kind, name, n) in enumerate(script):
        try:
            if kind == "create":
                entry: CreateTopic | DeleteTopic | AlterTopic = owner.plan_create(name, n)
            elif kind == "delete":
                entry = owner.plan_delete(name)
            else:
                entry = owner.plan_alter(name, {"retention.ms": n})
        except MetadataError:
            continue
        append(entry)
        if owner.needs_snapshot():
            append(owner.snapshot(end))
            for index in [i for i in log if i < end - 1 - keep_before]:
                del log[index]
        if step < lag:  # this shard keeps up for a while, then stops
            while behind.applied_index < end:  # from the snapshot if its next entry was dropped
                index = max(behind.applied_index, min(log))
                if index > behind.applied_index:
                    behind.resync()
                behind.apply_value(index, log[index])
    replica = MetadataState()
    if log and min(log) > 0:
        replica.resync()
    for index in sorted(log):
        replica.apply_value(index, log[index])
    assert replica.topics() == owner.topics()
    assert replica.next_topic_id == owner.next_topic_id
    assert len(log) <= max(every, 2 * len(owner.topics())) + 1 + keep_before
    known = {t.topic_id: t for t in behind.topics()}
    start = max(behind.applied_index, min(log, default=end))
    if start > behind.applied_index:
        behind.resync()
    for index in range(start, end):
        applied = behind.apply_value(index, log[index])
        for topic in applied.created:
            known[topic.topic_id] = topic
        for topic in applied.deleted:
            del known[topic.topic_id]
        for topic in applied.altered:
            known[topic.topic_id] = topic
    assert behind.topics() == owner.topics()
    assert sorted(known.values(), key=lambda t: t.topic_id) == list(owner.topics())


def test_churn_is_compacted_and_a_far_behind_shard_learns_the_difference() -> None:
    owner = MetadataState()
    log: dict[int, bytes] = {}
    end = 0
    for n in range(300):  # create and delete "churn-<n>", keep every tenth
        for kind in ("create", "delete") if n % 10 else ("create",):
            name = f"churn-{n}"
            entry = owner.plan_create(name, 1) if kind == "create" else owner.plan_delete(name)
            owner.apply(end, entry)
            log[end] = encode_entry(entry)
            end += 1
            if owner.needs_snapshot():
                owner.apply(end, owner.snapshot(end))
                log = {end: encode_entry(owner.snapshot(end))}
                end += 1
    assert owner.snapshot_index is not None and len(log) < 100 < end
    behind = MetadataState()
    behind.apply(0, CreateTopic("churn-1", 2, 1))  # it knew a topic deleted since
    applied = [behind.apply_value(i, log[i]) for i in sorted(log)]
    assert behind.topics() == owner.topics()
    assert [t.name for t in applied[0].deleted] == ["churn-1"]
    created = {t.name for a in applied for t in a.created}
    deleted = {t.name for a in applied[1:] for t in a.deleted}
    assert created - deleted == {t.name for t in owner.topics()}


def test_a_snapshot_that_lands_past_its_planned_index_is_skipped() -> None:
    """A snapshot planned at index 1 but appended at 2 (an entry got in between)
    would undo that entry: it is skipped, on every node alike."""
    state = MetadataState()
    state.apply(0, state.plan_create("a", 1))
    snapshot = decode_entry(encode_entry(state.snapshot(1)))
    assert isinstance(snapshot, Snapshot) and snapshot.at == 1
    state.apply(1, state.plan_create("b", 1))
    applied = state.apply(2, snapshot)
    assert applied.snapshot is None and applied.deleted == ()
    assert [t.name for t in state.topics()] == ["a", "b"]
    assert state.apply(3, state.snapshot(3)).snapshot is not None


def test_after_a_gap_entries_are_skipped_until_a_snapshot() -> None:
    """Entries after missing ones do not act on a state that lacks what came
    before them; the next snapshot defines the whole state, and says by
    difference what to delete."""
    owner = MetadataState()
    for index, name in enumerate(("x", "y")):
        owner.apply(index, owner.plan_create(name, 1))
    owner.apply(2, owner.plan_delete("x"))
    owner.apply(3, owner.plan_create("z", 1))
    snapshot = owner.snapshot(4)
    stale = MetadataState()
    stale.apply(0, CreateTopic("x", 1, 1))
    stale.resync()
    assert stale.apply(3, CreateTopic("z", 3, 1)).created == ()
    applied = stale.apply(4, snapshot)
    assert applied.snapshot == snapshot
    assert [t.name for t in applied.deleted] == ["x"]
    assert sorted(t.name for t in applied.created) == ["y", "z"]
    assert stale.apply(5, stale.plan_create("w", 1)).created  # in step again


def test_a_snapshot_tells_a_shard_behind_it_what_changed() -> None:
    """A shard learns from a snapshot, by difference, what the dropped entries did:
    its partitions are created, removed and reconfigured from this answer."""
    behind = MetadataState()
    behind.apply(0, CreateTopic("kept", 1, 1))
    behind.apply(1, CreateTopic("altered", 2, 1, {"retention.ms": 5}))
    behind.apply(2, CreateTopic("deleted", 3, 1))
    kept = TopicInfo("kept", 1, 1, {})
    altered = TopicInfo("altered", 2, 1, {"retention.ms": 9})
    new = TopicInfo("new", 4, 2, {})
    applied = behind.apply(9, Snapshot(5, (kept, altered, new)))
    assert applied.created == (new,)
    assert [t.name for t in applied.deleted] == ["deleted"]
    assert applied.altered == (altered,)
    assert behind.topics() == (kept, altered, new) and behind.next_topic_id == 5


def test_a_snapshot_of_the_most_topics_fits_a_channel_answer() -> None:
    """A follower behind a compaction gets the whole state as one entry in one
    channel answer, whatever --max-frame-bytes says: the topic ceiling and the
    channel's frame floor are chosen together."""
    config = {"retention.ms": 2**62, "retention.bytes": 2**62, "segment.bytes": 1 << 30}
    config["segment.ms"] = 2**62
    topics = tuple(
        TopicInfo(f"{n:0249d}", n + 1, MAX_PARTITIONS, dict(config))
        for n in range(MAX_TOPICS_CEILING)
    )
    entry = encode_entry(Snapshot(MAX_TOPICS_CEILING + 1, topics))
    answer = MetadataTailResponse(0, (FetchedRecord(5, 6, entry),), 5, 6, 6).encode(1)
    assert len(answer) < METADATA_FRAME_BYTES_MIN // 2  # with room to spare


def test_a_creation_records_who_the_first_replicas_were_placed_on() -> None:
    """Every node derives a partition's first replicas from the creation entry,
    not from its own (possibly different) view, so all agree on each group's
    first membership; a damaged list is not trusted."""
    state = MetadataState()
    placed = (("n1", 1.0), ("n2", 2.0), ("n3", 1.0))
    entry = state.plan_create("t", 2, None, 3, 3, placed)
    again = decode_entry(encode_entry(entry))
    assert again == entry
    follower = MetadataState()
    follower.apply(0, again)
    assert follower.placed_on(entry.topic_id) == dict(placed)
    body = msgpack.unpackb(encode_entry(entry))
    body["placed_on"] = [["n1", -1]]
    assert isinstance(decode_entry(msgpack.packb(body)), UnknownEntry)
    follower.apply(1, DeleteTopic("t", entry.topic_id))
    assert follower.placed_on(entry.topic_id) is None


def test_a_snapshot_keeps_whom_each_topic_was_placed_on() -> None:
    """Compaction must not forget a topic's creation members: a node that
    learns of the topic from a snapshot derives its first replicas from them
    like a node that applied the creation (else the two disagree on who the
    group's first voters are). Each distinct member list is stored once."""
    owner = MetadataState()
    three = (("n1", 1.0), ("n2", 2.0), ("n3", 1.0))
    four = (*three, ("n4", 1.0))
    for index, (name, placed) in enumerate((("a", three), ("b", three), ("c", four), ("d", ()))):
        owner.apply(index, owner.plan_create(name, 1, None, 1, 4, placed))
    owner.apply(4, owner.plan_delete("b"))
    encoded = encode_entry(owner.snapshot(5))
    body = msgpack.unpackb(encoded)
    assert len(body["placements"]) == 2
    behind = MetadataState()
    behind.resync()
    behind.apply(5, decode_entry(encoded))
    ids = {t.name: t.topic_id for t in behind.topics()}
    assert behind.placed_on(ids["a"]) == dict(three)
    assert behind.placed_on(ids["c"]) == dict(four)
    assert behind.placed_on(ids["d"]) is None
    for damaged in (-1, 2, "0"):
        body["placed_on"][0][1] = damaged
        assert isinstance(decode_entry(msgpack.packb(body)), UnknownEntry)


def test_a_decommission_is_an_entry_and_outlives_compaction() -> None:
    """The cluster's decision that a node leaves for good is in the metadata
    log (so it survives a restart of any node), a snapshot keeps it (so it
    survives compaction), and a cancel undoes it."""
    owner = MetadataState()
    owner.apply(0, owner.plan_create("t", 1, None, 2, 4, ()))
    members = {"n1", "n2", "n3", "n4"}
    entry = owner.plan_decommission("n4", False, members, members)
    assert decode_entry(encode_entry(entry)) == entry == Decommission("n4")
    owner.apply(1, entry)
    assert owner.decommissioned == {"n4"}
    behind = MetadataState()
    behind.resync()
    behind.apply(2, decode_entry(encode_entry(owner.snapshot(2))))
    assert behind.decommissioned == {"n4"}
    cancel = owner.plan_decommission("n4", True, members, members)
    assert decode_entry(encode_entry(cancel)) == cancel
    behind.apply(3, cancel)
    assert behind.decommissioned == frozenset()
    body = msgpack.unpackb(encode_entry(entry))
    for damaged in ({"cancel": 1}, {"node": 4}):
        assert isinstance(decode_entry(msgpack.packb({**body, **damaged})), UnknownEntry)


def test_a_decommission_is_refused_for_a_stranger_or_when_too_few_nodes_would_remain() -> None:
    state = MetadataState()
    state.apply(0, state.plan_create("three", 1, None, 3, 4, ()))
    members = {"n1", "n2", "n3", "n4"}
    with pytest.raises(MetadataError, match="no node 'n9'"):
        state.plan_decommission("n9", False, members, members)
    state.apply(1, state.plan_decommission("n4", False, members, members))
    with pytest.raises(MetadataError, match=r"leave 2 nodes for topic 'three' \(replication"):
        state.plan_decommission("n3", False, members, members)
    assert state.plan_decommission("n4", False, members, members) == Decommission("n4")
    # placement's candidates count, not every member: one dead past its grace does not
    fresh = MetadataState()
    fresh.apply(0, fresh.plan_create("three", 1, None, 3, 4, ()))
    with pytest.raises(MetadataError, match="leave 2 nodes"):
        fresh.plan_decommission("n1", False, members, {"n1", "n2", "n3"})


def test_partitions_are_bounded_per_topic_and_per_node() -> None:
    """Finding 3 (issue 24): a create may not take the node past its partition
    cap, nor a topic past the per-topic maximum; a refused create adds nothing."""
    state = MetadataState(limits=TopicLimits(max_partitions=100, max_topic_partitions=60))
    with pytest.raises(MetadataError) as caught:
        state.plan_create("wide", 61)
    assert caught.value.code is ErrorCode.INVALID_REQUEST
    assert "at most 60 partitions" in caught.value.message
    state.apply(0, state.plan_create("a", 60))
    with pytest.raises(MetadataError) as caught:
        state.plan_create("b", 41)
    assert "holds 60 partition replicas and may hold 100" in caught.value.message
    assert state.by_name("b") is None and state.next_topic_id == 2  # nothing half-made
    state.apply(1, state.plan_create("b", 40))  # exactly up to the cap
    state.apply(2, state.plan_delete("a"))
    assert state.plan_create("c", 60).partitions == 60  # a delete makes room


def test_a_cluster_counts_replicas_against_every_node_s_cap() -> None:
    state = MetadataState(limits=TopicLimits(max_partitions=100))
    placed = (("n1", 1.0), ("n2", 1.0), ("n3", 1.0))
    state.apply(0, state.plan_create("a", 90, None, 3, 3, placed))  # 270 of 300
    with pytest.raises(MetadataError) as caught:
        state.plan_create("b", 11, None, 3, 3, placed)
    assert "the 3 nodes hold 270 partition replicas and may hold 300" in caught.value.message
    assert state.plan_create("b", 10, None, 3, 3, placed).partitions == 10


def test_a_node_that_runs_alone_places_on_itself_and_cannot_be_decommissioned() -> None:
    home = LocalMetadata(None)  # type: ignore[arg-type]
    assert not home.clustered and home.placement() == {}
    with pytest.raises(MetadataError) as caught:
        home.decommission_view()
    assert caught.value.code is ErrorCode.INVALID_REQUEST
    assert "runs alone" in caught.value.message


def test_flush_messages_1_makes_a_topic_durable_whatever_the_node_s_flush() -> None:
    node = LogConfig(flush="never", segment_bytes=1 << 20)
    assert log_config(node, {}).flush == "never"
    assert log_config(node, {"flush.messages": 1}).flush == "always"
    assert log_config(node, {"segment.bytes": 4096}).segment_bytes == 4096
