"""Retention on a running shard: topic configs applied on a timer.

Every `--retention-check-interval` seconds, in the shard's background task
queue (so requests keep their CPU share), the shard walks the partitions it
owns of every topic whose config asks for retention or time-based rolling
(`topic_config`), and for each partition that has a log on disk:

1. rolls the write segment once its first record is `segment.ms` old, so that a
   quiet partition's records can expire (retention removes whole segments only,
   and never the one being written);
2. applies `retention.ms` and `retention.bytes` (`SegmentedLog.remove_expired`),
   counting the segments and bytes removed (`/metrics`). Retention is kept out
   of the logs' own config, so it never runs inside an append. A replicated
   partition keeps every record from its last committed one on (`keep_from`):
   Raft may still truncate what is not committed, and anchors its log on the
   last record retention left. A topic may also have a *floor* (`floor`:
   the positions topic of consumer groups, whose records before its last
   checkpoint are restated by it): retention keeps everything from the floor
   on, and rolls the write segment once the floor is inside it, so that the
   next checkpoint can drop it whole.

A partition without a directory is left alone (a retention pass never creates
logs). A log that fails is logged and skipped; the next pass tries again.
Retention settings reach logs already open when the topic is altered
(`apply_config`), and logs opened later get them from the topic at open.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Iterable

from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.log import LogConfig, SegmentedLog
from laminar.log.partitions import PartitionManager
from laminar.placement import partition_id
from laminar.replication.topic_config import log_config, retention_limits, segment_ms
from laminar.shards.metrics import ShardMetrics
from laminar.wire import TopicInfo

logger = logging.getLogger("laminar.shards")

DEFAULT_CHECK_INTERVAL_S = 60.0


def roll_due(first_timestamp_ms: int | None, now_ms: int, segment_ms_: int | None) -> bool:
    """Whether a write segment whose first record was appended at
    `first_timestamp_ms` (None: it is empty) is old enough to roll."""
    return (
        segment_ms_ is not None
        and first_timestamp_ms is not None
        and now_ms - first_timestamp_ms >= segment_ms_
    )


def wants_retention(topic: TopicInfo) -> bool:
    config = topic.config
    return any(key in config for key in ("retention.ms", "retention.bytes", "segment.ms"))


class Retention:
    """Applies this shard's topics' retention (see the module docstring)."""

    def __init__(
        self,
        partitions: PartitionManager,
        topics: Callable[[], Iterable[TopicInfo]],
        owns: Callable[[int], bool],
        metrics: ShardMetrics,
        interval_s: float = DEFAULT_CHECK_INTERVAL_S,
        keep_from: Callable[[int], int] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        floor: Callable[[TopicInfo, int], Awaitable[int | None]] | None = None,
    ) -> None:
        self._partitions = partitions
        self._clock = clock
        """Ages (wall time) are judged on it: the clock the partition logs stamp with."""
        self._topics = topics
        self._owns = owns
        self._metrics = metrics
        self.interval_s = interval_s
        self._keep_from = keep_from
        self._floor = floor

    def topic_log_config(self, topic: TopicInfo) -> LogConfig:
        """The settings a partition log of `topic` opens with."""
        return log_config(self._partitions.config, topic.config)

    def apply_config(self, topic: TopicInfo) -> None:
        """A topic's config changed: its open logs take the new settings now."""
        config = self.topic_log_config(topic)
        for pid in self._owned(topic):
            log = self._partitions.opened(pid)
            if log is not None:
                log.reconfigure(config)

    async def run(self) -> None:
        """Apply retention every `interval_s` until cancelled."""
        while True:
            await asyncio.sleep(self.interval_s)
            await self.apply_once()

    async def apply_once(self) -> None:
        """One pass over every owned partition of every topic that asks for it."""
        for topic in list(self._topics()):
            if not wants_retention(topic):
                continue
            config = self.topic_log_config(topic)
            for n, pid in enumerate(self._owned(topic)):
                if n % 256 == 255:
                    await asyncio.sleep(0)  # a topic of many partitions: let requests run
                if not os.path.isdir(self._partitions.directory(pid)):
                    continue
                try:
                    log = await self._partitions.get(pid, config)
                    keep = None if self._keep_from is None else self._keep_from(pid)
                    floor = None if self._floor is None else await self._floor(topic, pid)
                    if floor is not None:
                        keep = floor if keep is None else min(keep, floor)
                        if log.write_segment_base_index < floor:
                            await log.roll_over()
                    await self._apply(log, topic, keep)
                except Exception as exc:  # one bad partition must not stop the rest
                    logger.warning(
                        "retention of %s failed: %s", self._partitions.directory(pid), exc
                    )

    async def _apply(self, log: SegmentedLog, topic: TopicInfo, keep_from: int | None) -> None:
        now_ms = self._clock.wall_ms()
        if roll_due(log.write_segment_first_timestamp_ms, now_ms, segment_ms(topic.config)):
            await log.roll_over()
        retention_bytes, retention_ms = retention_limits(topic.config)
        if retention_bytes is None and retention_ms is None:
            return
        removed, freed = await log.remove_expired(retention_bytes, retention_ms, now_ms, keep_from)
        if removed:
            self._metrics.retention_segments_deleted += removed
            self._metrics.retention_bytes_deleted += freed
            logger.info(
                "retention removed %d segments (%d bytes) of %s", removed, freed, log.directory
            )

    def _owned(self, topic: TopicInfo) -> list[int]:
        pids = (partition_id(topic.topic_id, idx) for idx in range(topic.partitions))
        return [pid for pid in pids if self._owns(pid)]
