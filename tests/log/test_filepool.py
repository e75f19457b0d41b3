"""The file pool: many logs within a small budget of open files, and the
durability story unchanged while their files are closed and reopened."""

from __future__ import annotations

import asyncio
import errno
import os

import pytest

from laminar.log import Fault, LogConfig, LogFailed, SegmentedLog, SimulatedDisk, SyscallBackend
from laminar.log.filepool import FilePool
from laminar.log.storage import StorageBackend

from .machine import Machine

ROOT = "/data/partitions"


def values(log_no: int, round_no: int) -> list[bytes]:
    """Records that name their log and round: checked by identity, not count."""
    return [f"log{log_no}-round{round_no}-{k}".encode() for k in range(3)]


async def open_logs(backend: StorageBackend, count: int, config: LogConfig) -> list[SegmentedLog]:
    return [await SegmentedLog.open(f"{ROOT}/1-{n}", config, backend=backend) for n in range(count)]


async def read_all(log: SegmentedLog) -> list[bytes]:
    got = await log.read_range(log.lowest_index, 1 << 30) if log.highest_index else []
    return [r.value for r in got]


async def first_of_two(
    config: LogConfig,
) -> tuple[SimulatedDisk, FilePool, StorageBackend, SegmentedLog]:
    """A pool of two files on a simulated disk, and log 1-0 holding b"a"."""
    disk = SimulatedDisk()
    pool = FilePool(2)
    backend = pool.backend(disk)
    first = await SegmentedLog.open(f"{ROOT}/1-0", config, backend=backend)
    await first.append([b"a"])
    return disk, pool, backend, first


def test_many_logs_stay_within_the_budget_and_read_and_append_after_reopening() -> None:
    async def main() -> None:
        disk = SimulatedDisk()
        pool = FilePool(6)
        config = LogConfig(flush="always", segment_bytes=200)
        logs = await open_logs(pool.backend(disk), 40, config)
        expected: dict[int, list[bytes]] = {n: [] for n in range(40)}
        for round_no in range(4):  # small segments: rollovers create files too
            for n, log in enumerate(logs):
                batch = values(n, round_no)
                await log.append(batch)
                expected[n] += batch
                assert pool.open_files <= pool.open_files_max
        assert pool.open_files_peak <= pool.open_files_max
        assert pool.reopens > 0 and pool.evictions > 0
        for n, log in enumerate(logs):  # reads reopen closed files
            assert await read_all(log) == expected[n]
        assert disk.closed_unsynced == [] and disk.misuse == []
        for log in logs:
            await log.close()
        assert pool.open_files == 0
        # A restart on the plain disk recovers every record of every log.
        for n, log in enumerate(await open_logs(disk, 40, config)):
            assert await read_all(log) == expected[n]
            await log.close()

    asyncio.run(main())


def test_files_in_use_are_never_closed_under_concurrent_appends() -> None:
    """Twenty logs append at once over a budget of four files: the pool must
    wait for no one and close nothing an operation is using (the disk yields
    on every operation, so operations interleave)."""

    async def main() -> None:
        disk = SimulatedDisk(yield_every_op=True)
        pool = FilePool(4)
        config = LogConfig(flush="always", max_flushes_in_flight=4)
        logs = await open_logs(pool.backend(disk), 20, config)
        for round_no in range(3):
            await asyncio.gather(*(log.append(values(n, round_no)) for n, log in enumerate(logs)))
        assert disk.misuse == []
        for n, log in enumerate(logs):
            assert await read_all(log) == [v for r in range(3) for v in values(n, r)]
            await log.close()
        assert pool.open_files == 0

    asyncio.run(main())


@pytest.mark.parametrize("flush", ["interval", "never"])
def test_the_pool_syncs_a_file_before_it_closes_it(flush: str) -> None:
    """Under the relaxed policies files hold unsynced writes: the pool must
    sync them first (or it would close a file with an fsync pending)."""

    async def main() -> None:
        disk = SimulatedDisk()
        pool = FilePool(4)
        config = LogConfig(flush=flush, flush_interval_ms=1)  # type: ignore[arg-type]
        logs = await open_logs(pool.backend(disk), 12, config)
        for round_no in range(3):
            for n, log in enumerate(logs):
                await log.append(values(n, round_no))
        assert pool.evictions > 0 and pool.eviction_syncs > 0
        assert disk.closed_unsynced == [], "a file was closed with unsynced writes"
        for log in logs:
            await log.close()

    asyncio.run(main())


def test_a_failed_sync_before_closing_fails_the_owners_next_durable_write() -> None:
    """The pool's own fdatasync can fail (fsyncgate: the pages are then clean
    and no later fsync retries them): its owner must hear of it, not the pool
    alone, or the log would acknowledge records the disk lost."""

    async def main() -> None:
        config = LogConfig(flush="always", preallocate_bytes=0)
        disk, _, backend, first = await first_of_two(config)
        store = first._segments[-1].store  # the pooled file itself
        await store.truncate(store.size)  # a change no sync covered yet
        disk.inject(Fault("sync", path_contains="1-0/", times=None))
        second = await SegmentedLog.open(f"{ROOT}/1-1", config, backend=backend)
        await second.append([b"b"])
        disk.faults.clear()  # the disk is fine again: only the pool saw the error
        with pytest.raises(LogFailed):
            await first.append([b"c"])
        await first.close()
        await second.close()

    asyncio.run(main())


