"""Consumer groups seen from outside: list, describe (with lag), reset and
delete them (`Client.list_groups` and the rest, the same on `AsyncClient`),
and the two steps every group request takes: find the positions partition
that holds the group, then send to that partition's leader.

Lag is per partition: the records between the group's committed position
and the partition's committed end. On a replicated partition indexes have
gaps (Raft's own entries: a no-op per leader term, membership changes), so
the node counts the records (LIST_OFFSETS with `count_from`: a pass over the
in-memory index of the partial segments, ~7 ns a record, whole segments'
counts kept) rather than the client subtracting indexes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from laminar.client import calls
from laminar.client.core import REFRESH, ClientCore, Plan
from laminar.client.errors import LaminarError
from laminar.client.results import expect
from laminar.groups.errors import GroupError
from laminar.groups.frames import (
    DeleteAnswerFrame,
    DeleteFrame,
    DescribeAnswerFrame,
    DescribeFrame,
    GroupMessage,
    ListAnswerFrame,
    ListFrame,
    PositionsReset,
    ResetAnswerFrame,
    ResetFrame,
)
from laminar.groups.messages import GroupView, MemberView, TopicPartition
from laminar.groups.positions import POSITIONS_TOPIC
from laminar.placement import partition_id

RESET_TO = ("earliest", "latest")


class GroupRequestError(LaminarError):
    """The group coordinator refused the request; `refusal` says why
    (GROUP_NOT_EMPTY: reset and delete need a group without members)."""

    def __init__(self, group: str, refusal: GroupError, what: str) -> None:
        super().__init__(f"{what} of group {group[:60]!r} refused: {refusal.name}")
        self.group = group
        self.refusal = refusal


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """Where a group is in one partition it reads."""

    topic: str
    partition: int
    member_id: str | None
    """The member holding it now (None: nobody)."""
    committed: int | None
    """The next index the group reads (None: never committed)."""
    end: int
    """The partition's committed end."""
    records: int | None = None
    """Records from the position (or the partition's start) to the end; None
    from a node too old to count them."""

    @property
    def lag(self) -> int:
        """Records the group has not committed yet (see the module docstring);
        the index distance from a node that cannot count."""
        if self.records is not None:
            return self.records
        return self.end - (self.committed if self.committed is not None else 0)


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group: its members and, per partition of its topics, its lag."""

    group: str
    state: str
    """empty, stable or reconciling."""
    epoch: int
    assignor: str
    members: tuple[MemberView, ...]
    partitions: tuple[PartitionLag, ...]

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)


def coordinator_plan(client: ClientCore, group: str) -> Plan[int]:
    """The positions partition that holds `group` (the node makes the
    positions topic on a group's first use); the client's view learns it."""
    found = yield from client._call_plan(calls.find_coordinator(group))
    view = client._view
    if view is None or found.topic.name not in view.topics:
        yield REFRESH
    return found.partition_id


def group_plan(
    client: ClientCore, pid: int, message: Callable[[int], GroupMessage], answer: type[GroupMessage]
) -> Plan[Any]:
    """A group op sent to the leader of positions partition `pid` (retried as
    the client retries); the answer's body."""

    return (yield from client._call_plan(group_call(pid, message, answer)))


def group_call(
    pid: int, message: Callable[[int], GroupMessage], answer: type[GroupMessage]
) -> calls.Call[Any]:
    """A group op to the leader of positions partition `pid`, as a call (to
    send now and wait for later: an unwaited commit)."""

    def target(view: Any) -> tuple[Any, GroupMessage]:
        return view.route_pid(pid).address, message(pid)

    return calls.Call(
        f"{answer.__name__} to partition {pid & 0xFFFF_FFFF} of {POSITIONS_TOPIC}",
        target,
        lambda frame: expect(frame, answer).body,
        idempotent=True,
    )


def list_groups_plan(client: ClientCore) -> Plan[list[GroupView]]:
    """Every group, from every positions partition (none before the first group)."""
    view = yield REFRESH
    topic = view.topics.get(POSITIONS_TOPIC)
    if topic is None:
        return []
    groups: list[GroupView] = []
    for p in range(topic.partitions):
        answer = yield from group_plan(
            client,
            partition_id(topic.topic_id, p),
            lambda pid: ListFrame(pid, None),
            ListAnswerFrame,
        )
        groups += answer.groups
    return sorted(groups, key=lambda g: g.group)


def describe_group_plan(client: ClientCore, group: str) -> Plan[GroupDescription]:
    """A group with its members and its lag on every partition of its topics."""
    pid = yield from coordinator_plan(client, group)
    answer = yield from group_plan(
        client, pid, lambda pid: DescribeFrame(pid, group), DescribeAnswerFrame
    )
    if answer.error is not GroupError.NONE or answer.group is None:
        raise GroupRequestError(group, answer.error, "describe")
    view: GroupView = answer.group
    owners = {tp: m.member_id for m in view.members for tp in m.assignment}
    cluster = client._view or (yield REFRESH)
    parts: list[PartitionLag] = []
    for topic in sorted(view.topics):
        info = cluster.topics.get(topic)
        if info is None:
            continue  # deleted since
        for p in range(info.partitions):
            position = view.positions.get((topic, p))
            committed = None if position is None else position.index
            offsets = yield from client._call_plan(
                calls.list_offsets(topic, p, count_from=committed or 0)
            )
            parts.append(
                PartitionLag(
                    topic,
                    p,
                    owners.get((topic, p)),
                    committed,
                    offsets.committed_index,
                    offsets.records,
                )
            )
    return GroupDescription(
        view.group, view.state, view.epoch, view.assignor, view.members, tuple(parts)
    )


def reset_group_plan(
    client: ClientCore, group: str, topic: str, to: str | int, *, timestamp: bool = False
) -> Plan[dict[TopicPartition, int]]:
    """Move a group without members to `to` on every partition of `topic`:
    "earliest", "latest", an index (clamped to each partition's range), or,
    with `timestamp`, the first record at or after that time (ms)."""
    if isinstance(to, str) and to not in RESET_TO:
        raise ValueError(f"to is 'earliest', 'latest' or a number, not {to!r}")
    cluster = yield REFRESH
    info = cluster.topic(topic)
    positions: dict[TopicPartition, int] = {}
    for p in range(info.partitions):
        stamp = to if timestamp and isinstance(to, int) else None
        offsets = yield from client._call_plan(calls.list_offsets(topic, p, stamp))
        low, end = offsets.lowest_index, offsets.committed_index
        if to == "earliest":
            positions[topic, p] = low
        elif to == "latest":
            positions[topic, p] = end
        elif timestamp:
            positions[topic, p] = calls.timestamp_index_of(offsets)
        else:
            positions[topic, p] = min(max(int(to), low), end)
    pid = yield from coordinator_plan(client, group)
    reset: Mapping[TopicPartition, int | None] = positions
    answer = yield from group_plan(
        client, pid, lambda pid: ResetFrame(pid, PositionsReset(group, reset)), ResetAnswerFrame
    )
    if answer.error is not GroupError.NONE:
        raise GroupRequestError(group, answer.error, "reset")
    return positions


def delete_group_plan(client: ClientCore, group: str) -> Plan[None]:
    """Forget a group without members, and its positions."""
    pid = yield from coordinator_plan(client, group)
    answer = yield from group_plan(
        client, pid, lambda pid: DeleteFrame(pid, group), DeleteAnswerFrame
    )
    if answer.error is not GroupError.NONE:
        raise GroupRequestError(group, answer.error, "delete")
