"""The routing decision (`laminar.shards.router`), driven directly."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar.placement import partition_id, shard_for
from laminar.replication.metadata import METADATA_PID
from laminar.shards.router import PEER_OPS, Action, route
from laminar.wire import ErrorCode, Flags, Op
from laminar.wire.writes import COORDINATOR_BUCKETS, DECISIONS_PID, bucket_pid

PARTITION_OPS = [Op.PRODUCE, Op.FETCH, Op.LIST_OFFSETS, Op.PING]


@given(
    pid=st.integers(0, 2**64 - 1),
    shards=st.integers(1, 16),
    me=st.integers(0, 15),
    op=st.sampled_from(PARTITION_OPS),
)
def test_partition_requests_are_served_only_by_the_owner(
    pid: int, shards: int, me: int, op: Op
) -> None:
    me %= shards
    owner = shard_for(pid, shards)
    decision = route(op, 0, pid, shard_id=me, shard_count=shards)
    if me == owner:
        assert decision.action is Action.LOCAL
    else:
        assert decision.action is Action.FORWARD and decision.target == owner


def test_a_forwarded_frame_is_never_forwarded_again() -> None:
    pid = partition_id(3, 1)
    owner = shard_for(pid, 4)
    other = (owner + 1) % 4
    decision = route(Op.FETCH, 0, pid, shard_id=other, shard_count=4, forwarded=True, internal=True)
    assert decision.action is Action.REJECT and decision.code is ErrorCode.NOT_OWNER
    assert f"shard {owner} owns" in decision.message
    local = route(Op.FETCH, 0, pid, shard_id=owner, shard_count=4, forwarded=True, internal=True)
    assert local.action is Action.LOCAL


def test_topic_changes_go_to_the_metadata_owner_and_reads_stay_local() -> None:
    owner = shard_for(METADATA_PID, 3)
    for me in range(3):
        for op in (Op.CREATE_TOPIC, Op.DELETE_TOPIC):
            decision = route(op, 0, 12345, shard_id=me, shard_count=3)
            if me == owner:
                assert decision.action is Action.LOCAL
            else:
                assert decision.action is Action.FORWARD and decision.target == owner
        for op in (Op.METADATA, Op.LIST_TOPICS):
            assert route(op, 0, 999, shard_id=me, shard_count=3).action is Action.LOCAL


@pytest.mark.parametrize("op", [Op.FORWARD, Op.METADATA_TAIL])
def test_internal_ops_are_accepted_only_between_shards(op: Op) -> None:
    client = route(op, 0, 5, shard_id=0, shard_count=2)
    assert client.action is Action.REJECT and client.code is ErrorCode.INVALID_REQUEST
    assert "internal op" in client.message
    assert route(op, 0, 5, shard_id=0, shard_count=2, internal=True).action is Action.LOCAL
    nested = route(op, 0, 5, shard_id=0, shard_count=2, internal=True, forwarded=True)
    assert nested.action is Action.REJECT  # a client's frame forwarded by a shard


def test_unknown_ops_and_responses_are_answered_where_they_arrive() -> None:
    pid = partition_id(1, 0)
    for me in range(2):
        assert route(77, 0, pid, shard_id=me, shard_count=2).action is Action.LOCAL
        assert route(200, 0, pid, shard_id=me, shard_count=2).action is Action.LOCAL
        response = route(Op.PRODUCE, Flags.RESPONSE, pid, shard_id=me, shard_count=2)
        assert response.action is Action.LOCAL


def test_one_shard_serves_everything() -> None:
    for op in [*PARTITION_OPS, Op.CREATE_TOPIC, Op.METADATA]:
        assert route(op, 0, 2**63 + 5, shard_id=0, shard_count=1).action is Action.LOCAL


@pytest.mark.parametrize(
    "op", [Op.CHECK_STAGED, Op.PUBLISH_STAGED, Op.DROP_STAGED, Op.APPEND_STAGED]
)
def test_the_write_protocols_internal_ops_are_refused_from_clients(op: Op) -> None:
    """Check, publish, drop and append-staged would let a client publish staged
    data (or append anything) without a commit decision."""
    client = route(op, 0, 5, shard_id=0, shard_count=2)
    assert client.action is Action.REJECT and client.code is ErrorCode.INVALID_REQUEST
    assert route(op, 0, 5, shard_id=0, shard_count=2, internal=True).action is not Action.REJECT
    assert op in PEER_OPS  # and other nodes may ask them, over an authenticated session


def test_a_clustered_node_decides_every_commit_on_the_decisions_groups_shard() -> None:
    decider = shard_for(DECISIONS_PID, 4)
    for bucket in range(COORDINATOR_BUCKETS):
        pid = bucket_pid(bucket)
        for op in (Op.COMMIT_WRITE, Op.ABORT_WRITE, Op.WRITE_STATUS):
            alone = route(op, 0, pid, shard_id=decider, shard_count=4)
            clustered = route(op, 0, pid, shard_id=decider, shard_count=4, clustered=True)
            assert clustered.action is Action.LOCAL
            if shard_for(pid, 4) != decider:  # one node: the bucket's own shard decides
                assert alone.action is Action.FORWARD and alone.target == shard_for(pid, 4)
