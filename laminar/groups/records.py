"""The positions log's records and their msgpack codec (version 1).

Every record is an upsert or a tombstone (value None) of one key, so folding
the log in order gives the state and a compaction keeps one record per key:

    group     (group)                     -> GroupValue: epoch, assignor, partition counts
    member    (group, member id)          -> MemberValue: subscription, epoch, assignment, owner
    position  (group, topic, partition)   -> Position: index, member, epoch, commit time

Encoded as a msgpack array `[version, kind, key..., value or nil]`; partition
sets as `[[topic, [partition, ...]], ...]`. The log is replicated input all
the same: decoding is bounded (size, string and array lengths, field types and
ranges) and raises `RecordCodecError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from laminar.groups.errors import RecordCodecError
from laminar.groups.messages import Position, TopicPartition

VERSION: Final = 1
KIND_GROUP: Final = 1
KIND_MEMBER: Final = 2
KIND_POSITION: Final = 3
RECORD_BYTES_MAX: Final = 4 << 20
"""A member record lists its partitions; 4 MiB holds ~100k of them."""
NAME_BYTES_MAX: Final = 255
"""Group ids, member ids, instance ids, topic names and assignor names."""
PRINCIPAL_BYTES_MAX: Final = 5 + 4 * 255
"""A member's principal: `User:` and a name of up to 255 characters (UTF-8)."""
_I64_MAX: Final = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class GroupValue:
    epoch: int
    assignor: str
    partition_counts: tuple[tuple[str, int], ...]
    """(topic, partition count) of the subscribed topics, sorted, as the
    target assignment of `epoch` saw them: a new count is a new epoch."""


@dataclass(frozen=True, slots=True)
class MemberValue:
    instance_id: str | None
    epoch: int
    revision: int
    """Bumped whenever the member's answer changes (see `HeartbeatRequest`)."""
    topics: tuple[str, ...]
    session_timeout_ms: int
    assignor: str | None
    assigned: frozenset[TopicPartition]
    revoking: frozenset[TopicPartition]
    target: frozenset[TopicPartition]
    away: bool
    principal: str | None = None
    """Who joined it (`laminar.security.ownership`): only that principal may
    heartbeat or commit as this member. None on a node without logins."""

    @property
    def held(self) -> frozenset[TopicPartition]:
        """What the member holds in the coordinator's view: nobody else gets these."""
        return self.assigned | self.revoking


@dataclass(frozen=True, slots=True)
class GroupRecord:
    group: str
    value: GroupValue | None


@dataclass(frozen=True, slots=True)
class MemberRecord:
    group: str
    member_id: str
    value: MemberValue | None


@dataclass(frozen=True, slots=True)
class PositionRecord:
    group: str
    topic: str
    partition: int
    value: Position | None


Record = GroupRecord | MemberRecord | PositionRecord


def encode(record: Record) -> bytes:
    """One record -> bytes of the positions log."""
    row: list[Any]
    if isinstance(record, GroupRecord):
        g = record.value
        value = None if g is None else [g.epoch, g.assignor, [list(c) for c in g.partition_counts]]
        row = [VERSION, KIND_GROUP, record.group, value]
    elif isinstance(record, MemberRecord):
        m = record.value
        value = None
        if m is not None:
            value = [
                m.instance_id,
                m.epoch,
                m.revision,
                list(m.topics),
                m.session_timeout_ms,
                m.assignor,
                _encode_parts(m.assigned),
                _encode_parts(m.revoking),
                _encode_parts(m.target),
                m.away,
                *(() if m.principal is None else (m.principal,)),
            ]
        row = [VERSION, KIND_MEMBER, record.group, record.member_id, value]
    else:
        p = record.value
        value = None if p is None else [p.index, p.member_id, p.member_epoch, p.commit_ms]
        row = [VERSION, KIND_POSITION, record.group, record.topic, record.partition, value]
    packed: bytes = msgpack.packb(row, use_bin_type=True)
    return packed


def decode(data: bytes) -> Record:
    """Bytes of the positions log -> one record; raises `RecordCodecError`."""
    if len(data) > RECORD_BYTES_MAX:
        raise RecordCodecError(f"a record of {len(data)} B exceeds {RECORD_BYTES_MAX} B")
    try:
        row = msgpack.unpackb(
            data,
            raw=False,
            use_list=True,
            max_str_len=PRINCIPAL_BYTES_MAX,  # names are held to NAME_BYTES_MAX below
            max_bin_len=0,
            max_array_len=len(data),
            max_map_len=0,
            max_ext_len=0,
        )
    except Exception as exc:
        raise RecordCodecError(f"a record is not valid msgpack: {exc}") from None
    if type(row) is not list or len(row) < 3 or row[0] != VERSION:
        raise RecordCodecError("a record must be a list [version 1, kind, ...]")
    kind = row[1]
    if kind == KIND_GROUP and len(row) == 4:
        return GroupRecord(_name(row[2], "group"), _group_value(row[3]))
    if kind == KIND_MEMBER and len(row) == 5:
        return MemberRecord(
            _name(row[2], "group"), _name(row[3], "member id"), _member_value(row[4])
        )
    if kind == KIND_POSITION and len(row) == 6:
        return PositionRecord(
            _name(row[2], "group"),
            _name(row[3], "topic"),
            _int(row[4], "partition"),
            _position(row[5]),
        )
    raise RecordCodecError(f"unknown record kind {kind!r} with {len(row)} fields")


