"""Atomic writes and group members are owned: only the principal that staged
an attempt stages more into it or commits it, only the principal that decided
a commit id commits it again, aborts it or reads its state, and only the
principal that joined a member heartbeats or commits as it; owners survive a
restart (staging files, decision logs and the positions log replayed).
Driven through real dispatchers (`authz_harness`), with principals on the
request context."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from laminar.groups.errors import GroupError
from laminar.groups.frames import (
    CommitAnswerFrame,
    CommitFrame,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatAnswerFrame,
    HeartbeatFrame,
    ListAnswerFrame,
    ListFrame,
)
from laminar.groups.messages import JOIN, LEAVE, LEAVE_STATIC, CommitRequest, HeartbeatRequest
from laminar.security.acls import Operation, ResourceType
from laminar.security.ownership import decided_id
from laminar.shards.handlers import RequestContext
from laminar.wire import ErrorCode
from laminar.wire.writes import (
    COORDINATOR_BUCKETS,
    AbortWriteRequest,
    CommitWriteRequest,
    CommitWriteResponse,
    StagedPart,
    StageRequest,
    StageResponse,
    WriteState,
    WriteStateResponse,
    WriteStatusRequest,
)
from laminar.writes.frames import AttemptKey
from tests.shards.authz_harness import ALICE, BOB, Metadata, Shards, acl, refused
from tests.support import wait_until_async

WRITE = 0xA11CE
COMMIT = 0xC0FFEE


async def setup(root: Path, metadata: Metadata | None = None) -> Shards:
    shards = Shards(root, metadata=metadata)
    await shards.start()
    if shards.metadata.state.by_name("events") is None:
        shards.metadata.apply(shards.metadata.state.plan_create("events", 4))
    shards.metadata.allow(
        acl(Operation.WRITE, "events"), acl(Operation.WRITE, "events", principal=BOB)
    )
    return shards


def run(tmp_path: Path, scenario: Callable[[Shards], Awaitable[None]]) -> None:
    async def main() -> None:
        shards = await setup(tmp_path)
        try:
            await scenario(shards)
        finally:
            await shards.close()

    asyncio.run(main())


def stage(pid: int, sequence: int, value: bytes, task: int = 0) -> StageRequest:
    return StageRequest(pid, WRITE, task, 1, sequence, (b"\x00" + value,))


def part(pid: int, batches: int, task: int = 0) -> StagedPart:
    return StagedPart(pid, WRITE, task, 1, batches, batches)


def test_only_the_stager_stages_more_or_commits_and_only_the_decider_sees_the_outcome(
    tmp_path: Path,
) -> None:
    async def scenario(s: Shards) -> None:
        pid = s.pid_on("events", 1)
        alice, bob = s.client(ALICE), s.client(BOB)
        assert isinstance(await s.ask(stage(pid, 0, b"a0"), alice), StageResponse)
        assert refused(await s.ask(stage(pid, 1, b"b1"), bob), "another principal")
        got = await s.ask(CommitWriteRequest(COMMIT + 1, (part(pid, 1),)), bob)
        assert refused(got, "another principal"), got
        assert await s.values(pid) == []
        assert isinstance(await s.ask(stage(pid, 1, b"a1"), alice), StageResponse)
        got = await s.ask(CommitWriteRequest(COMMIT, (part(pid, 2),)), alice)
        assert isinstance(got, CommitWriteResponse) and got.first, got
        assert await s.values(pid) == [b"a0", b"a1"]
        # Bob's ids are his own: Alice's commit is nothing he can see or undo.
        status = await s.ask(WriteStatusRequest(COMMIT), bob)
        assert isinstance(status, WriteStateResponse) and status.state == WriteState.UNKNOWN
        assert (await s.ask(AbortWriteRequest(COMMIT), bob)).state == WriteState.ABORTED
        got = await s.ask(CommitWriteRequest(COMMIT, (part(pid, 2),)), bob)
        assert refused(got, "another principal"), got  # the parts are Alice's
        status = await s.ask(WriteStatusRequest(COMMIT), alice)
        assert isinstance(status, WriteStateResponse) and status.state == WriteState.DONE
        assert await s.values(pid) == [b"a0", b"a1"]


def test_another_principal_cannot_take_a_commit_id_first(tmp_path: Path) -> None:
    """Bob knows the id Alice will commit under (a Spark stream's ids are
    predictable) and aborts it, finally: his abort binds his own commits of
    that id alone; Alice's commit of it still decides, with her records."""

    async def scenario(s: Shards) -> None:
        pid = s.pid_on("events", 1)
        alice, bob = s.client(ALICE), s.client(BOB)
        assert (await s.ask(AbortWriteRequest(COMMIT, True), bob)).state == WriteState.ABORTED
        assert isinstance(await s.ask(stage(pid, 0, b"bob's", task=1), bob), StageResponse)
        got = await s.ask(CommitWriteRequest(COMMIT, (part(pid, 1, task=1),)), bob)
        assert got.code == ErrorCode.WRITE_ABORTED, got  # his own abort binds him alone
        assert f"write {COMMIT:#x} was aborted" in got.message, "named as Bob sent it"
        assert isinstance(await s.ask(stage(pid, 0, b"alice's"), alice), StageResponse)
        got = await s.ask(CommitWriteRequest(COMMIT, (part(pid, 1),)), alice)
        assert isinstance(got, CommitWriteResponse) and got.first, got
        assert await s.values(pid) == [b"alice's"]
        for who, state in ((alice, WriteState.DONE), (bob, WriteState.ABORTED)):
            answer = await s.ask(WriteStatusRequest(COMMIT), who)
            assert isinstance(answer, WriteStateResponse) and answer.state == state

    run(tmp_path, scenario)


