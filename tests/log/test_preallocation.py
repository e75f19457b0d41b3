"""Preallocation grows with a partition's write rate: idle partitions hold a block,
busy ones reach the configured step."""

from __future__ import annotations

import asyncio
from pathlib import Path

from laminar.log import LogConfig, SegmentedLog
from laminar.log.commit import MIN_PREALLOCATE_BYTES, Reservation

MiB = 1 << 20


def allocated(directory: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in directory.iterdir())


def test_an_idle_partition_reserves_a_block_not_the_configured_step(tmp_path: Path) -> None:
    async def main() -> None:
        log = await SegmentedLog.open(tmp_path, LogConfig(preallocate_bytes=4 * MiB))
        await log.append([b"x" * 100])
        # one block of store, one of index (the configured step is 4 MiB)
        assert allocated(tmp_path) <= 2 * MIN_PREALLOCATE_BYTES
        await log.close()

    asyncio.run(main())


def test_the_step_doubles_while_refilled_quickly_and_shrinks_when_not() -> None:
    now = [0.0]
    reservation = Reservation(4 * MiB, clock=lambda: now[0])
    steps = []
    for _ in range(14):
        now[0] += 0.01  # a busy partition: every reservation used up at once
        steps.append(reservation.next_step())
    assert steps[-1] == 4 * MiB and steps == sorted(steps)
    assert steps[1] == 2 * steps[0]
    now[0] += 60  # then idle for a minute
    assert reservation.next_step() == 2 * MiB
