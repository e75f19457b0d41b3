"""What a shard does with a failed partition: reopen it from disk (the
unpublished tail dropped), or take it offline and say why.

Runs the partition manager on the power-cut simulator with injected faults.
"""

from __future__ import annotations

import asyncio
import errno

import pytest

from laminar.log import Fault, LogConfig, LogFailed, SimulatedDisk
from laminar.log.partitions import (
    MAX_REOPENS,
    OFFLINE_RETRY_S,
    PartitionManager,
    PartitionOffline,
)
from laminar.placement import partition_id
from tests.support.clock import FakeClock

PID = partition_id(5, 1)
CONFIG = LogConfig(preallocate_bytes=0)


def manager(disk: SimulatedDisk) -> tuple[PartitionManager, FakeClock]:
    clock = FakeClock()
    partitions = PartitionManager("/data/partitions", CONFIG, disk, lambda pid: True, clock=clock)
    return partitions, clock


async def read_all(partitions: PartitionManager) -> list[bytes]:
    log = await partitions.get(PID)
    records = await log.read_range(log.lowest_index, 1 << 30) if log.highest_index else []
    return [r.value for r in records]


def test_a_failed_partition_is_reopened_from_disk_without_its_unpublished_tail() -> None:
    async def main() -> None:
        disk = SimulatedDisk()
        partitions, _ = manager(disk)
        log = await partitions.get(PID)
        await log.append([b"acknowledged"])
        disk.inject(Fault("sync", errno.EIO, ".store"))
        with pytest.raises(LogFailed):
            await log.append([b"failed"])
        assert partitions.opened(PID) is None  # the fast path will not use it
        reopened = await partitions.get(PID)
        assert reopened is not log and reopened.failure is None
        assert await read_all(partitions) == [b"acknowledged"]
        assert await reopened.append([b"next"]) == 1
        assert partitions.offline == []
        await partitions.close_all()

    asyncio.run(main())


def test_a_partition_that_keeps_failing_goes_offline_and_comes_back_later() -> None:
    async def main() -> None:
        disk = SimulatedDisk()
        partitions, clock = manager(disk)
        await (await partitions.get(PID)).append([b"acknowledged"])
        fault = disk.inject(Fault("write", errno.EIO, ".store", times=None))
        for _ in range(MAX_REOPENS + 1):
            log = await partitions.get(PID)
            with pytest.raises(LogFailed):
                await log.append([b"will not fit"])
        with pytest.raises(PartitionOffline, match="offline: its log failed 4 times"):
            await partitions.get(PID)
        (offline,) = partitions.offline
        assert offline.describe()["topic_id"] == 5 and offline.describe()["partition"] == 1
        operations = len(disk.journal)
        with pytest.raises(PartitionOffline):
            await partitions.get(PID)  # refused at once, the disk left alone
        assert len(disk.journal) == operations
        disk.faults.remove(fault)  # the disk replaced
        clock.advance(OFFLINE_RETRY_S)
        log = await partitions.get(PID)
        assert partitions.offline == []
        assert await read_all(partitions) == [b"acknowledged"]
        await log.append([b"fits again"])
        await partitions.close_all()

    asyncio.run(main())


def test_a_partition_recovery_refuses_to_repair_is_offline_with_the_reason() -> None:
    async def main() -> None:
        disk = SimulatedDisk()
        partitions, clock = manager(disk)
        await (await partitions.get(PID)).append([b"a", b"b"])
        await partitions.close_all()
        index = disk.root
        for part in ("data", "partitions", "5-1", f"{0:020d}.index"):
            index = index.entries[part]  # type: ignore[union-attr]
        index.cache[:16] = bytes(16)  # type: ignore[union-attr]
        index.disk[:16] = bytes(16)  # type: ignore[union-attr]
        partitions, clock = manager(disk)
        with pytest.raises(PartitionOffline, match="header is lost or damaged"):
            await partitions.get(PID)
        assert [o.pid for o in partitions.offline] == [PID]
        clock.advance(OFFLINE_RETRY_S)  # still damaged: offline again, with the reason
        with pytest.raises(PartitionOffline, match="header is lost or damaged"):
            await partitions.get(PID)
        await partitions.close_all()

    asyncio.run(main())


def test_a_full_disk_never_takes_the_durable_records_offline() -> None:
    """Writers retrying against a full disk fail every time; that is not damage,
    so the partition is reopened each time and its records stay readable."""

    async def main() -> None:
        disk = SimulatedDisk()
        partitions, _ = manager(disk)
        await (await partitions.get(PID)).append([b"acknowledged"])
        fault = disk.inject(Fault("write", errno.ENOSPC, ".store", times=None))
        for _ in range(3 * MAX_REOPENS):
            log = await partitions.get(PID)
            with pytest.raises(LogFailed):
                await log.append([b"will not fit"])
            assert await read_all(partitions) == [b"acknowledged"]
        assert partitions.offline == []
        disk.faults.remove(fault)  # space freed
        await (await partitions.get(PID)).append([b"fits again"])
        assert await read_all(partitions) == [b"acknowledged", b"fits again"]
        await partitions.close_all()

    asyncio.run(main())