def test_an_abort_drops_only_the_aborters_own_staged_data(tmp_path: Path) -> None:
    async def scenario(s: Shards) -> None:
        pid = s.pid_on("events", 0)
        alice, bob = s.client(ALICE), s.client(BOB)
        assert isinstance(await s.ask(stage(pid, 0, b"kept"), alice), StageResponse)
        assert isinstance(await s.ask(stage(pid, 0, b"bob's", task=1), bob), StageResponse)
        parts = (part(pid, 1), part(pid, 1, task=1))
        dropped = await s.ask(AbortWriteRequest(COMMIT + 3, False, parts), bob)
        assert dropped.state == WriteState.UNKNOWN
        area = s.writes[s.owner(pid)].area
        # The drop runs in the background: Bob's own attempt going is its witness.
        await wait_until_async(
            lambda: area.attempt(pid, AttemptKey(WRITE, 1, 1)) is None, "bob's attempt dropped"
        )
        assert area.attempt(pid, AttemptKey(WRITE, 0, 1)) is not None
        got = await s.ask(CommitWriteRequest(COMMIT, (part(pid, 1),)), alice)
        assert isinstance(got, CommitWriteResponse), got
        assert await s.values(pid) == [b"kept"]

    run(tmp_path, scenario)


def test_owners_survive_a_restart(tmp_path: Path) -> None:
    async def before(s: Shards) -> None:
        alice = s.client(ALICE)
        assert isinstance(await s.ask(stage(s.pid_on("events", 0), 0, b"x"), alice), StageResponse)
        assert (await s.ask(AbortWriteRequest(COMMIT + 4), alice)).state == WriteState.ABORTED

    async def main() -> None:
        shards = await setup(tmp_path)
        try:
            await before(shards)
        finally:
            await shards.close()
        s = await setup(tmp_path, shards.metadata)  # staging files and decision logs replayed
        try:
            pid = s.pid_on("events", 0)
            alice, bob = s.client(ALICE), s.client(BOB)
            assert (await s.ask(WriteStatusRequest(COMMIT + 4), bob)).state == "unknown"
            assert (await s.ask(WriteStatusRequest(COMMIT + 4), alice)).state == "aborted"
            got = await s.ask(CommitWriteRequest(COMMIT + 5, (part(pid, 1),)), bob)
            assert refused(got, "another principal"), got
            got = await s.ask(CommitWriteRequest(COMMIT, (part(pid, 1),)), alice)
            assert isinstance(got, CommitWriteResponse), got
            assert await s.values(pid) == [b"x"]
        finally:
            await s.close()

    asyncio.run(main())


def test_the_nodes_own_requests_are_not_refused(tmp_path: Path) -> None:
    async def scenario(s: Shards) -> None:
        pid = s.pid_on("events", 1)
        alice = s.client(ALICE)
        assert isinstance(await s.ask(stage(pid, 0, b"a"), alice), StageResponse)
        got = await s.ask(CommitWriteRequest(COMMIT, (part(pid, 1),)), alice)
        assert isinstance(got, CommitWriteResponse), got
        decided = decided_id(COMMIT, alice, COORDINATOR_BUCKETS)  # what a participant knows
        status = await s.ask(WriteStatusRequest(decided), s.internal(0))  # an expiry's question
        assert isinstance(status, WriteStateResponse) and status.state == WriteState.DONE

    run(tmp_path, scenario)


# -- consumer group members ------------------------------------------------------------


def allow_group(s: Shards) -> None:
    for who in (ALICE, BOB):
        s.metadata.allow(
            acl(Operation.READ, "g", ResourceType.GROUP, principal=who),
            acl(Operation.READ, "events", principal=who),
        )


async def coordinator(s: Shards, ctx: RequestContext, group: str = "g") -> int:
    found = await s.ask(FindCoordinatorRequest(group), ctx)
    assert isinstance(found, FindCoordinatorResponse), found
    return found.partition_id


def beat(
    member: str | None, epoch: int, instance: str | None = None, group: str = "g"
) -> HeartbeatRequest:
    return HeartbeatRequest(
        group, member, epoch, 0, instance, ("events",), frozenset(), 10.0, may_hold=False
    )


