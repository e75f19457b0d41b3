"""Kafka's classic group protocol on laminar's group coordinator.

Kafka clients (librdkafka, kafka-python, aiokafka) speak the classic protocol:
JoinGroup, SyncGroup, Heartbeat, LeaveGroup, with the assignment computed by
a member. laminar's coordinator (`laminar.groups`) assigns on the server,
incrementally, and fences by member epoch. The two meet as Kafka 4 lets
classic members into a consumer group (KIP-848):

- JoinGroup is a heartbeat of the core: the member's subscription (its
  topics; a cooperative member's owned partitions, an eager member owns none:
  it revoked them before rejoining) goes in, the core's assignment comes out.
  The generation is the member's epoch. Every member is a follower (the
  JoinGroup answer names no member as leader, so no client runs its
  assignor), and SyncGroup hands it the core's assignment for it.
- Heartbeat is a heartbeat of the core with what the member was given. When
  the core's answer differs (partitions to revoke, or more to take, or a new
  epoch), the member is told REBALANCE_IN_PROGRESS and rejoins: only the
  members whose partitions move rejoin; the others never stop.
- OffsetCommit is the core's commit at the member's epoch (fenced the same
  way as laminar's own members); a commit outside the group (generation -1,
  as `assign()` users send) is the core's reset, allowed only while the group
  has no members, as Kafka allows it only then. OffsetFetch reads the same
  positions: a group's positions are the same whichever door commits them.

What a classic member was last given lives in this shard's memory
(`ClassicMembers`, bounded): a member this shard does not know (a coordinator
moved, or an entry evicted) is sent to rejoin, which loses nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from laminar.groups.errors import GroupError
from laminar.groups.frames import (
    CommitAnswerFrame,
    CommitFrame,
    DescribeAnswerFrame,
    DescribeFrame,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatAnswerFrame,
    HeartbeatFrame,
    ListAnswerFrame,
    ListFrame,
    PositionsAnswerFrame,
    PositionsFrame,
    PositionsQuery,
    PositionsReset,
    ResetAnswerFrame,
    ResetFrame,
)
from laminar.groups.messages import (
    JOIN,
    LEAVE,
    LEAVE_STATIC,
    CommitRequest,
    GroupView,
    HeartbeatAnswer,
    HeartbeatRequest,
    TopicPartition,
)
from laminar.kafka import messages as m
from laminar.kafka.classic import (
    assignment_bytes,
    decode_subscription,
    protocol_for,
)
from laminar.kafka.errors import ErrorCode as Kafka
from laminar.kafka.errors import KafkaError
from laminar.replication.routes import NodeRoutes, NodeUnreachable
from laminar.shards.handlers import RequestContext
from laminar.wire import Frame, Message

CLASSIC_MEMBERS_MAX: Final = 1 << 16
"""Classic members one shard remembers (least recently heard evicted first)."""
SESSION_S_MIN: Final = 1.0
SESSION_S_MAX: Final = 300.0
NO_LEADER: Final = "laminar-coordinator"
"""The JoinGroup answer's leader: no member's id, so every member is a follower."""
PROTOCOL_TYPE: Final = "consumer"

_GROUP_ERRORS: Final = {
    GroupError.NONE: Kafka.NONE,
    GroupError.FENCED: Kafka.ILLEGAL_GENERATION,
    GroupError.STALE_EPOCH: Kafka.REBALANCE_IN_PROGRESS,
    GroupError.UNKNOWN_MEMBER: Kafka.UNKNOWN_MEMBER_ID,
    GroupError.INSTANCE_IN_USE: Kafka.FENCED_INSTANCE_ID,
    GroupError.POSITION_BEHIND: Kafka.NONE,
    GroupError.POSITION_BEYOND_END: Kafka.OFFSET_OUT_OF_RANGE,
    GroupError.GROUP_NOT_EMPTY: Kafka.NON_EMPTY_GROUP,
    GroupError.UNKNOWN_GROUP: Kafka.GROUP_ID_NOT_FOUND,
    GroupError.LIMIT: Kafka.GROUP_MAX_SIZE_REACHED,
    GroupError.INVALID: Kafka.INVALID_REQUEST,
    GroupError.UNKNOWN_PARTITION: Kafka.UNKNOWN_TOPIC_OR_PARTITION,
}
"""POSITION_BEHIND answers NONE: a Kafka client commits what it consumed, and
its commits of a position it already committed (or one the group passed
while it was away) are the norm, not an error it can act on. Nothing moves
back: the committed position stays where it is."""

_STATES: Final = {"empty": "Empty", "stable": "Stable", "reconciling": "PreparingRebalance"}

Laminar = Callable[[Message, RequestContext], Awaitable[Frame]]


def group_error(error: GroupError) -> Kafka:
    return _GROUP_ERRORS.get(error, Kafka.UNKNOWN_SERVER_ERROR)


@dataclass(slots=True)
class ClassicMember:
    """What the door told one classic member, and what the core says now."""

    pid: int
    """The positions partition holding its group."""
    epoch: int
    revision: int
    assignment: frozenset[TopicPartition]
    """The core's latest answer: what the member should hold."""
    topics: tuple[str, ...]
    session_s: float
    instance_id: str | None
    protocol: str
    given: frozenset[TopicPartition] = field(default_factory=frozenset)
    """What the member holds: the assignment its last SyncGroup handed it."""


