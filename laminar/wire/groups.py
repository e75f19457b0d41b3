"""Messages of consumer groups (op 19 on): finding a group's coordinator.

A client asks any shard of any node for the coordinator of a group
(`FindCoordinatorRequest`); the answer names the positions topic and the
partition of it that holds the group (`laminar.groups.positions`). The client
then sends the group's requests to that partition's leader, as it sends a
produce: shard-direct, following NOT_LEADER.

Everything here is sans-IO and shared by client and server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Self

from laminar.wire import fields as f
from laminar.wire.codec import Frame
from laminar.wire.errors import InvalidMessage
from laminar.wire.messages import REQUEST_TYPES, RESPONSE_TYPES, Message, TopicInfo
from laminar.wire.ops import Flags, Op


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest(Message):
    """Where is `group` served? Makes the positions topic if it is not there yet.

    Header: {group}.
    """

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

    Header: {group, topic: {name, topic_id, partitions, ...}, partition}.
    """

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


GROUP_REQUESTS: tuple[type[Message], ...] = (FindCoordinatorRequest,)
GROUP_RESPONSES: tuple[type[Message], ...] = (FindCoordinatorResponse,)
REQUEST_TYPES.update({cls.OP: cls for cls in GROUP_REQUESTS})  # type: ignore[misc]
RESPONSE_TYPES.update({cls.OP: cls for cls in GROUP_RESPONSES})  # type: ignore[misc]
