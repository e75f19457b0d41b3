"""The group ops on the wire (ops 19-26): frames that carry the cores' messages.

FIND_COORDINATOR goes to any node (the router takes it to the metadata owner
shard, which makes the positions topic on a group's first use). Every other
group op names, in its frame prefix, the positions partition that holds the
group (`FindCoordinatorResponse.partition_id`), so it is routed like a produce:
to the shard owning that partition, and in a cluster served only by the
partition's leader (NOT_LEADER names it). A refusal of the group core (FENCED,
UNKNOWN_MEMBER, ...) is an answer, with its `GroupError` code in the header;
an `ErrorResponse` means the request never reached a coordinator (not the
leader, not ready, malformed).

Each frame's header is the message's fields as msgpack: partitions as
`[topic, partition]` pairs, positions as `[topic, partition, index]`, times in
milliseconds. Decoding checks every field (`laminar.wire.fields`); the core
checks the limits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from laminar.groups.errors import GroupError
from laminar.groups.messages import (
    AdminAnswer,
    CommitAnswer,
    CommitRequest,
    DescribeAnswer,
    GroupView,
    HeartbeatAnswer,
    HeartbeatRequest,
    ListAnswer,
    MemberView,
    Position,
    PositionsAnswer,
    TopicPartition,
)
from laminar.wire import TopicInfo
from laminar.wire import fields as f
from laminar.wire.codec import Frame
from laminar.wire.errors import InvalidMessage
from laminar.wire.messages import REQUEST_TYPES, RESPONSE_TYPES, Message
from laminar.wire.ops import Flags, Op

EPOCH_MIN = -2
"""Heartbeat epochs below 0 are the leaves (-1, and -2 for a static member)."""


# --- field codecs ---------------------------------------------------------------


def _int(h: dict[str, Any], key: str, low: int = 0, high: int = f.U64 - 1) -> int:
    v = h.get(key)
    if type(v) is int and low <= v <= high:
        return v
    raise InvalidMessage(f"header field {key!r} must be an int in {low}..{high}, got {v!r}"[:160])


def _list(v: object, what: str) -> list[Any]:
    if type(v) is list:
        return v
    raise InvalidMessage(f"{what} must be a list, got {type(v).__name__}")


def _tuple(v: object, n: int, what: str) -> list[Any]:
    items = _list(v, what)
    if len(items) != n:
        raise InvalidMessage(f"each {what} has {n} items, got {len(items)}")
    return items


def _pair(v: object, what: str) -> tuple[Any, Any]:
    first, second = _tuple(v, 2, what)
    return first, second


def _topic_partition(topic: object, partition: object, what: str) -> TopicPartition:
    if type(topic) is str and type(partition) is int and 0 <= partition < f.U32:
        return topic, partition
    raise InvalidMessage(f"{what} must be [topic name, partition number]")


def _encode_parts(parts: Iterable[TopicPartition]) -> list[list[Any]]:
    return [[t, p] for t, p in sorted(parts)]


def _parts(h: dict[str, Any], key: str) -> frozenset[TopicPartition]:
    v = h.get(key)
    if v is None:
        return frozenset()
    return frozenset(_topic_partition(*_pair(x, key), key) for x in _list(v, key))


def _error(h: dict[str, Any]) -> GroupError:
    code = _int(h, "error", 0, 255)
    try:
        return GroupError(code)
    except ValueError:
        raise InvalidMessage(f"unknown group error code {code}") from None


def _encode_position(tp: TopicPartition, p: Position) -> list[Any]:
    return [tp[0], tp[1], p.index, p.member_id, p.member_epoch, p.commit_ms]


def _positions(h: dict[str, Any], key: str) -> dict[TopicPartition, Position]:
    out: dict[TopicPartition, Position] = {}
    for item in _list(h.get(key, []), key):
        topic, partition, index, member, epoch, ms = _tuple(item, 6, key)
        entry = {"index": index, "member_id": member, "epoch": epoch, "ms": ms}
        out[_topic_partition(topic, partition, key)] = Position(
            _int(entry, "index"),
            f.string(entry, "member_id"),
            _int(entry, "epoch", 0, f.U32 - 1),
            _int(entry, "ms"),
        )
    return out


def _encode_view(view: GroupView) -> dict[str, Any]:
    return {
        "group": view.group,
        "epoch": view.epoch,
        "assignor": view.assignor,
        "members": [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "epoch": m.epoch,
                "topics": list(m.topics),
                "assignment": _encode_parts(m.assignment),
                "revoking": _encode_parts(m.revoking),
                "pending": _encode_parts(m.pending),
                "away": m.away,
                "paused": _encode_parts(m.paused),
            }
            for m in view.members
        ],
        "positions": [_encode_position(tp, p) for tp, p in sorted(view.positions.items())],
    }


def _member_view(h: dict[str, Any]) -> MemberView:
    return MemberView(
        member_id=f.string(h, "member_id"),
        instance_id=f.opt_string(h, "instance_id"),
        epoch=_int(h, "epoch", 0, f.U32 - 1),
        topics=f.strings(h, "topics"),
        assignment=_parts(h, "assignment"),
        revoking=_parts(h, "revoking"),
        pending=_parts(h, "pending"),
        away=f.flag(h, "away"),
        paused=_parts(h, "paused"),
    )


def _view(h: dict[str, Any]) -> GroupView:
    return GroupView(
        group=f.string(h, "group"),
        epoch=_int(h, "epoch", 0, f.U32 - 1),
        assignor=f.string(h, "assignor"),
        members=f.items(h, "members", _member_view),
        positions=_positions(h, "positions"),
    )


# --- the frames -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest(Message):
    """Where is `group` served? Makes the positions topic if it is not there yet.
    Header: {group}."""

    OP: ClassVar[int] = Op.FIND_COORDINATOR

    group: str

    def _header(self) -> dict[str, Any]:
        return {"group": self.group}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        return cls(f.string(frame.header, "group"))


@dataclass(frozen=True, slots=True)
class FindCoordinatorResponse(Message):
    """`group` lives in partition `partition` of `topic` (the positions topic):
    its coordinator is that partition's leader.
    Header: {group, topic: {name, topic_id, partitions, ...}, partition}."""

    OP: ClassVar[int] = Op.FIND_COORDINATOR
    FLAGS: ClassVar[int] = Flags.RESPONSE

    group: str
    topic: TopicInfo
    partition: int

    @property
    def partition_id(self) -> int:
        return (self.topic.topic_id << 32) | self.partition

    def _header(self) -> dict[str, Any]:
        return {"group": self.group, "topic": self.topic.to_wire(), "partition": self.partition}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        topic = TopicInfo.from_wire(f.mapping(h.get("topic"), "topic"))
        partition = f.uint(h, "partition", f.U32)
        if partition >= topic.partitions:
            raise InvalidMessage(
                f"partition {partition} of a topic with {topic.partitions} partitions"
            )
        return cls(f.string(h, "group"), topic, partition)


@dataclass(frozen=True, slots=True)
class GroupMessage(Message):
    """A group op to or from the coordinator of the positions partition
    `partition_id`: `body` is the core's message (see the module docstring)."""

    ENCODE: ClassVar[Any]
    """staticmethod: the body as a header."""
    DECODE: ClassVar[Any]
    """staticmethod: a checked header as the body (`InvalidMessage` otherwise)."""

    partition_id: int
    body: Any

    def _partition(self) -> int:
        return self.partition_id

    def _header(self) -> dict[str, Any]:
        header: dict[str, Any] = type(self).ENCODE(self.body)
        return header

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        return cls(frame.partition_id, cls.DECODE(frame.header))


