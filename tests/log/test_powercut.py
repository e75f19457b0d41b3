"""Scenarios under power cuts at every point (CrashMonkey style).

Each scenario prepares a log, then runs one operation with the power cut after
k disk operations, for every k the operation performs and a few choices of
which unsynced writes survive; then the log is recovered and checked. The
operations are the ones Raft and retention lean on: truncate (across segments
and in the middle of a flush), rollover, retention, recovery itself, and close
under the relaxed flush policies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from laminar.log import LogConfig, SegmentedLog, SimulatedDisk
from laminar.log.index import ENTRY_BYTES, HEADER_BYTES

from .machine import Machine

DIRECTORY = "/data/partitions/1-0"


def batch(n: int, size: int = 20) -> list[bytes]:
    return [bytes([n % 251, k]) * (size // 2) for k in range(3)]


@dataclass
class World:
    """What a scenario's preparation left: the config and the expected records."""

    config: LogConfig
    records: list[bytes] = field(default_factory=list)
    lowest: int = 0
    clock: int = 0

    def clock_ms(self) -> int:
        self.clock += 1
        return self.clock

    async def open(self, disk: SimulatedDisk) -> SegmentedLog:
        return await SegmentedLog.open(DIRECTORY, self.config, backend=disk, clock_ms=self.clock_ms)


async def read_all(log: SegmentedLog) -> list[bytes]:
    out: list[bytes] = []
    index = log.lowest_index
    while index < log.highest_index:
        got = await log.read_range(index, 1 << 30)
        out += [r.value for r in got]
        index = got[-1].index + 1
    return out


Prepare = Callable[[SegmentedLog, World], Awaitable[SegmentedLog | None]]
Act = Callable[[SegmentedLog, World, dict[str, object]], Awaitable[None]]
Check = Callable[[SegmentedLog, World, dict[str, object]], Awaitable[None]]


def cut_everywhere(
    config: LogConfig,
    prepare: Prepare,
    act: Act,
    check: Check,
    *,
    then: Act | None = None,
    first_crash: str = "kill",
    make_world: Callable[[LogConfig], World] = World,
) -> int:
    """Run `act` once to count its disk operations; then for every cut point k,
    run it again with the disk stopped after k operations and `check` the log
    recovered from every state a power cut there could leave
    (`SimulatedDisk.every_power_cut`). Returns the number of cut points.

    With `then`, the first crash at the cut point is a kill (its page cache
    survives) or, with `first_crash="power"`, a power cut (a few of its
    states); the log is reopened, `then` run on it (notes["kept"] holds what
    recovery kept), and only then comes the power cut that `check` judges: what
    recovery kept, and what it changed, must be durable before it is built on.

    `make_world` may make a `World` whose `open` opens something else on the
    disk (a Raft replica's storage, a shard's partitions): the scenario's
    functions then get that."""

    def judge(disk: SimulatedDisk, world: World, notes: dict[str, object], label: str) -> None:
        for chooser in disk.every_power_cut():
            after = Machine(disk.clone())
            after.disk.power_cut(chooser)
            try:
                recovered = after.run(world.open(after.disk))
                after.run(check(recovered, world, notes))
                after.run(recovered.close())
            except Exception as exc:
                raise AssertionError(f"{label}, then a power cut ({chooser!r}): {exc}") from exc
            finally:
                after.close()

    def attempt(cut: int | None) -> int:
        world = make_world(config)
        machine = Machine()
        log = machine.run(world.open(machine.disk))
        log = machine.run(prepare(log, world)) or log
        before = len(machine.disk.journal)
        notes: dict[str, object] = {}
        if cut is not None:
            machine.disk.cut_power_after(cut)
        task = machine.run_until_frozen(act(log, world, notes))
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
        operations = len(machine.disk.journal) - before
        machine.kill()
        label = f"stopped after {cut} operations"
        if then is None:
            judge(machine.disk, world, notes, label)
        elif first_crash == "kill":
            log = machine.run(world.open(machine.disk))
            notes["kept"] = machine.run(read_all(log))
            machine.run(then(log, world, notes))
            machine.kill()
            judge(machine.disk, world, notes, f"{label}, killed, recovered, built on")
        else:
            for chooser in machine.disk.every_power_cut(exhaustive_max=3, samples=3):
                second = Machine(machine.disk.clone())
                second.disk.power_cut(chooser)
                log = second.run(world.open(second.disk))
                notes["kept"] = second.run(read_all(log))
                second.run(then(log, world, notes))
                second.kill()
                judge(second.disk, world, notes, f"{label}, power cut ({chooser!r}), built on")
                second.close()
        machine.close()
        return operations

    total = attempt(None)
    for cut in range(total + 1):
        attempt(cut)
    return total


async def append_flushes(log: SegmentedLog, world: World, count: int) -> None:
    for n in range(count):
        values = batch(n)
        await log.append(values, term=n)
        world.records += values