class ClassicMembers:
    """The classic members this shard coordinates, bounded (see the module docstring)."""

    def __init__(self, limit: int = CLASSIC_MEMBERS_MAX) -> None:
        self._limit = limit
        self._members: OrderedDict[tuple[str, str], ClassicMember] = OrderedDict()

    def get(self, group: str, member_id: str) -> ClassicMember | None:
        member = self._members.get((group, member_id))
        if member is not None:
            self._members.move_to_end((group, member_id))
        return member

    def put(self, group: str, member_id: str, member: ClassicMember) -> None:
        self._members[(group, member_id)] = member
        self._members.move_to_end((group, member_id))
        while len(self._members) > self._limit:
            self._members.popitem(last=False)

    def drop(self, group: str, member_id: str) -> None:
        self._members.pop((group, member_id), None)


class KafkaGroups:
    """The group APIs of the Kafka door (see the module docstring). Requests
    reach the coordinator as laminar group ops through the shard's dispatcher,
    which takes them to the shard that holds the group's positions partition
    (a coordinator elsewhere answers NOT_COORDINATOR: Kafka clients then ask
    FindCoordinator again)."""

    def __init__(self, laminar: Laminar, routes: NodeRoutes) -> None:
        self._laminar = laminar
        self._routes = routes
        self.members = ClassicMembers()

    async def coordinator(self, group: str, ctx: RequestContext) -> int:
        """The positions partition that holds `group`. The positions topic is
        made on the first ask, by the metadata leader: the request follows
        NOT_LEADER answers there."""
        try:
            answer = await self._routes.to_leader(FindCoordinatorRequest(group))
        except NodeUnreachable as exc:
            raise KafkaError(Kafka.COORDINATOR_NOT_AVAILABLE, str(exc)) from None
        return FindCoordinatorResponse.from_frame(answer).partition_id

    # -- membership ---------------------------------------------------------------

    async def join_group(self, req: m.JoinGroupRequest, ctx: RequestContext) -> m.JoinGroupResponse:
        if req.protocol_type != PROTOCOL_TYPE or not req.protocols:
            return m.JoinGroupResponse(error_code=Kafka.INCONSISTENT_GROUP_PROTOCOL)
        protocol, metadata, cooperative = protocol_for(req.protocols)
        topics, owned = decode_subscription(metadata)
        pid = await self.coordinator(req.group_id, ctx)
        known = self.members.get(req.group_id, req.member_id) if req.member_id else None
        session_s = min(max(req.session_timeout_ms / 1000, SESSION_S_MIN), SESSION_S_MAX)
        request = HeartbeatRequest(
            group=req.group_id,
            member_id=req.member_id or None,
            member_epoch=known.epoch if known is not None else JOIN,
            revision=known.revision if known is not None else 0,
            instance_id=req.group_instance_id,
            topics=tuple(sorted(set(topics))),
            owned=owned if cooperative else frozenset(),
            session_timeout_s=session_s,
            may_hold=False,
        )
        answer = await self._heartbeat(pid, request, ctx)
        if answer.error is not GroupError.NONE or answer.member_id is None:
            return m.JoinGroupResponse(
                error_code=group_error(answer.error), member_id=req.member_id
            )
        self.members.put(
            req.group_id,
            answer.member_id,
            ClassicMember(
                pid=pid,
                epoch=answer.epoch,
                revision=answer.revision,
                assignment=answer.assignment,
                topics=request.topics,
                session_s=session_s,
                instance_id=req.group_instance_id,
                protocol=protocol,
                given=owned if cooperative else frozenset(),
            ),
        )
        return m.JoinGroupResponse(
            generation_id=answer.epoch,
            protocol_type=PROTOCOL_TYPE,
            protocol_name=protocol,
            leader=NO_LEADER,
            member_id=answer.member_id,
            members=[],
        )

    async def sync_group(self, req: m.SyncGroupRequest, ctx: RequestContext) -> m.SyncGroupResponse:
        member = self.members.get(req.group_id, req.member_id)
        if member is None:
            return m.SyncGroupResponse(error_code=Kafka.UNKNOWN_MEMBER_ID, assignment=b"")
        if req.generation_id != member.epoch:
            return m.SyncGroupResponse(error_code=Kafka.REBALANCE_IN_PROGRESS, assignment=b"")
        member.given = member.assignment
        return m.SyncGroupResponse(
            protocol_type=PROTOCOL_TYPE,
            protocol_name=member.protocol,
            assignment=assignment_bytes(member.given),
        )

    async def heartbeat(self, req: m.HeartbeatRequest, ctx: RequestContext) -> m.HeartbeatResponse:
        member = self.members.get(req.group_id, req.member_id)
        if member is None:
            return m.HeartbeatResponse(error_code=Kafka.UNKNOWN_MEMBER_ID)
        if req.generation_id != member.epoch:
            return m.HeartbeatResponse(error_code=Kafka.ILLEGAL_GENERATION)
        answer = await self._heartbeat(
            member.pid,
            HeartbeatRequest(
                group=req.group_id,
                member_id=req.member_id,
                member_epoch=member.epoch,
                revision=member.revision,
                instance_id=member.instance_id,
                topics=member.topics,
                owned=member.given,
                session_timeout_s=member.session_s,
                may_hold=False,
            ),
            ctx,
        )
        if answer.error is not GroupError.NONE:
            if answer.error is GroupError.UNKNOWN_MEMBER:
                self.members.drop(req.group_id, req.member_id)
            return m.HeartbeatResponse(error_code=group_error(answer.error))
        member.revision = answer.revision
        member.assignment = answer.assignment
        if answer.epoch != member.epoch or answer.assignment != member.given:
            return m.HeartbeatResponse(error_code=Kafka.REBALANCE_IN_PROGRESS)
        return m.HeartbeatResponse()

    async def leave_group(
        self, req: m.LeaveGroupRequest, ctx: RequestContext
    ) -> m.LeaveGroupResponse:
        leaving = [(x.member_id, x.group_instance_id) for x in req.members] or [
            (req.member_id, None)
        ]
        pid = await self.coordinator(req.group_id, ctx)
        answers = []
        for member_id, instance_id in leaving:
            member = self.members.get(req.group_id, member_id)
            self.members.drop(req.group_id, member_id)
            answer = await self._heartbeat(
                pid,
                HeartbeatRequest(
                    group=req.group_id,
                    member_id=member_id,
                    member_epoch=LEAVE_STATIC if instance_id is not None else LEAVE,
                    revision=member.revision if member is not None else 0,
                    instance_id=instance_id,
                    topics=(),
                    owned=frozenset(),
                    session_timeout_s=member.session_s if member is not None else SESSION_S_MIN,
                ),
                ctx,
            )
            answers.append(
                m.LeaveGroupResponse.MemberResponse(
                    member_id=member_id,
                    group_instance_id=instance_id,
                    error_code=group_error(answer.error),
                )
            )
        return m.LeaveGroupResponse(members=answers)

    async def _heartbeat(
        self, pid: int, request: HeartbeatRequest, ctx: RequestContext
    ) -> HeartbeatAnswer:
        frame = await self._laminar(HeartbeatFrame(pid, request), ctx)
        answer: HeartbeatAnswer = HeartbeatAnswerFrame.from_frame(frame).body
        return answer

    # -- positions ------------------------------------------------------------------

    async def offset_commit(
        self, req: m.OffsetCommitRequest, ctx: RequestContext
    ) -> m.OffsetCommitResponse:
        positions = {
            (t.name, p.partition_index): p.committed_offset
            for t in req.topics
            for p in t.partitions
        }
        pid = await self.coordinator(req.group_id, ctx)
        if req.generation_id_or_member_epoch < 0:  # outside the group: only while empty
            frame = await self._laminar(
                ResetFrame(pid, PositionsReset(req.group_id, positions)), ctx
            )
            error = ResetAnswerFrame.from_frame(frame).body.error
            results = dict.fromkeys(positions, error)
        else:
            frame = await self._laminar(
                CommitFrame(
                    pid,
                    CommitRequest(
                        req.group_id, req.member_id, req.generation_id_or_member_epoch, positions
                    ),
                ),
                ctx,
            )
            answer = CommitAnswerFrame.from_frame(frame).body
            results = {
                tp: answer.error or answer.results.get(tp, GroupError.NONE) for tp in positions
            }
        return commit_answer(req.topics, lambda tp: group_error(results[tp]))

    async def committed(
        self, group: str, wanted: list[tuple[str, list[int]]] | None, ctx: RequestContext
    ) -> tuple[Kafka, list[tuple[str, list[tuple[int, int]]]]]:
        """A group's committed positions, per topic: (partition, offset or -1)."""
        pid = await self.coordinator(group, ctx)
        partitions = None if wanted is None else frozenset((t, p) for t, ps in wanted for p in ps)
        frame = await self._laminar(PositionsFrame(pid, PositionsQuery(group, partitions)), ctx)
        answer = PositionsAnswerFrame.from_frame(frame).body
        if answer.error not in (GroupError.NONE, GroupError.UNKNOWN_GROUP):
            return group_error(answer.error), []
        if wanted is None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(answer.positions):
                by_topic.setdefault(topic, []).append(partition)
            wanted = list(by_topic.items())
        out = []
        for topic, parts in wanted:
            out.append(
                (
                    topic,
                    [
                        (
                            p,
                            answer.positions[(topic, p)].index
                            if (topic, p) in answer.positions
                            else -1,
                        )
                        for p in parts
                    ],
                )
            )
        return Kafka.NONE, out

    # -- describing -------------------------------------------------------------------

    async def describe(self, group: str, ctx: RequestContext) -> GroupView | None:
        pid = await self.coordinator(group, ctx)
        frame = await self._laminar(DescribeFrame(pid, group), ctx)
        view: GroupView | None = DescribeAnswerFrame.from_frame(frame).body.group
        return view

    async def list_groups(self, pids: list[int], ctx: RequestContext) -> list[GroupView]:
        """The groups of the positions partitions `pids` (those this shard leads)."""
        out: list[GroupView] = []
        for pid in pids:
            try:
                frame = await self._laminar(ListFrame(pid, None), ctx)
            except KafkaError:
                continue  # not the leader here: another broker lists them
            out.extend(ListAnswerFrame.from_frame(frame).body.groups)
        return out


def commit_answer(
    topics: list[Any], error_of: Callable[[tuple[str, int]], int]
) -> m.OffsetCommitResponse:
    """The OffsetCommitResponse for `topics` (those of a request), each
    partition's error code `error_of((topic, partition))`."""
    return m.OffsetCommitResponse(
        topics=[
            m.OffsetCommitResponse.OffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    m.OffsetCommitResponse.OffsetCommitResponseTopic.OffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=error_of((t.name, p.partition_index)),
                    )
                    for p in t.partitions
                ],
            )
            for t in topics
        ]
    )


def describe_state(view: GroupView | None) -> str:
    """Kafka's name for a group's state."""
    if view is None:
        return "Dead"
    return _STATES.get(view.state, "PreparingRebalance")