def _encode_heartbeat(r: HeartbeatRequest) -> dict[str, Any]:
    return {
        "group": r.group,
        "member_id": r.member_id,
        "epoch": r.member_epoch,
        "revision": r.revision,
        "instance_id": r.instance_id,
        "topics": list(r.topics),
        "owned": _encode_parts(r.owned),
        "session_ms": round(r.session_timeout_s * 1000),
        "assignor": r.assignor,
        "paused": _encode_parts(r.paused),
        **({} if r.may_hold else {"may_hold": False}),
    }


def _heartbeat(h: dict[str, Any]) -> HeartbeatRequest:
    return HeartbeatRequest(
        group=f.string(h, "group"),
        member_id=f.opt_string(h, "member_id"),
        member_epoch=_int(h, "epoch", EPOCH_MIN, f.U32 - 1),
        revision=_int(h, "revision", 0, f.U32 - 1),
        instance_id=f.opt_string(h, "instance_id"),
        topics=f.strings(h, "topics"),
        owned=_parts(h, "owned"),
        session_timeout_s=_int(h, "session_ms", 0, f.U32 - 1) / 1000,
        assignor=f.opt_string(h, "assignor"),
        paused=_parts(h, "paused"),
        may_hold=h.get("may_hold", True) is not False,
    )


def _encode_heartbeat_answer(a: HeartbeatAnswer) -> dict[str, Any]:
    return {
        "error": int(a.error),
        "member_id": a.member_id,
        "epoch": a.epoch,
        "revision": a.revision,
        "assignment": _encode_parts(a.assignment),
        "interval_ms": round(a.heartbeat_interval_s * 1000),
    }


def _heartbeat_answer(h: dict[str, Any]) -> HeartbeatAnswer:
    return HeartbeatAnswer(
        error=_error(h),
        wait_for=0,
        member_id=f.opt_string(h, "member_id"),
        epoch=_int(h, "epoch", EPOCH_MIN, f.U32 - 1),  # a leave's answer echoes it
        revision=_int(h, "revision", 0, f.U32 - 1),
        assignment=_parts(h, "assignment"),
        heartbeat_interval_s=_int(h, "interval_ms", 0, f.U32 - 1) / 1000,
    )