@pytest.mark.parametrize(
    ("segment_bytes", "earlier_truncate"), [(1 << 20, False), (70, False), (1 << 20, True)]
)
def test_truncate_never_loses_what_stays_and_never_brings_back_what_went(
    segment_bytes: int, earlier_truncate: bool
) -> None:
    """truncate(8) cuts the third flush (records 6-8) in the middle; with small
    segments it also removes whole segments after the cut. An earlier truncate
    leaves a DURABLE mark after the cut: cutting the store before the index
    would turn the records between into damage."""

    async def prepare(log: SegmentedLog, world: World) -> None:
        await append_flushes(log, world, 5)
        if earlier_truncate:
            await log.truncate(14)
            del world.records[14:]

    async def act(log: SegmentedLog, world: World, notes: dict[str, object]) -> None:
        await log.truncate(8)
        await log.append([b"after"], term=9)
        notes["appended"] = True

    async def check(log: SegmentedLog, world: World, notes: dict[str, object]) -> None:
        got = await read_all(log)
        assert log.lowest_index == 0
        assert got[:8] == world.records[:8], "records before the cut were lost"
        if "appended" in notes:
            assert got == [*world.records[:8], b"after"]
        elif len(got) > 8 and got[8] == b"after":
            assert got == [*world.records[:8], b"after"]  # the append landed, unacknowledged
        else:
            assert got == world.records[: len(got)]  # a prefix of the old log, cut at >= 8

    config = LogConfig(segment_bytes=segment_bytes, preallocate_bytes=0)
    assert cut_everywhere(config, prepare, act, check) > 5


def test_rollover_keeps_every_acknowledged_record() -> None:
    async def prepare(log: SegmentedLog, world: World) -> None:
        await append_flushes(log, world, 2)

    async def act(log: SegmentedLog, world: World, notes: dict[str, object]) -> None:
        acked: list[bytes] = []
        notes["acked"] = acked
        for n in range(10, 16):
            values = batch(n)
            await log.append(values)
            acked += values

    async def check(log: SegmentedLog, world: World, notes: dict[str, object]) -> None:
        got = await read_all(log)
        acked = notes.get("acked", [])
        assert isinstance(acked, list)
        assert got[: len(world.records) + len(acked)] == world.records + acked
        extra = got[len(world.records) + len(acked) :]
        assert len(extra) in (0, 3), "a batch must land whole or not at all"

    config = LogConfig(segment_bytes=50, preallocate_bytes=64)
    assert cut_everywhere(config, prepare, act, check) > 20


@pytest.mark.parametrize("retention", ["bytes", "age"])
def test_retention_removes_whole_oldest_segments_durably(retention: str) -> None:
    async def prepare(log: SegmentedLog, world: World) -> SegmentedLog:
        await append_flushes(log, world, 8)
        assert log.segment_count >= 6
        await log.close()
        world.config = retaining
        return await world.open(log._backend)

    async def act(log: SegmentedLog, world: World, notes: dict[str, object]) -> None:
        removed = await log.apply_retention(now_ms=world.clock + 1000)
        assert removed >= 3, "retention must actually remove segments"
        notes["lowest"] = log.lowest_index

    async def check(log: SegmentedLog, world: World, notes: dict[str, object]) -> None:
        got = await read_all(log)
        low = log.lowest_index
        if "lowest" in notes:
            assert low == notes["lowest"], "a removal that returned came back"
        assert got == world.records[low:], "retention may drop only whole oldest segments"
        assert log.highest_index == len(world.records)

    retaining = LogConfig(
        segment_bytes=50,
        retention_bytes=100 if retention == "bytes" else None,
        retention_ms=10 if retention == "age" else None,
    )
    assert cut_everywhere(LogConfig(segment_bytes=50), prepare, act, check) > 6


@pytest.mark.parametrize(
    ("first_crash", "follow_up"),
    [
        ("kill", "appends"),
        ("kill", "one_append"),
        ("kill", "roll_over_then_append"),
        ("power", "roll_over_then_append"),
    ],
)
def test_what_recovery_keeps_after_a_crash_is_durable_before_it_is_built_on(
    first_crash: str, follow_up: str
) -> None:
    """Killed (or powered off) at every point of appends that roll over,
    recovered, built on, then a power cut: everything recovery kept and
    everything acknowledged after it must be there. The follow-ups are chosen so
    that no later fsync covers for recovery: appends that roll over again (the
    old segment's data is never synced again), a single append (no later
    directory sync), a forced rollover first (the cut tail's index is never
    synced again)."""

    async def prepare(log: SegmentedLog, world: World) -> None:
        await append_flushes(log, world, 1)

    async def act(log: SegmentedLog, world: World, notes: dict[str, object]) -> None:
        await asyncio.gather(*(log.append(batch(n)) for n in range(10, 14)))

    async def after_kill(log: SegmentedLog, world: World, notes: dict[str, object]) -> None:
        acked: list[bytes] = []
        notes["acked"] = acked
        if follow_up == "roll_over_then_append":
            await log.roll_over()
        for n in range(20, 24 if follow_up == "appends" else 21):
            await log.append(batch(n))
            acked += batch(n)

    async def check(log: SegmentedLog, world: World, notes: dict[str, object]) -> None:
        kept, acked = notes["kept"], notes["acked"]
        assert isinstance(kept, list) and isinstance(acked, list)
        assert (await read_all(log))[: len(kept) + len(acked)] == kept + acked

    config = LogConfig(segment_bytes=100, preallocate_bytes=0, max_flushes_in_flight=4)
    assert (
        cut_everywhere(config, prepare, act, check, then=after_kill, first_crash=first_crash) > 10
    )


