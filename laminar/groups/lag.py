"""Lag of the groups a shard coordinates, kept fresh for `/metrics`.

The metrics page is rendered from each shard's synchronous stats snapshot, so
lag cannot be asked for at scrape time: `LagWatch` refreshes it every
`REFRESH_S` instead, while the shard hosts groups. A refresh reads the groups
of the hosted cores (as committed) and asks each partition's leader to count
the records after the group's position (LIST_OFFSETS with `count_from`: the
leader counts from its in-memory index, see `PartitionReplica.records_between`).

Bounded: at most `SERIES_MAX` (group, topic, partition) series per shard;
past it the rest are not asked for, and `dropped` says how many were left
out (groups in name order, partitions in order). A partition whose leader
does not answer keeps no series until it does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from laminar.groups.messages import GroupView
from laminar.placement import partition_id
from laminar.replication.metalog import MetadataService
from laminar.replication.routes import NodeRoutes, NodeUnreachable
from laminar.wire import ListOffsetsRequest, ListOffsetsResponse
from laminar.wire.errors import ProtocolError, RequestError

logger = logging.getLogger("laminar.groups")

REFRESH_S: Final = 5.0
"""How often the lag of the hosted groups is counted again."""
SERIES_MAX: Final = 1_000
"""Series (group, topic, partition) a shard reports at most."""

Series = tuple[str, str, int]


class LagWatch:
    """The lag of the groups one shard coordinates (see the module docstring)."""

    def __init__(
        self,
        groups: Callable[[], Awaitable[list[GroupView]]],
        metadata: MetadataService,
        routes: NodeRoutes,
        series_max: int = SERIES_MAX,
    ) -> None:
        self._groups = groups
        self._metadata = metadata
        self._routes = routes
        self.series_max = series_max
        self.lag: dict[Series, int] = {}
        self.dropped = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Refresh every `REFRESH_S` from now on (once started, a no-op)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def snapshot(self) -> dict[str, Any]:
        """For the shard's stats: {"series": [[group, topic, partition, lag]], "dropped"}."""
        series = [[g, t, p, lag] for (g, t, p), lag in sorted(self.lag.items())]
        return {"series": series, "dropped": self.dropped}

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh()
            except (RequestError, NodeUnreachable, ProtocolError, OSError) as exc:
                logger.info("group lag not refreshed: %s", exc)
            await asyncio.sleep(REFRESH_S)

    async def refresh(self) -> None:
        """Count every hosted group's lag again (up to `series_max` series)."""
        wanted: list[tuple[Series, int, int]] = []  # (series, partition id, position)
        total = 0
        for view in sorted(await self._groups(), key=lambda v: v.group):
            for series, pid, position in self._series_of(view):
                total += 1
                if len(wanted) < self.series_max:
                    wanted.append((series, pid, position))
        answers = await asyncio.gather(
            *(self._count(pid, position) for _, pid, position in wanted),
            return_exceptions=True,
        )
        self.lag = {
            series: answer
            for (series, _, _), answer in zip(wanted, answers, strict=True)
            if isinstance(answer, int)
        }
        self.dropped = total - len(wanted)

    def _series_of(self, view: GroupView) -> list[tuple[Series, int, int]]:
        """The partitions of a group's topics (subscribed or with a position)
        and where the group stands in each (0 without a position)."""
        out = []
        for name in sorted(view.topics):
            topic = self._metadata.state.by_name(name)
            if topic is None:
                continue  # deleted since
            for p in range(topic.partitions):
                position = view.positions.get((name, p))
                index = 0 if position is None else position.index
                out.append(((view.group, name, p), partition_id(topic.topic_id, p), index))
        return out

    async def _count(self, pid: int, position: int) -> int:
        frame = await self._routes.to_leader(ListOffsetsRequest(pid, count_from=position))
        records = ListOffsetsResponse.from_frame(frame).records
        if records is None:
            raise ProtocolError("LIST_OFFSETS answered without a record count")
        return records