def test_a_log_closing_while_the_pool_syncs_its_file_waits_for_the_sync() -> None:
    """The pool's sync before an eviction is an operation the log does not know
    of: closing the file under it would hand the descriptor (or its number,
    reused) to a sync that has not run yet."""

    async def main() -> None:
        config = LogConfig(flush="always", preallocate_bytes=0)
        disk, pool, backend, first = await first_of_two(config)
        index = first._segments[-1].index  # the pooled file itself
        await index.truncate(index.size)  # a change no sync covered yet
        gate = asyncio.Event()
        disk.inject(Fault("sync", error=0, path_contains="1-0/", gate=gate, times=None))
        opening = asyncio.create_task(SegmentedLog.open(f"{ROOT}/1-1", config, backend=backend))
        for _ in range(100):
            if pool.eviction_syncs:  # the pool is syncing 1-0's index to close it
                break
            await asyncio.sleep(0)
        assert pool.eviction_syncs
        closing = asyncio.create_task(first.close())
        for _ in range(10):
            await asyncio.sleep(0)
        gate.set()
        second = await opening
        await closing
        assert disk.misuse == []
        await second.close()

    asyncio.run(main())


def test_a_power_cut_anywhere_keeps_what_was_acknowledged_while_files_come_and_go() -> None:
    """Two logs share a budget of two files, so every append closes the other
    log's files and reopens its own. For every point the power can go out and
    every state it can leave, each log recovers every acknowledged record,
    whole batches only."""
    config = LogConfig(flush="always", preallocate_bytes=0, segment_bytes=120)

    def attempt(cut: int | None) -> int:
        machine = Machine()
        pool = FilePool(2)
        backend = pool.backend(machine.disk)
        logs = machine.run(open_logs(backend, 2, config))
        acked: dict[int, list[bytes]] = {0: [], 1: []}
        before = len(machine.disk.journal)
        if cut is not None:
            machine.disk.cut_power_after(cut)

        async def act() -> None:
            for round_no in range(3):
                for n, log in enumerate(logs):
                    batch = values(n, round_no)
                    await log.append(batch)
                    acked[n] += batch

        machine.run_until_frozen(act())
        operations = len(machine.disk.journal) - before
        machine.kill()
        for chooser in machine.disk.every_power_cut(exhaustive_max=4, samples=6):
            after = Machine(machine.disk.clone())
            after.disk.power_cut(chooser)
            for n, log in enumerate(after.run(open_logs(after.disk, 2, config))):
                got = after.run(read_all(log))
                label = f"cut after {cut} operations, {chooser!r}, log {n}"
                assert got[: len(acked[n])] == acked[n], f"{label}: acknowledged records lost"
                assert len(got) - len(acked[n]) in (0, 3), f"{label}: a torn batch"
                after.run(log.close())
            after.close()
        machine.close()
        return operations

    total = attempt(None)
    assert total > 20
    for cut in range(total + 1):
        attempt(cut)


def test_real_descriptors_stay_within_the_budget(tmp_path: object) -> None:
    """On real files: 200 logs, a budget of 16 files, the process's descriptors
    grow by about the budget, not by two per log."""

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    async def main() -> None:
        pool = FilePool(16)
        config = LogConfig(flush="always")
        backend = pool.backend(SyscallBackend())
        base = fds()
        logs = [
            await SegmentedLog.open(os.path.join(str(tmp_path), f"1-{n}"), config, backend=backend)
            for n in range(200)
        ]
        for n, log in enumerate(logs):
            await log.append(values(n, 0))
            assert fds() - base <= pool.open_files_max + 2  # + a directory being synced
        for n, log in enumerate(logs):
            assert await read_all(log) == values(n, 0)
            await log.append(values(n, 1))
            assert await read_all(log) == values(n, 0) + values(n, 1)
        for log in logs:
            await log.close()
        assert fds() == base

    asyncio.run(main())


def test_a_file_removed_while_closed_fails_its_log_loudly() -> None:
    async def main() -> None:
        config = LogConfig(flush="always")
        disk, _, backend, first = await first_of_two(config)
        second = await SegmentedLog.open(f"{ROOT}/1-1", config, backend=backend)
        await second.append([b"b"])
        await disk.remove(f"{ROOT}/1-0/{0:020d}.store")
        with pytest.raises(LogFailed) as failed:
            await first.append([b"c"])
        assert isinstance(failed.value.__cause__, OSError)
        assert failed.value.__cause__.errno == errno.ENOENT
        with pytest.raises(FileNotFoundError):  # cutting it back needs the file
            await first.close()
        assert await read_all(second) == [b"b"]  # the other log is unaffected
        await second.close()

    asyncio.run(main())
