"""Failures end to end: the log fails loudly, keeps every acknowledged record,
and serves nothing it cannot verify.

Faults are injected on all three backends (`faults.py`): EIO and ENOSPC on
write and on fsync, short writes, failed unlinks. Failures that need a precise
interleaving (an fsync held in flight, fsyncgate's clean-but-lost pages) run
on the simulated disk.
"""

from __future__ import annotations

import asyncio
import errno

import pytest

from laminar.log import Fault, LogConfig, LogFailed, SegmentedLog, SimulatedDisk

from .conftest import LogEnv
from .faults import Plan, inject, install_ring_faults
from .machine import Machine

DIRECTORY = "/data/partitions/3-0"


def values(n: int) -> list[bytes]:
    return [bytes([n % 251]) * (40 + k) for k in range(3)]


async def read_all(log: SegmentedLog) -> list[bytes]:
    out: list[bytes] = []
    index = log.lowest_index
    while index < log.highest_index:
        got = await log.read_range(index, 1 << 30)
        out += [r.value for r in got]
        index = got[-1].index + 1
    return out


def clear_faults(env: LogEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    if isinstance(env.backend, SimulatedDisk):
        env.backend.faults.clear()
    elif env.kind == "uring":
        install_ring_faults()
    monkeypatch.undo()


@pytest.mark.parametrize(
    ("op", "error", "short"),
    [
        ("write", errno.EIO, False),
        ("write", errno.ENOSPC, False),
        ("sync", errno.EIO, False),
        ("sync", errno.ENOSPC, False),
    ],
)
def test_a_failed_write_or_sync_fails_the_log_and_keeps_what_was_acknowledged(
    env: LogEnv, monkeypatch: pytest.MonkeyPatch, op: str, error: int, short: bool
) -> None:
    async def main() -> None:
        log = await SegmentedLog.open(env.directory, LogConfig(), backend=env.backend)
        acked: list[bytes] = []
        for n in range(3):
            await log.append(values(n))
            acked += values(n)
        inject(env.kind, env.backend, Plan(op, error, short=short), monkeypatch)  # type: ignore[arg-type]
        with pytest.raises(LogFailed, match="appends are refused until the log is reopened"):
            await log.append(values(9))
        with pytest.raises(LogFailed):
            await log.append(values(10))  # and every later one
        assert await read_all(log) == acked  # what was published is still served
        await log.close()
        clear_faults(env, monkeypatch)
        log = await SegmentedLog.open(env.directory, LogConfig(), backend=env.backend)
        got = await read_all(log)
        assert got in (acked, acked + values(9)), "only the failed batch, whole, may remain"
        assert await log.append([b"after"]) == len(got)
        await log.close()

    env.run(main)


# Not on the simulated disk: its short write ends in an error (see the next test).
@pytest.mark.parametrize("env", ["syscall", "uring"], indirect=True)
def test_short_writes_are_finished_not_lost(env: LogEnv, monkeypatch: pytest.MonkeyPatch) -> None:

    async def main() -> None:
        log = await SegmentedLog.open(env.directory, LogConfig(), backend=env.backend)
        inject(env.kind, env.backend, Plan("write", short=True, times=4), monkeypatch)
        expected: list[bytes] = []
        for n in range(5):
            await log.append(values(n))
            expected += values(n)
        await log.close()
        clear_faults(env, monkeypatch)
        log = await SegmentedLog.open(env.directory, LogConfig(), backend=env.backend)
        assert await read_all(log) == expected
        await log.close()

    env.run(main)


@pytest.mark.parametrize("env", ["uring"], indirect=True)  # the write -> fdatasync chain
def test_a_failed_fsync_is_never_retried_even_when_the_write_was_redone(env: LogEnv) -> None:
    """io_uring: a short write breaks the write -> fdatasync chain and is redone;
    if the chain's fdatasync failed, that failure stands (a second fdatasync would
    report success for pages the kernel already gave up on)."""

    async def main() -> None:
        log = await SegmentedLog.open(env.directory, LogConfig(), backend=env.backend)
        await log.append(values(0))
        install_ring_faults(Plan("write", short=True), Plan("sync", errno.EIO))
        with pytest.raises(LogFailed):
            await log.append(values(1))
        install_ring_faults()
        await log.close()

    env.run(main)


def test_a_write_that_runs_out_of_space_midway_fails_the_log() -> None:
    machine = Machine()
    log = machine.run(SegmentedLog.open(DIRECTORY, backend=machine.disk))
    machine.run(log.append(values(0)))
    machine.disk.inject(Fault("write", errno.ENOSPC, ".store", short=True))
    with pytest.raises(LogFailed):
        machine.run(log.append(values(1)))
    machine.run(log.close())
    machine.power_cut(0)
    log = machine.run(SegmentedLog.open(DIRECTORY, backend=machine.disk))
    assert machine.run(read_all(log)) == values(0)
    machine.run(log.close())


def test_a_failed_store_write_leaves_no_index_write_running_after_close() -> None:
    """The commit waits for both writes, so close never pulls a file from under one
    (with real descriptors, the number could already belong to another file)."""
    machine = Machine()
    disk = machine.disk
    log = machine.run(SegmentedLog.open(DIRECTORY, backend=disk))
    machine.run(log.append(values(0)))
    gate = asyncio.Event()
    disk.inject(Fault("write", errno.EIO, ".store"))
    disk.inject(Fault("sync", 0, ".index", gate=gate))  # hold the index's sync in flight

    async def scenario() -> None:
        appending = asyncio.ensure_future(log.append(values(1)))
        for _ in range(50):
            await asyncio.sleep(0)
        closing = asyncio.ensure_future(log.close())
        for _ in range(50):
            await asyncio.sleep(0)
        gate.set()
        with pytest.raises(LogFailed):
            await appending
        await closing
        for _ in range(50):
            await asyncio.sleep(0)

    machine.run(scenario())
    assert disk.misuse == []


def test_after_a_failed_fsync_close_cuts_the_files_back_to_what_was_published() -> None:
    machine = Machine()
    disk = machine.disk
    log = machine.run(SegmentedLog.open(DIRECTORY, LogConfig(preallocate_bytes=0), backend=disk))
    machine.run(log.append(values(0)))
    store = f"{DIRECTORY}/{0:020d}.store"
    published = disk.size(store)
    disk.inject(Fault("sync", errno.EIO, ".store"))
    with pytest.raises(LogFailed):
        machine.run(log.append(values(1)))
    assert disk.size(store) > published  # the cache still shows the failed flush
    machine.run(log.close())
    assert disk.size(store) == published


def test_reopen_after_a_failed_fsync_reads_the_disk_not_the_page_cache() -> None:
    """fsyncgate: the failed flush's pages are clean but were never written. A
    process that dies then leaves them in the cache; recovery must not trust them."""
    machine = Machine()
    disk = machine.disk
    log = machine.run(SegmentedLog.open(DIRECTORY, LogConfig(preallocate_bytes=0), backend=disk))
    machine.run(log.append(values(0)))
    disk.inject(Fault("sync", errno.EIO, ".store"))
    with pytest.raises(LogFailed):
        machine.run(log.append(values(1)))
    machine.kill()  # no close: the failed flush stays in the page cache
    log = machine.run(SegmentedLog.open(DIRECTORY, backend=disk))
    assert machine.run(read_all(log)) == values(0)
    machine.run(log.append([b"next"]))
    machine.power_cut(1)
    log = machine.run(SegmentedLog.open(DIRECTORY, backend=disk))
    assert machine.run(read_all(log)) == [*values(0), b"next"]
    machine.run(log.close())


def test_a_failed_interval_sync_fails_the_log() -> None:
    machine = Machine()
    disk = machine.disk
    config = LogConfig(flush="interval", flush_interval_ms=1)
    log = machine.run(SegmentedLog.open(DIRECTORY, config, backend=disk))
    disk.inject(Fault("sync", errno.EIO, ".store"))

    async def scenario() -> None:
        await log.append(values(0))  # acknowledged from the page cache, as "interval" says
        for _ in range(2000):
            await asyncio.sleep(0.001)
            try:
                await log.append(values(1))
            except LogFailed:
                return
        raise AssertionError("the failed sync was swallowed: appends are still acknowledged")

    machine.run(scenario())
    machine.run(log.close())


def test_an_interval_sync_in_flight_does_not_stop_appends() -> None:
    """The background sync holds no lock across its fsyncs."""
    machine = Machine()
    disk = machine.disk
    config = LogConfig(flush="interval", flush_interval_ms=1)
    log = machine.run(SegmentedLog.open(DIRECTORY, config, backend=disk))
    gate = asyncio.Event()
    held = disk.inject(Fault("sync", 0, ".store", gate=gate, times=None))

    async def scenario() -> None:
        try:
            await log.append(values(0))
            while not held.hits:
                await asyncio.sleep(0.001)
            # A sync is in flight (and held): appends still complete.
            for n in range(1, 4):
                await asyncio.wait_for(log.append(values(n)), 10)
        finally:
            gate.set()
            await log.close()

    machine.run(scenario())


def test_what_an_interval_sync_covered_survives_a_power_cut() -> None:
    for seed in range(6):
        machine = Machine()
        config = LogConfig(flush="interval", flush_interval_ms=1, preallocate_bytes=0)
        log = machine.run(SegmentedLog.open(DIRECTORY, config, backend=machine.disk))

        async def scenario(log: SegmentedLog = log) -> None:
            for n in range(3):
                await log.append(values(n))
            synced = log._pipeline  # wait until a sync covering all three completed
            while synced._synced is None or synced._synced[1] < 9:
                await asyncio.sleep(0.001)

        machine.run(scenario())
        machine.power_cut(seed)
        log = machine.run(SegmentedLog.open(DIRECTORY, config, backend=machine.disk))
        assert machine.run(read_all(log))[:9] == [v for n in range(3) for v in values(n)]
        machine.run(log.close())
        machine.close()


@pytest.mark.parametrize("which", ["index", "store"])
def test_a_failed_unlink_in_retention_keeps_the_log_consistent(
    env: LogEnv, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    """Removal unlinks the index first (then syncs the directory), then the store."""

    async def main() -> None:
        config = LogConfig(segment_bytes=200, retention_bytes=300)
        log = await SegmentedLog.open(
            env.directory, LogConfig(segment_bytes=200), backend=env.backend
        )
        expected: list[bytes] = []
        for n in range(12):
            await log.append(values(n))
            expected += values(n)
        await log.close()
        log = await SegmentedLog.open(env.directory, config, backend=env.backend)
        segments = log.segment_count
        plan = Plan("unlink", after=0 if which == "index" else 1)
        inject(env.kind, env.backend, plan, monkeypatch)
        with pytest.raises(OSError):
            await log.apply_retention()
        # Consistent either way: every record the log still claims can be read.
        low = log.lowest_index
        assert await read_all(log) == expected[low:]
        assert log.segment_count == segments - (0 if which == "index" else 1)
        clear_faults(env, monkeypatch)
        assert await log.apply_retention() > 0
        low = log.lowest_index
        assert await read_all(log) == expected[low:]
        await log.close()
        log = await SegmentedLog.open(env.directory, config, backend=env.backend)
        assert (log.lowest_index, await read_all(log)) == (low, expected[low:])
        await log.close()

    env.run(main)


def test_a_failed_unlink_in_truncate_fails_the_log_and_reopen_recovers() -> None:
    machine = Machine()
    disk = machine.disk
    config = LogConfig(segment_bytes=200)
    log = machine.run(SegmentedLog.open(DIRECTORY, config, backend=disk))
    expected: list[bytes] = []
    for n in range(12):
        machine.run(log.append(values(n)))
        expected += values(n)
    assert log.segment_count > 3
    disk.inject(Fault("unlink", errno.EIO, after=1))
    with pytest.raises(OSError):
        machine.run(log.truncate(4))
    with pytest.raises(LogFailed):
        machine.run(log.append([b"must not land after a half-done truncation"]))
    machine.run(log.close())
    disk.faults.clear()
    log = machine.run(SegmentedLog.open(DIRECTORY, config, backend=disk))
    got = machine.run(read_all(log))
    assert len(got) >= 4
    assert got == expected[: len(got)]
    machine.run(log.truncate(4))
    assert machine.run(read_all(log)) == expected[:4]
    machine.run(log.close())


@pytest.mark.parametrize("flush", ["never", "interval"])
def test_crash_debris_under_relaxed_policies_is_trimmed_not_kept_as_holes(flush: str) -> None:
    """Unsynced flushes persist in any order: a lost one followed by many intact
    ones is crash debris (trimmed), not damage to acknowledged data."""
    for seed in range(30):
        machine = Machine()
        config = LogConfig(flush=flush, flush_interval_ms=3_600_000, preallocate_bytes=0)  # type: ignore[arg-type]
        log = machine.run(SegmentedLog.open(DIRECTORY, config, backend=machine.disk))
        appended: list[bytes] = []
        for n in range(40):
            machine.run(log.append(values(n)))
            appended += values(n)
        machine.power_cut(seed, loss=0.03)  # nearly everything arrived, but not all
        log = machine.run(SegmentedLog.open(DIRECTORY, config, backend=machine.disk))
        got = machine.run(read_all(log))  # raises RecordCorrupted if a hole was kept
        assert got == appended[: len(got)]
        assert len(got) % 3 == 0
        machine.run(log.close())
        machine.close()


def test_damage_before_a_durable_mark_is_kept_under_relaxed_policies() -> None:
    """The other side: once closed (synced, marked DURABLE), damage to an old record
    is damage, kept and reported, never a reason to trim what follows."""
    expected = [v for n in range(10) for v in values(n)]
    for seed in range(8):
        machine = Machine()
        config = LogConfig(flush="never", preallocate_bytes=0)
        log = machine.run(SegmentedLog.open(DIRECTORY, config, backend=machine.disk))
        for n in range(10):
            machine.run(log.append(values(n)))
        machine.run(log.close())
        machine.power_cut(seed)
        store = machine.disk.root
        for part in [*DIRECTORY.strip("/").split("/"), f"{0:020d}.store"]:
            store = store.entries[part]  # type: ignore[union-attr]
        store.cache[5] ^= 0xFF  # type: ignore[union-attr]
        store.disk[5] ^= 0xFF  # type: ignore[union-attr]
        log = machine.run(SegmentedLog.open(DIRECTORY, config, backend=machine.disk))
        assert log.highest_index == 30
        assert [r.value for r in machine.run(log.read_range(1, 1 << 30))] == expected[1:]
        machine.run(log.close())
        machine.close()