async def join(
    s: Shards, ctx: RequestContext, member: str, instance: str | None = None, group: str = "g"
) -> int:
    """Join `group` as `member`; the epoch it got (once it holds its partitions)."""
    pid = await coordinator(s, ctx, group)
    got = await s.ask(HeartbeatFrame(pid, beat(member, JOIN, instance, group)), ctx)
    assert isinstance(got, HeartbeatAnswerFrame) and got.body.error is GroupError.NONE, got
    answer = got.body
    while not answer.assignment or answer.epoch == 0:
        got = await s.ask(HeartbeatFrame(pid, beat(member, answer.epoch, instance, group)), ctx)
        answer = got.body
    return answer.epoch


def test_a_member_heartbeats_and_commits_only_as_the_principal_that_joined(
    tmp_path: Path,
) -> None:
    async def scenario(s: Shards) -> None:
        allow_group(s)
        alice, bob = s.client(ALICE), s.client(BOB)
        epoch = await join(s, alice, "m-alice")
        pid = await coordinator(s, bob)
        got = await s.ask(HeartbeatFrame(pid, beat("m-alice", epoch)), bob)
        assert refused(got, "a member of group 'g'", BOB), got
        positions = {("events", 0): 0}
        got = await s.ask(CommitFrame(pid, CommitRequest("g", "m-alice", epoch, positions)), bob)
        assert refused(got, "a member of group 'g'"), got
        got = await s.ask(HeartbeatFrame(pid, beat("m-alice", LEAVE)), bob)
        assert refused(got), got
        got = await s.ask(CommitFrame(pid, CommitRequest("g", "m-alice", epoch, positions)), alice)
        assert isinstance(got, CommitAnswerFrame) and set(got.body.results.values()) == {
            GroupError.NONE
        }, got

    run(tmp_path, scenario)


def test_a_static_members_instance_is_not_taken_over_by_another_principal(
    tmp_path: Path,
) -> None:
    async def scenario(s: Shards) -> None:
        allow_group(s)
        alice, bob = s.client(ALICE), s.client(BOB)
        await join(s, alice, "m-alice", instance="i1")
        pid = await coordinator(s, alice)
        # (The leave's answer is read raw: its epoch, -2, fails the answer decoder.)
        left = await s.ask_frame(HeartbeatFrame(pid, beat("m-alice", LEAVE_STATIC, "i1")), alice)
        assert not left.is_error and left.header["error"] == 0, left
        got = await s.ask(HeartbeatFrame(pid, beat("m-bob", JOIN, "i1")), bob)
        assert refused(got, BOB), got
        await join(s, alice, "m-alice-2", instance="i1")  # Alice's own restart takes it back

    run(tmp_path, scenario)


def test_a_members_owner_survives_a_restart(tmp_path: Path) -> None:
    async def main() -> None:
        s = await setup(tmp_path)
        try:
            allow_group(s)
            epoch = await join(s, s.client(ALICE), "m-alice")
        finally:
            await s.close()
        # The coordinator core is rebuilt from the positions log.
        s = await setup(tmp_path, s.metadata)
        try:
            pid = await coordinator(s, s.client(ALICE))
            got = await s.ask(HeartbeatFrame(pid, beat("m-alice", epoch)), s.client(BOB))
            assert refused(got, BOB), got
            got = await s.ask(HeartbeatFrame(pid, beat("m-alice", epoch)), s.client(ALICE))
            assert isinstance(got, HeartbeatAnswerFrame), got
            assert got.body.error is GroupError.NONE
        finally:
            await s.close()

    asyncio.run(main())


def test_a_group_list_shows_only_the_groups_the_principal_may_describe(tmp_path: Path) -> None:
    async def scenario(s: Shards) -> None:
        allow_group(s)
        s.metadata.allow(
            acl(Operation.READ, "h", ResourceType.GROUP, principal=BOB),
            acl(Operation.DESCRIBE, "kafka-cluster", ResourceType.CLUSTER, principal="User:ops"),
        )
        await join(s, s.client(ALICE), "m-alice")
        await join(s, s.client(BOB), "m-bob", group="h")
        topic = s.metadata.state.by_name("__consumer_offsets")
        assert topic is not None

        async def listed(principal: str) -> set[str]:
            names = set()
            for idx in range(topic.partitions):
                frame = ListFrame((topic.topic_id << 32) | idx, None)
                got = await s.ask(frame, s.client(principal))
                assert isinstance(got, ListAnswerFrame), got
                names |= {view.group for view in got.body.groups}
            return names

        assert await listed(ALICE) == {"g"}  # READ on g implies describing it
        assert await listed(BOB) == {"g", "h"}
        assert await listed("User:ops") == {"g", "h"}  # DESCRIBE on the cluster: every group
        assert await listed("User:nobody") == set()

    run(tmp_path, scenario)
