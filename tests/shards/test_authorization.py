"""Every laminar-door request is authorized on the shard that serves it: the
decision table, the general path, the fast path, forwarded frames, metadata
answers, internal traffic and a node without logins (`authz_harness`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from laminar.groups.frames import (
    CommitFrame,
    DeleteFrame,
    DescribeFrame,
    FindCoordinatorRequest,
    HeartbeatFrame,
    ListFrame,
    PositionsFrame,
    PositionsQuery,
    PositionsReset,
    ResetFrame,
)
from laminar.groups.messages import CommitRequest, HeartbeatRequest
from laminar.placement import partition_id
from laminar.security.acls import CLUSTER_NAME, Operation, Permission, Resource, ResourceType
from laminar.shards.authorization import NEEDS, Need, UnresolvedTopic
from laminar.shards.handlers import RequestContext
from laminar.wire import (
    AlterTopicRequest,
    CreateTopicRequest,
    CreateTopicResponse,
    DecommissionNodeRequest,
    DeleteTopicRequest,
    ErrorCode,
    ErrorResponse,
    FetchRequest,
    FetchResponse,
    Frame,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    Message,
    MetadataRequest,
    MetadataResponse,
    Op,
    Ping,
    ProduceResponse,
    decode_frame,
)
from laminar.wire.codec import Buffer
from laminar.wire.writes import (
    AbortWriteRequest,
    CommitWriteRequest,
    StagedPart,
    StageRequest,
    WriteStatusRequest,
)
from tests.shards.authz_harness import (
    ALICE,
    BOB,
    FRAME_BYTES,
    Shards,
    acl,
    answer,
    produce,
    refused,
)

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = Resource(ResourceType.CLUSTER, CLUSTER_NAME)


def run(tmp_path: Path, scenario: Callable[[Shards], Awaitable[None]], **kw: bool) -> None:
    async def main() -> None:
        shards = Shards(tmp_path, **kw)
        await shards.start()
        shards.metadata.apply(shards.metadata.state.plan_create("events", 4))
        shards.metadata.apply(shards.metadata.state.plan_create("other", 4))
        try:
            await scenario(shards)
        finally:
            await shards.close()

    asyncio.run(main())


# -- the table -------------------------------------------------------------------------


def _names(topic_id: int) -> str | None:
    return {1: "events", 2: "other"}.get(topic_id)


E0 = partition_id(1, 0)
O1 = partition_id(2, 1)
PART_E = StagedPart(E0, 5, 0, 0, 1, 1)
PART_O = StagedPart(O1, 5, 1, 0, 1, 1)


def _topic(name: str) -> Resource:
    return Resource(TOPIC, name)


def _group(name: str) -> Resource:
    return Resource(GROUP, name)


def _beat(topics: tuple[str, ...]) -> HeartbeatRequest:
    return HeartbeatRequest("g", None, 0, 0, None, topics, frozenset(), 10.0)


TABLE = [
    (Op.PRODUCE, produce(E0, b"x"), [(Operation.WRITE, _topic("events"))]),
    (Op.FETCH, FetchRequest(O1, 0), [(Operation.READ, _topic("other"))]),
    (Op.LIST_OFFSETS, ListOffsetsRequest(E0), [(Operation.DESCRIBE, _topic("events"))]),
    (Op.METADATA, MetadataRequest(), []),
    (Op.LIST_TOPICS, ListTopicsRequest(), []),
    (Op.PING, Ping(), []),
    (Op.CREATE_TOPIC, CreateTopicRequest("new", 1), [(Operation.CREATE, _topic("new"))]),
    (Op.DELETE_TOPIC, DeleteTopicRequest("events"), [(Operation.DELETE, _topic("events"))]),
    (Op.ALTER_TOPIC, AlterTopicRequest("events"), [(Operation.ALTER, _topic("events"))]),
    (Op.DECOMMISSION_NODE, DecommissionNodeRequest("n2"), [(Operation.ALTER, CLUSTER)]),
    (Op.STAGE, StageRequest(O1, 5, 0, 0, 0, (b"\0x",)), [(Operation.WRITE, _topic("other"))]),
    (
        Op.COMMIT_WRITE,
        CommitWriteRequest(9, (PART_E, PART_O)),
        [(Operation.WRITE, _topic("events")), (Operation.WRITE, _topic("other"))],
    ),
    (Op.ABORT_WRITE, AbortWriteRequest(9, False, (PART_O,)), [(Operation.WRITE, _topic("other"))]),
    (Op.ABORT_WRITE, AbortWriteRequest(9), []),
    (Op.WRITE_STATUS, WriteStatusRequest(9), []),
    (Op.FIND_COORDINATOR, FindCoordinatorRequest("g"), [(Operation.DESCRIBE, _group("g"))]),
    (
        Op.GROUP_HEARTBEAT,
        HeartbeatFrame(0, _beat(("events",))),
        [(Operation.READ, _group("g")), (Operation.DESCRIBE, _topic("events"))],
    ),
    (
        Op.GROUP_COMMIT,
        CommitFrame(0, CommitRequest("g", "m", 1, {("events", 0): 3, ("other", 1): 2})),
        [
            (Operation.READ, _group("g")),
            (Operation.READ, _topic("events")),
            (Operation.READ, _topic("other")),
        ],
    ),
    (
        Op.GROUP_POSITIONS,
        PositionsFrame(0, PositionsQuery("g", frozenset({("events", 0)}))),
        [(Operation.DESCRIBE, _group("g")), (Operation.DESCRIBE, _topic("events"))],
    ),
    (Op.GROUP_DESCRIBE, DescribeFrame(0, "g"), [(Operation.DESCRIBE, _group("g"))]),
    (Op.GROUP_LIST, ListFrame(0, None), []),
    (
        Op.GROUP_RESET,
        ResetFrame(0, PositionsReset("g", {("events", 0): 5})),
        [(Operation.READ, _group("g")), (Operation.READ, _topic("events"))],
    ),
    (
        Op.GROUP_RESET,
        ResetFrame(0, PositionsReset("g", {("events", 0): None})),
        [
            (Operation.READ, _group("g")),
            (Operation.READ, _topic("events")),
            (Operation.DELETE, _group("g")),
        ],
    ),
    (Op.GROUP_DELETE, DeleteFrame(0, "g"), [(Operation.DELETE, _group("g"))]),
]


@pytest.mark.parametrize(("op", "request_", "expected"), TABLE, ids=[str(r[0]) for r in TABLE])
def test_each_op_needs_what_kafka_would_ask_for(
    op: Op, request_: object, expected: list[tuple[Operation, Resource]]
) -> None:
    needs = NEEDS[op](request_, _names)
    assert [(n.operation, n.resource) for n in needs] == expected
    assert all(n.or_cluster == (op == Op.CREATE_TOPIC) for n in needs)


def test_every_client_op_has_a_rule_and_internal_write_ops_are_refused() -> None:
    client_ops = [op for op in Op if op < 32]
    assert sorted(set(client_ops) - set(NEEDS)) == []
    for op in (Op.CHECK_STAGED, Op.PUBLISH_STAGED, Op.DROP_STAGED, Op.APPEND_STAGED):
        with pytest.raises(Exception, match="internal"):
            NEEDS[op](None, _names)
    assert NEEDS[28](type("Users", (), {"action": "list"})(), _names) == (
        Need(Operation.DESCRIBE, CLUSTER),
    )
    assert NEEDS[29](type("Acls", (), {"action": "add"})(), _names) == (
        Need(Operation.ALTER, CLUSTER),
    )
    assert NEEDS[27](None, _names) == ()


def test_a_topic_id_not_applied_is_resolved_first() -> None:
    with pytest.raises(UnresolvedTopic):
        NEEDS[Op.PRODUCE](produce(partition_id(9, 0), b"x"), _names)


# -- the general path ------------------------------------------------------------------


def test_a_produce_is_refused_until_an_acl_allows_it_and_nothing_is_appended(
    tmp_path: Path,
) -> None:
    async def scenario(s: Shards) -> None:
        pid = s.pid_on("events", 0)
        alice = s.client(ALICE)
        got = await s.ask(produce(pid, b"refused"), alice)
        assert refused(got, ALICE, "write", "topic", "'events'"), got
        s.metadata.allow(acl(Operation.WRITE, "events"))
        got = await s.ask(produce(pid, b"allowed"), alice)
        assert isinstance(got, ProduceResponse), got
        assert refused(await s.ask(produce(pid, b"bob"), s.client(BOB)), BOB)
        s.metadata.revoke(acl(Operation.WRITE, "events"))  # the cached decision goes with it
        assert refused(await s.ask(produce(pid, b"revoked"), alice), ALICE)
        assert await s.values(pid) == [b"allowed"]

    run(tmp_path, scenario)


def test_reads_and_topic_changes_need_their_own_operations(tmp_path: Path) -> None:
    async def scenario(s: Shards) -> None:
        pid = s.pid_on("events", 0)
        alice = s.client(ALICE)
        s.metadata.allow(acl(Operation.WRITE, "events"))
        await s.ask(produce(pid, b"a"), alice)
        assert refused(await s.ask(FetchRequest(pid, 0), alice), "read")
        offsets = await s.ask(ListOffsetsRequest(pid), alice)  # WRITE implies DESCRIBE
        assert isinstance(offsets, ListOffsetsResponse), offsets
        assert refused(await s.ask(ListOffsetsRequest(pid), s.client(BOB)), BOB, "describe")
        s.metadata.allow(acl(Operation.READ, "events"))
        got = await s.ask(FetchRequest(pid, 0), alice)
        assert isinstance(got, FetchResponse) and [r.decode()[0] for r in got.records] == [b"a"]
        assert refused(await s.ask(DeleteTopicRequest("events"), alice), "delete")
        assert refused(await s.ask(CreateTopicRequest("fresh", 1), alice), "create")
        assert s.metadata.state.by_name("fresh") is None
        s.metadata.allow(acl(Operation.CREATE, "fresh"))
        assert isinstance(await s.ask(CreateTopicRequest("fresh", 1), alice), CreateTopicResponse)
        s.metadata.allow(acl(Operation.CREATE, CLUSTER_NAME, ResourceType.CLUSTER))
        got = await s.ask(CreateTopicRequest("any", 1), alice)
        assert isinstance(got, CreateTopicResponse), got
        assert refused(await s.ask(DecommissionNodeRequest("n2"), alice), "alter", "cluster")

    run(tmp_path, scenario)


def test_a_deny_wins_and_a_superuser_may_do_anything(tmp_path: Path) -> None:
    async def scenario(s: Shards) -> None:
        pid = s.pid_on("events", 1)
        s.metadata.allow(
            acl(Operation.ALL, "*", principal="User:*"),
            acl(Operation.WRITE, "events", permission=Permission.DENY),
        )
        assert refused(await s.ask(produce(pid, b"a"), s.client(ALICE, 1)), ALICE)
        assert isinstance(await s.ask(produce(pid, b"b"), s.client(BOB, 1)), ProduceResponse)
        s.metadata.state.security.set_flagged_superusers([ALICE])
        assert isinstance(await s.ask(produce(pid, b"c"), s.client(ALICE, 1)), ProduceResponse)
        assert await s.values(pid) == [b"b", b"c"]

    run(tmp_path, scenario)


def test_a_client_without_a_principal_is_refused_and_internal_traffic_is_not_checked(
    tmp_path: Path,
) -> None:
    async def scenario(s: Shards) -> None:
        pid = s.pid_on("events", 0)
        got = await s.ask(produce(pid, b"anonymous"), s.client(None))
        assert refused(got, "has not logged in"), got
        got = await s.ask(produce(pid, b"internal"), s.internal(0))
        assert isinstance(got, ProduceResponse), got
        assert await s.values(pid) == [b"internal"]

    run(tmp_path, scenario)


def test_a_node_without_logins_checks_nothing(tmp_path: Path) -> None:
    async def scenario(s: Shards) -> None:
        pid = s.pid_on("events", 1)
        assert s.dispatchers[0].authorizer is None
        assert isinstance(await s.ask(produce(pid, b"a"), s.client(None)), ProduceResponse)
        assert await s.values(pid) == [b"a"]

    run(tmp_path, scenario, authenticated=False)


def test_metadata_and_topic_lists_show_only_what_the_principal_may_describe(
    tmp_path: Path,
) -> None:
    async def scenario(s: Shards) -> None:
        alice = s.client(ALICE)
        s.metadata.allow(acl(Operation.READ, "events"))
        listed = await s.ask(ListTopicsRequest(), alice)
        assert isinstance(listed, ListTopicsResponse)
        assert [t.name for t in listed.topics] == ["events"]
        meta = await s.ask(MetadataRequest(), alice)
        assert isinstance(meta, MetadataResponse)
        assert [t.name for t in meta.topics] == ["events"]
        assert [t.name for t in (await s.ask(MetadataRequest(), s.client(BOB))).topics] == []
        every = await s.ask(ListTopicsRequest(), s.internal(0))
        assert sorted(t.name for t in every.topics) == ["events", "other"]
        # A listing is kept per principal, and redone when the ACLs or the topics move:
        s.metadata.allow(acl(Operation.DESCRIBE, "fresh"))
        assert await _listed(s, alice) == ["events"]
        await s.metadata.create_topic("fresh", 1)
        assert await _listed(s, alice) == ["events", "fresh"]
        s.metadata.revoke(acl(Operation.READ, "events"))
        assert await _listed(s, alice) == ["fresh"]

    run(tmp_path, scenario)


async def _listed(s: Shards, ctx: RequestContext) -> list[str]:
    listed = await s.ask(ListTopicsRequest(), ctx)
    return sorted(t.name for t in listed.topics)


# -- the fast path -----------------------------------------------------------------------


def test_the_fast_path_serves_only_what_the_principal_may_and_leaves_the_rest(
    tmp_path: Path,
) -> None:
    async def scenario(s: Shards) -> None:
        pid = s.pid_on("events", 0)
        fast = s.fast_paths[0]
        answers: list[list[Buffer]] = []
        alice = s.client(ALICE)

        def frame(message: Message) -> Frame:
            return decode_frame(message.encode(3), FRAME_BYTES)

        await s.ask(produce(pid, b"opens the log"), s.internal(0))
        # Alice's own fetch proves the log is open and served fast once allowed.
        assert not fast.try_serve(frame(produce(pid, b"refused")), alice, answers.append)
        assert not fast.try_serve(frame(FetchRequest(pid, 0)), alice, answers.append)
        s.metadata.allow(acl(Operation.WRITE, "events"), acl(Operation.READ, "events"))
        assert fast.try_serve(frame(FetchRequest(pid, 0)), alice, answers.append)
        assert isinstance(answer(answers.pop()), FetchResponse)
        assert fast.try_serve(frame(produce(pid, b"fast")), alice, answers.append)
        while not answers:
            await asyncio.sleep(0)  # the flush future's callback answers
        assert isinstance(answer(answers.pop()), ProduceResponse)
        assert not fast.try_serve(frame(produce(pid, b"bob")), s.client(BOB), answers.append)
        assert not fast.try_serve(frame(FetchRequest(pid, 0)), s.client(BOB), answers.append)
        assert await s.values(pid) == [b"opens the log", b"fast"]

    run(tmp_path, scenario)


# -- forwarded frames --------------------------------------------------------------------


def test_a_forwarded_request_is_checked_by_its_owner_with_the_clients_principal(
    tmp_path: Path,
) -> None:
    async def scenario(s: Shards) -> None:
        pid = s.pid_on("events", 1)
        alice, bob = s.client(ALICE, 0), s.client(BOB, 0)  # on shard 0: forwarded to 1
        s.metadata.allow(acl(Operation.WRITE, "events"))
        assert isinstance(await s.ask(produce(pid, b"alice"), alice), ProduceResponse)
        assert refused(await s.ask(produce(pid, b"bob"), bob), BOB, "write")
        anonymous = await s.ask(produce(pid, b"anonymous"), s.client(None, 0))
        assert refused(anonymous, "has not logged in"), anonymous  # the owner refuses it
        assert s.dispatchers[0].metrics.forwarded_out == 3
        assert s.dispatchers[1].metrics.forwarded_in == 3
        assert await s.values(pid) == [b"alice"]

    run(tmp_path, scenario)


def test_a_topic_this_shard_has_not_applied_is_looked_up_before_it_is_judged(
    tmp_path: Path,
) -> None:
    async def scenario(s: Shards) -> None:
        got = await s.ask(produce(partition_id(9, 0), b"x"), s.client(ALICE))
        assert isinstance(got, ErrorResponse) and got.code is ErrorCode.UNKNOWN_TOPIC, got
        s.metadata.apply(s.metadata.state.plan_create("late", 1))  # topic id 3
        assert refused(await s.ask(produce(partition_id(3, 0), b"x"), s.client(ALICE)), "'late'")

    run(tmp_path, scenario)
