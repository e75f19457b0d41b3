"""Consumer groups on a shard: the requests it serves for them.

For now: FIND_COORDINATOR, served by the metadata owner shard (the router
sends it there), which makes the positions topic on a group's first use
(`laminar.groups.positions`) and names the partition that holds the group.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from laminar.groups.frames import FindCoordinatorRequest, FindCoordinatorResponse
from laminar.groups.positions import (
    POSITIONS_CONFIG,
    POSITIONS_TOPIC,
    coordinator_partition,
    group_id_problem,
)
from laminar.replication.metadata import MetadataError
from laminar.replication.metalog import MetadataService
from laminar.wire import ErrorCode, Op, TopicInfo
from laminar.wire.codec import Buffer
from laminar.wire.errors import RequestError


class GroupService:
    """The group ops of one shard (see the module docstring)."""

    def __init__(self, metadata: MetadataService, positions_partitions: int) -> None:
        self._metadata = metadata
        self._positions_partitions = positions_partitions

    def table(self) -> dict[int, Callable[[Any, int, Any], Awaitable[list[Buffer]]]]:
        """The dispatcher's handlers for the group ops."""
        return {Op.FIND_COORDINATOR: self.find_coordinator}

    async def find_coordinator(
        self, req: FindCoordinatorRequest, corr: int, ctx: Any
    ) -> list[Buffer]:
        problem = group_id_problem(req.group)
        if problem is not None:
            raise RequestError(ErrorCode.INVALID_REQUEST, problem)
        topic = await self._positions_topic()
        partition = coordinator_partition(req.group, topic.partitions)
        return FindCoordinatorResponse(req.group, topic, partition).encode_buffers(corr)

    async def _positions_topic(self) -> TopicInfo:
        """The positions topic, made now if this is the cluster's first group
        (in a cluster only the metadata leader can: others answer NOT_LEADER
        naming it, and the client asks there)."""
        await self._metadata.ready()
        topic = self._metadata.state.by_name(POSITIONS_TOPIC)
        if topic is not None:
            return topic
        try:
            return await self._metadata.create_topic(
                POSITIONS_TOPIC, self._positions_partitions, dict(POSITIONS_CONFIG)
            )
        except MetadataError as exc:
            made = self._metadata.state.by_name(POSITIONS_TOPIC)
            if exc.code is ErrorCode.TOPIC_EXISTS and made is not None:
                return made  # another request made it first
            raise