def _encode_parts(parts: Iterable[TopicPartition]) -> list[list[Any]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in parts:
        by_topic.setdefault(topic, []).append(partition)
    return [[topic, sorted(ps)] for topic, ps in sorted(by_topic.items())]


def _fields(value: Any, count: int, what: str) -> list[Any]:
    if type(value) is not list or len(value) != count:
        raise RecordCodecError(f"a {what} value must be a list of {count} fields")
    return value


def _int(value: Any, name: str, low: int = 0) -> int:
    if type(value) is not int or not low <= value <= _I64_MAX:
        raise RecordCodecError(f"record field {name} must be an int in {low}..2**63-1")
    return value


def _name(value: Any, name: str) -> str:
    if type(value) is not str or not value or _over(value, NAME_BYTES_MAX):
        raise RecordCodecError(
            f"record field {name} must be a non-empty string of at most {NAME_BYTES_MAX} bytes"
        )
    return value


def _over(value: str, bytes_max: int) -> bool:
    """Is `value` longer than `bytes_max` in UTF-8? (Cheap for ASCII.)"""
    return len(value) > bytes_max or (not value.isascii() and len(value.encode()) > bytes_max)


def _names(value: Any, name: str) -> tuple[str, ...]:
    if type(value) is not list:
        raise RecordCodecError(f"record field {name} must be a list")
    return tuple(_name(v, name) for v in value)


def _optional_name(value: Any, name: str) -> str | None:
    return None if value is None else _name(value, name)


def _parts(value: Any, name: str) -> frozenset[TopicPartition]:
    if type(value) is not list:
        raise RecordCodecError(f"record field {name} must be a list")
    out: list[TopicPartition] = []
    for pair in value:
        topic, partitions = _fields(pair, 2, name)
        topic = _name(topic, name)
        if type(partitions) is not list:
            raise RecordCodecError(f"record field {name} must list partitions")
        out.extend((topic, _int(p, name)) for p in partitions)
    return frozenset(out)


def _group_value(value: Any) -> GroupValue | None:
    if value is None:
        return None
    epoch, assignor, counts = _fields(value, 3, "group")
    if type(counts) is not list:
        raise RecordCodecError("record field partition counts must be a list")
    pairs = []
    for pair in counts:
        topic, count = _fields(pair, 2, "partition count")
        pairs.append((_name(topic, "topic"), _int(count, "partition count")))
    return GroupValue(_int(epoch, "epoch"), _name(assignor, "assignor"), tuple(pairs))


def _member_value(value: Any) -> MemberValue | None:
    if value is None:
        return None
    owned = type(value) is list and len(value) == 11  # a principal joined it
    fields = _fields(value, 11 if owned else 10, "member")
    instance, epoch, revision, topics, session_ms, assignor = fields[:6]
    assigned, revoking, target, away = fields[6:10]
    if type(away) is not bool:
        raise RecordCodecError("record field away must be a bool")
    principal = _principal(fields[10]) if owned else None
    return MemberValue(
        instance_id=_optional_name(instance, "instance id"),
        epoch=_int(epoch, "epoch"),
        revision=_int(revision, "revision"),
        topics=_names(topics, "topics"),
        session_timeout_ms=_int(session_ms, "session timeout", 1),
        assignor=_optional_name(assignor, "assignor"),
        assigned=_parts(assigned, "assigned"),
        revoking=_parts(revoking, "revoking"),
        target=_parts(target, "target"),
        away=away,
        principal=principal,
    )


def _principal(value: Any) -> str:
    if type(value) is not str or not value or _over(value, PRINCIPAL_BYTES_MAX):
        raise RecordCodecError("record field principal must be a non-empty string")
    return value


def _position(value: Any) -> Position | None:
    if value is None:
        return None
    index, member_id, member_epoch, commit_ms = _fields(value, 4, "position")
    if type(member_id) is not str:
        raise RecordCodecError("record field member id must be a string")
    return Position(
        _int(index, "index"), member_id, _int(member_epoch, "member epoch"), _int(commit_ms, "ms")
    )
