"""Retention on a shard judges ages on the shard's clock, the one its partition
logs stamp records with: a test moves that clock instead of waiting."""

from __future__ import annotations

import asyncio
from pathlib import Path

from laminar.log import LogConfig, SyscallBackend
from laminar.log.partitions import PartitionManager
from laminar.placement import partition_id
from laminar.shards.metrics import ShardMetrics
from laminar.shards.retention import Retention
from laminar.wire import TopicInfo
from tests.support.clock import FakeClock

TOPIC = TopicInfo("t", 5, 1, {"retention.ms": 60_000, "segment.ms": 30_000})
PID = partition_id(5, 0)


def test_records_expire_when_the_clock_says_they_are_old(tmp_path: Path) -> None:
    async def main() -> None:
        clock = FakeClock()
        root = str(tmp_path / "partitions")
        backend = SyscallBackend()
        partitions = PartitionManager(root, LogConfig(), backend, lambda pid: True, clock=clock)
        metrics = ShardMetrics()
        topics = [TOPIC]
        retention = Retention(partitions, lambda: topics, lambda pid: True, metrics, clock=clock)
        log = await partitions.get(PID, retention.topic_log_config(TOPIC))
        await log.append([b"old"])
        clock.advance(30)  # segment.ms: the write segment rolls, nothing is old enough
        await retention.apply_once()
        assert metrics.retention_segments_deleted == 0
        await log.append([b"new"])
        clock.advance(31)  # "old" is 61 s old (retention.ms 60 s), "new" 31 s
        await retention.apply_once()
        assert metrics.retention_segments_deleted == 1
        records = await log.read_range(log.lowest_index, 1 << 20)
        assert [r.value for r in records] == [b"new"]
        await partitions.close_all()

    asyncio.run(main())