def _encode_commit(r: CommitRequest) -> dict[str, Any]:
    return {
        "group": r.group,
        "member_id": r.member_id,
        "epoch": r.member_epoch,
        "positions": [[t, p, i] for (t, p), i in sorted(r.positions.items())],
    }


def _index_list(h: dict[str, Any], key: str, nullable: bool) -> dict[TopicPartition, Any]:
    out: dict[TopicPartition, Any] = {}
    for item in _list(h.get(key, []), key):
        topic, partition, index = _tuple(item, 3, key)
        if not (index is None and nullable):
            index = _int({"index": index}, "index")
        out[_topic_partition(topic, partition, key)] = index
    return out


def _commit(h: dict[str, Any]) -> CommitRequest:
    return CommitRequest(
        group=f.string(h, "group"),
        member_id=f.string(h, "member_id"),
        member_epoch=_int(h, "epoch", 0, f.U32 - 1),
        positions=_index_list(h, "positions", nullable=False),
    )


def _encode_commit_answer(a: CommitAnswer) -> dict[str, Any]:
    return {
        "error": int(a.error),
        "results": [[t, p, int(code)] for (t, p), code in sorted(a.results.items())],
    }


def _commit_answer(h: dict[str, Any]) -> CommitAnswer:
    results: dict[TopicPartition, GroupError] = {}
    for tp, code in _index_list(h, "results", nullable=False).items():
        results[tp] = _error({"error": code})
    return CommitAnswer(_error(h), 0, results)


@dataclass(frozen=True, slots=True)
class PositionsQuery:
    """Committed positions of `group`: of `partitions`, or all when None."""

    group: str
    partitions: frozenset[TopicPartition] | None = None


def _encode_positions_query(q: PositionsQuery) -> dict[str, Any]:
    h: dict[str, Any] = {"group": q.group}
    if q.partitions is not None:
        h["partitions"] = _encode_parts(q.partitions)
    return h


def _positions_query(h: dict[str, Any]) -> PositionsQuery:
    parts = None if h.get("partitions") is None else _parts(h, "partitions")
    return PositionsQuery(f.string(h, "group"), parts)


def _encode_positions_answer(a: PositionsAnswer) -> dict[str, Any]:
    return {
        "error": int(a.error),
        "positions": [_encode_position(tp, p) for tp, p in sorted(a.positions.items())],
    }


def _positions_answer(h: dict[str, Any]) -> PositionsAnswer:
    return PositionsAnswer(_error(h), 0, _positions(h, "positions"))


def _encode_nothing(_: None) -> dict[str, Any]:
    return {}


def _nothing(_: dict[str, Any]) -> None:
    return None


def _encode_group(group: str) -> dict[str, Any]:
    return {"group": group}


def _group(h: dict[str, Any]) -> str:
    return f.string(h, "group")


def _encode_describe_answer(a: DescribeAnswer) -> dict[str, Any]:
    h: dict[str, Any] = {"error": int(a.error)}
    if a.group is not None:
        h["group"] = _encode_view(a.group)
    return h


def _describe_answer(h: dict[str, Any]) -> DescribeAnswer:
    view = h.get("group")
    return DescribeAnswer(_error(h), 0, None if view is None else _view(f.mapping(view, "group")))


def _encode_list_answer(a: ListAnswer) -> dict[str, Any]:
    return {"error": int(a.error), "groups": [_encode_view(v) for v in a.groups]}


def _list_answer(h: dict[str, Any]) -> ListAnswer:
    return ListAnswer(_error(h), 0, f.items(h, "groups", _view))


@dataclass(frozen=True, slots=True)
class PositionsReset:
    """Set (None: forget) the positions of a group without members."""

    group: str
    positions: Mapping[TopicPartition, int | None]


def _encode_reset(r: PositionsReset) -> dict[str, Any]:
    return {
        "group": r.group,
        "positions": [[t, p, i] for (t, p), i in sorted(r.positions.items())],
    }


def _reset(h: dict[str, Any]) -> PositionsReset:
    return PositionsReset(f.string(h, "group"), _index_list(h, "positions", nullable=True))


def _encode_admin_answer(a: AdminAnswer) -> dict[str, Any]:
    return {"error": int(a.error)}


def _admin_answer(h: dict[str, Any]) -> AdminAnswer:
    return AdminAnswer(_error(h), 0)


class HeartbeatFrame(GroupMessage):
    """A member's heartbeat (join, stay, leave)."""

    __slots__ = ()
    OP = Op.GROUP_HEARTBEAT
    ENCODE = staticmethod(_encode_heartbeat)
    DECODE = staticmethod(_heartbeat)