def test_recovery_itself_survives_a_power_cut() -> None:
    """Crash with flushes in flight, then cut the power during recovery."""

    async def prepare(log: SegmentedLog, world: World) -> None:
        await append_flushes(log, world, 3)

    async def act(log: SegmentedLog, world: World, notes: dict[str, object]) -> None:
        # A flush written but never synced nor marked complete: debris to trim.
        segment = log._segments[-1]
        store_at = segment.store_end
        index_at = HEADER_BYTES + segment.placed_entries * ENTRY_BYTES
        segment.place(batch(9), 0, 1, 0)
        await segment.store.writev(batch(9), store_at, sync=False)
        await segment.index.writev([bytes(segment.index_buf[index_at:])], index_at, sync=False)
        reopened = await world.open(log._backend)  # recovery; the old log is abandoned
        await reopened.append([b"acked"])
        notes["acked"] = True

    async def check(log: SegmentedLog, world: World, notes: dict[str, object]) -> None:
        got = await read_all(log)
        if "acked" in notes:
            assert got == [*world.records, b"acked"]
        else:
            assert got in (world.records, [*world.records, b"acked"])

    config = LogConfig(segment_bytes=1 << 20, preallocate_bytes=0)
    assert cut_everywhere(config, prepare, act, check) > 5


def test_a_killed_process_leaves_its_page_cache_which_recovery_makes_durable() -> None:
    """SIGKILL with flushes written but unsynced, reopen, append, power cut: the
    records appended after recovery (acknowledged) must survive, so recovery
    must have synced what it kept before appending after it."""
    for seed in range(40):
        world = World(LogConfig(flush="never", preallocate_bytes=0))
        machine = Machine()
        log = machine.run(world.open(machine.disk))
        machine.run(append_flushes(log, world, 3))
        machine.kill()  # the cache holds the three flushes, the disk none of them
        log = machine.run(world.open(machine.disk))
        kept = machine.run(read_all(log))
        machine.run(log.close())
        log = machine.run(
            SegmentedLog.open(DIRECTORY, LogConfig(), backend=machine.disk, clock_ms=world.clock_ms)
        )
        machine.run(log.append([b"acknowledged"]))
        machine.power_cut(seed)
        log = machine.run(world.open(machine.disk))
        assert machine.run(read_all(log)) == [*kept, b"acknowledged"]
        machine.close()


@pytest.mark.parametrize("flush", ["never", "interval"])
def test_relaxed_policies_are_durable_once_closed(flush: str) -> None:
    async def prepare(log: SegmentedLog, world: World) -> None:
        await append_flushes(log, world, 4)

    async def act(log: SegmentedLog, world: World, notes: dict[str, object]) -> None:
        await log.close()
        notes["closed"] = True

    async def check(log: SegmentedLog, world: World, notes: dict[str, object]) -> None:
        got = await read_all(log)
        if "closed" in notes:
            assert got == world.records
        else:
            assert got == world.records[: len(got)]

    config = LogConfig(segment_bytes=100, flush=flush, flush_interval_ms=60_000)  # type: ignore[arg-type]
    assert cut_everywhere(config, prepare, act, check) > 3


def test_reset_leaves_a_suffix_of_the_old_log_or_an_empty_one() -> None:
    """Raft's install-past-the-end: `reset(100)`; a crash part-way leaves a suffix
    of the old segments or an empty log, never a damaged one."""

    async def prepare(log: SegmentedLog, world: World) -> None:
        await append_flushes(log, world, 6)

    async def act(log: SegmentedLog, world: World, notes: dict[str, object]) -> None:
        await log.reset(100)
        notes["reset"] = True

    async def check(log: SegmentedLog, world: World, notes: dict[str, object]) -> None:
        got = await read_all(log)
        if "reset" in notes:
            assert (log.lowest_index, log.highest_index) == (100, 100)
        elif got:
            assert got == world.records[log.lowest_index :]  # a suffix, whole segments
            assert log.highest_index == len(world.records)
        else:
            assert log.lowest_index in (0, 100)

    config = LogConfig(segment_bytes=100, preallocate_bytes=0)
    assert cut_everywhere(config, prepare, act, check) > 6
