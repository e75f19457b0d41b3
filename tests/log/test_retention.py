"""Retention removes whole oldest segments by size and by age."""

from __future__ import annotations

import pytest

from laminar.log import IndexOutOfRange, LogConfig, SegmentedLog

from .conftest import LogEnv


def test_retention_by_size_keeps_at_least_the_limit(env: LogEnv) -> None:
    async def main() -> None:
        config = LogConfig(segment_bytes=1000, retention_bytes=3000)
        log = await SegmentedLog.open(env.directory, config, backend=env.backend)
        for i in range(60):
            await log.append([bytes([i]) * 100])  # 10 records per segment
        assert log.lowest_index > 0  # retention already ran at rollovers
        await log.apply_retention()
        assert log.size_bytes >= 3000
        assert log.size_bytes - 1000 < 3000
        assert log.lowest_index % 10 == 0 and log.lowest_index > 0
        with pytest.raises(IndexOutOfRange):
            await log.read(log.lowest_index - 1)
        assert (await log.read(log.lowest_index)).value == bytes([log.lowest_index]) * 100
        low = log.lowest_index
        await log.close()
        log = await SegmentedLog.open(env.directory, config, backend=env.backend)
        assert (log.lowest_index, log.highest_index) == (low, 60)
        await log.close()

    env.run(main)


def test_retention_by_age_never_removes_the_write_segment(env: LogEnv) -> None:
    async def main() -> None:
        config = LogConfig(segment_bytes=1000, retention_ms=60_000)
        log = await SegmentedLog.open(env.directory, config, backend=env.backend)
        for i in range(35):
            await log.append([bytes([i]) * 100])
        newest = (await log.read(34)).timestamp_ms
        assert await log.apply_retention(now_ms=newest) == 0
        assert log.lowest_index == 0
        # An hour later every sealed segment is too old; the write segment stays.
        assert await log.apply_retention(now_ms=newest + 3_600_000) == 3
        assert (log.lowest_index, log.highest_index, log.segment_count) == (30, 35, 1)
        assert await log.index_for_timestamp(0) == 30
        await log.close()

    env.run(main)


def test_an_owner_can_apply_limits_of_its_own_and_resize_segments(env: LogEnv) -> None:
    """A node keeps retention out of a topic log's config and applies it on its
    own timer, with the topic's limits; a topic's segment size can change live."""

    async def main() -> None:
        log = await SegmentedLog.open(
            env.directory, LogConfig(segment_bytes=1000), backend=env.backend
        )
        for i in range(30):
            await log.append([bytes([i]) * 100])
        assert log.lowest_index == 0  # no retention in the config: appends never remove
        assert await log.remove_expired(None, None) == (0, 0)
        assert await log.remove_expired(1500, None) == (1, 1000)  # the rest holds 2000
        assert (log.lowest_index, log.size_bytes) == (10, 2000)
        log.reconfigure(LogConfig(segment_bytes=200))
        for i in range(4):
            await log.append([bytes([i]) * 100])
        assert log.segment_count >= 3
        with pytest.raises(ValueError, match="flush settings"):
            log.reconfigure(LogConfig(segment_bytes=200, flush="never"))
        await log.close()

    env.run(main)


def test_retention_keeps_every_segment_from_the_one_holding_keep_from(env: LogEnv) -> None:
    """A Raft partition's floor: whatever the limits, nothing at or after
    `keep_from` (the last committed record) is removed."""

    async def main() -> None:
        log = await SegmentedLog.open(
            env.directory, LogConfig(segment_bytes=1000), backend=env.backend
        )
        for i in range(45):
            await log.append([bytes([i]) * 100])  # segments from 0, 10, 20, 30, 40
        assert await log.remove_expired(0, None, keep_from=25) == (2, 2000)
        assert log.lowest_index == 20  # the segment holding 25 stays, and all after it
        assert await log.remove_expired(0, None, keep_from=20) == (0, 0)
        assert await log.remove_expired(0, None, keep_from=44) == (2, 2000)
        assert log.lowest_index == 40
        await log.close()

    env.run(main)