class HeartbeatAnswerFrame(GroupMessage):
    """What the member may hold now, at which epoch."""

    __slots__ = ()
    OP = Op.GROUP_HEARTBEAT
    FLAGS = Flags.RESPONSE
    ENCODE = staticmethod(_encode_heartbeat_answer)
    DECODE = staticmethod(_heartbeat_answer)


class CommitFrame(GroupMessage):
    """A member's positions, at its epoch."""

    __slots__ = ()
    OP = Op.GROUP_COMMIT
    ENCODE = staticmethod(_encode_commit)
    DECODE = staticmethod(_commit)


class CommitAnswerFrame(GroupMessage):
    """Each position applied or refused (FENCED, POSITION_BEHIND, ...)."""

    __slots__ = ()
    OP = Op.GROUP_COMMIT
    FLAGS = Flags.RESPONSE
    ENCODE = staticmethod(_encode_commit_answer)
    DECODE = staticmethod(_commit_answer)


class PositionsFrame(GroupMessage):
    """Read a group's committed positions."""

    __slots__ = ()
    OP = Op.GROUP_POSITIONS
    ENCODE = staticmethod(_encode_positions_query)
    DECODE = staticmethod(_positions_query)


class PositionsAnswerFrame(GroupMessage):
    """The committed positions asked for."""

    __slots__ = ()
    OP = Op.GROUP_POSITIONS
    FLAGS = Flags.RESPONSE
    ENCODE = staticmethod(_encode_positions_answer)
    DECODE = staticmethod(_positions_answer)


class DescribeFrame(GroupMessage):
    """Describe one group: members, assignment, positions."""

    __slots__ = ()
    OP = Op.GROUP_DESCRIBE
    ENCODE = staticmethod(_encode_group)
    DECODE = staticmethod(_group)


class DescribeAnswerFrame(GroupMessage):
    """The group, or UNKNOWN_GROUP."""

    __slots__ = ()
    OP = Op.GROUP_DESCRIBE
    FLAGS = Flags.RESPONSE
    ENCODE = staticmethod(_encode_describe_answer)
    DECODE = staticmethod(_describe_answer)


class ListFrame(GroupMessage):
    """The groups this positions partition holds."""

    __slots__ = ()
    OP = Op.GROUP_LIST
    ENCODE = staticmethod(_encode_nothing)
    DECODE = staticmethod(_nothing)


class ListAnswerFrame(GroupMessage):
    """Every group of the partition, described."""

    __slots__ = ()
    OP = Op.GROUP_LIST
    FLAGS = Flags.RESPONSE
    ENCODE = staticmethod(_encode_list_answer)
    DECODE = staticmethod(_list_answer)


class ResetFrame(GroupMessage):
    """Set or forget positions of a group without members."""

    __slots__ = ()
    OP = Op.GROUP_RESET
    ENCODE = staticmethod(_encode_reset)
    DECODE = staticmethod(_reset)


class ResetAnswerFrame(GroupMessage):
    """Done, or why not (GROUP_NOT_EMPTY, ...)."""

    __slots__ = ()
    OP = Op.GROUP_RESET
    FLAGS = Flags.RESPONSE
    ENCODE = staticmethod(_encode_admin_answer)
    DECODE = staticmethod(_admin_answer)


class DeleteFrame(GroupMessage):
    """Forget a group without members and its positions."""

    __slots__ = ()
    OP = Op.GROUP_DELETE
    ENCODE = staticmethod(_encode_group)
    DECODE = staticmethod(_group)


class DeleteAnswerFrame(GroupMessage):
    """Done, or why not (GROUP_NOT_EMPTY, UNKNOWN_GROUP)."""

    __slots__ = ()
    OP = Op.GROUP_DELETE
    FLAGS = Flags.RESPONSE
    ENCODE = staticmethod(_encode_admin_answer)
    DECODE = staticmethod(_admin_answer)


GROUP_REQUESTS: tuple[type[Message], ...] = (
    FindCoordinatorRequest,
    HeartbeatFrame,
    CommitFrame,
    PositionsFrame,
    DescribeFrame,
    ListFrame,
    ResetFrame,
    DeleteFrame,
)
GROUP_RESPONSES: tuple[type[Message], ...] = (
    FindCoordinatorResponse,
    HeartbeatAnswerFrame,
    CommitAnswerFrame,
    PositionsAnswerFrame,
    DescribeAnswerFrame,
    ListAnswerFrame,
    ResetAnswerFrame,
    DeleteAnswerFrame,
)
REQUEST_TYPES.update({cls.OP: cls for cls in GROUP_REQUESTS})  # type: ignore[misc]
RESPONSE_TYPES.update({cls.OP: cls for cls in GROUP_RESPONSES})  # type: ignore[misc]
