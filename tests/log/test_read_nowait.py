"""`read_batch_nowait`: the batch `read_batch` gives, or None, never anything else.

A shard answers a fetch without a task when the records' bytes are in the page
cache (`SegmentedLog.read_batch_nowait`). That path must verify exactly as the
general one does: same records, same cut before damage, nothing it could not
check, and None (never a guess) when it would have to wait for the device.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar.log import LogBatch, LogConfig, RecordCorrupted, SegmentedLog
from laminar.log.storage import SyscallStorage
from tests.log.conftest import LogEnv

CONFIG = LogConfig(segment_bytes=64 << 10, flush="always")
VALUES = [bytes([i % 251]) * (50 + 37 * i % 900) for i in range(300)]


def same(a: LogBatch, b: LogBatch) -> bool:
    return (a.first_index, list(a.terms), list(a.timestamps_ms), list(a.lengths)) == (
        b.first_index,
        list(b.terms),
        list(b.timestamps_ms),
        list(b.lengths),
    ) and bytes(a.payload) == bytes(b.payload)


async def filled(env: LogEnv) -> SegmentedLog:
    log = await SegmentedLog.open(env.directory, CONFIG, backend=env.backend)
    for at in range(0, len(VALUES), 7):
        await log.append(VALUES[at : at + 7], term=at)
    return log


# Not on the simulated disk: it always says 'would block' (its reads can fault).
@pytest.mark.parametrize("env", ["syscall", "uring"], indirect=True)
def test_nowait_gives_the_batch_read_batch_gives(env: LogEnv) -> None:

    async def main() -> None:
        log = await filled(env)
        assert len(log._segments) > 2  # reads stop at segment ends: cover several
        for start in (0, 1, 6, 7, 99, 150, len(VALUES) - 1, len(VALUES)):
            for max_bytes, max_records in ((1, None), (5000, None), (1 << 30, 3), (1 << 30, None)):
                batch = await log.read_batch(start, max_bytes, max_records)
                fast = log.read_batch_nowait(start, max_bytes, max_records)
                assert fast is not None, (start, max_bytes, max_records)
                assert same(fast, batch), (start, max_bytes, max_records)
        # Whatever read_batch refuses, nowait leaves to it.
        assert log.read_batch_nowait(len(VALUES) + 1) is None
        assert log.read_batch_nowait(0, max_bytes=0) is None
        await log.close()
        assert log.read_batch_nowait(0) is None

    env.run(main)


def test_nowait_never_serves_bytes_damaged_after_the_log_opened(tmp_path: Path) -> None:
    """Store bytes that change under an open log (a bad disk, a stray writer) are
    caught on the fast path too: the batch stops before the damaged record, and
    a read starting at it is left to `read_batch`, which raises."""
    env = LogEnv("syscall", tmp_path)
    victim = 120

    async def main() -> None:
        log = await filled(env)
        segment = log._segment_for(victim)
        position = segment._entry(victim)[0]
        store_path = os.path.join(env.directory, f"{segment.base_index:020d}.store")
        fd = os.open(store_path, os.O_RDWR)
        try:
            os.pwrite(fd, bytes([VALUES[victim][0] ^ 0x5A]), position + 3)
        finally:
            os.close(fd)
        before = segment.base_index
        fast = log.read_batch_nowait(before, 1 << 30)
        assert fast is not None
        assert fast.end_index == victim  # stops before the damage
        assert bytes(fast.payload) == b"".join(VALUES[before:victim])
        assert log.read_batch_nowait(victim, 1 << 30) is None
        with pytest.raises(RecordCorrupted):
            await log.read_batch(victim, 1 << 30)
        await log.close()

    env.run(main)


def _misses_once_dropped(fd: int, probe: Callable[[], object], tries: int = 5) -> bool:
    """Whether `probe` answers None right after the file's pages are dropped
    from the cache, in one of `tries`: a probe that misses may start the
    kernel's readahead, which can refill the cache before the next one."""
    for _ in range(tries):
        os.fdatasync(fd)  # clean pages can be dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if probe() is None:
            return True
    return False


def test_nowait_leaves_reads_from_the_device_to_read_batch(tmp_path: Path) -> None:
    """Pages dropped from the cache would make the read wait for the disk:
    `read_at_nowait` says None and `read_batch` (which may wait) serves it."""
    env = LogEnv("syscall", tmp_path)

    async def main() -> None:
        log = await filled(env)
        segment = log._segment_for(0)
        store = segment.store
        assert isinstance(store, SyscallStorage)
        assert _misses_once_dropped(store._fd, lambda: store.read_at_nowait(4096, 0))
        assert _misses_once_dropped(store._fd, lambda: log.read_batch_nowait(0, 1 << 30))
        batch = await log.read_batch(0, 1 << 30)
        assert bytes(batch.payload) == b"".join(VALUES[: batch.end_index])
        await log.close()

    env.run(main)
