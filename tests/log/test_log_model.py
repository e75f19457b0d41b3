"""Random operations against a list model, with SIGKILLs and power cuts.

The log runs on the power-cut simulator (`laminar.log.simdisk`). The model is
a list of (value, term) and a lowest index. After every step the log must
agree with it. A kill or power cut can strike while a sequence of operations
runs (after a random number of disk operations) or when all is idle; the
recovered log must then hold every acknowledged record, in place and intact,
anything more must be what was in flight (whole batches, in order), and a
truncation or retention in flight may have happened or not, never half-way in
a way that loses what stays.

Each simulated process gets its own event loop; a dead process's tasks are
cancelled, and every handle it held is dead, so it cannot touch the disk again.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any

from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from laminar.log import LogConfig, SegmentedLog

from .machine import Machine

DIRECTORY = "/data/partitions/7-0"
EXAMPLES = int(os.environ.get("LAMINAR_MODEL_EXAMPLES", "60"))
values_strategy = st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=8)
action_strategy = st.one_of(
    st.tuples(st.just("append"), st.lists(values_strategy, min_size=1, max_size=4)),
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("retention"), st.just(0.0)),
    st.tuples(st.just("reopen"), st.just(0.0)),
)


class LogMachine(RuleBasedStateMachine):
    """Drives one log on the simulated disk (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.machine = Machine()
        self.disk = self.machine.disk
        self.model: list[tuple[bytes, int]] = []
        self.lowest = 0
        self.now_ms = 0
        self.log: SegmentedLog | None = None

    # -- helpers ----------------------------------------------------------------

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.machine.run(coro)

    def clock_ms(self) -> int:
        """A deterministic clock: a millisecond passes whenever it is read."""
        self.now_ms += 1
        return self.now_ms

    def open_log(self) -> SegmentedLog:
        self.log = self.run(
            SegmentedLog.open(DIRECTORY, self.config, backend=self.disk, clock_ms=self.clock_ms)
        )
        return self.log

    def crash(self, kill: bool, seed: int) -> None:
        self.log = None  # it belonged to the dead process
        if kill:
            self.machine.kill()
        else:
            self.machine.power_cut(seed)

    def read_all(self, log: SegmentedLog) -> list[tuple[bytes, int]]:
        out: list[tuple[bytes, int]] = []
        index = log.lowest_index
        while index < log.highest_index:
            records = self.run(log.read_range(index, 1 << 30))
            out += [(r.value, r.term) for r in records]
            index = records[-1].index + 1
        return out

    def after_append(self, log: SegmentedLog) -> None:
        """Rollover may have applied retention: follow the log's lowest index."""
        dropped = log.lowest_index - self.lowest
        assert 0 <= dropped <= len(self.model)
        del self.model[:dropped]
        self.lowest = log.lowest_index

    # -- set-up -----------------------------------------------------------------

    @initialize(
        segment_bytes=st.sampled_from([200, 700, 5000]),
        preallocate=st.sampled_from([0, 512]),
        in_flight=st.sampled_from([1, 3, 16]),
        retention=st.sampled_from([None, "bytes", "age"]),
    )
    def open_first(
        self, segment_bytes: int, preallocate: int, in_flight: int, retention: str | None
    ) -> None:
        self.config = LogConfig(
            segment_bytes=segment_bytes,
            overflow_bytes=segment_bytes * 4,
            preallocate_bytes=preallocate,
            max_flushes_in_flight=in_flight,
            retention_bytes=2000 if retention == "bytes" else None,
            retention_ms=50 if retention == "age" else None,
        )
        self.open_log()

    # -- ordinary operations ------------------------------------------------------

    @rule(values=values_strategy, term=st.integers(0, 5))
    def append(self, values: list[bytes], term: int) -> None:
        assert self.log is not None
        first = self.run(self.log.append(values, term=term))
        assert first == self.lowest + len(self.model)
        self.model += [(v, term) for v in values]
        self.after_append(self.log)

    @rule(batches=st.lists(values_strategy, min_size=2, max_size=6))
    def append_concurrently(self, batches: list[list[bytes]]) -> None:
        assert self.log is not None
        log = self.log

        async def go() -> list[int]:
            return list(await asyncio.gather(*(log.append(b, term=3) for b in batches)))

        firsts = self.run(go())
        # Concurrent batches land whole and in the order they were staged.
        assert firsts == sorted(firsts)
        for first, batch in zip(firsts, batches, strict=True):
            assert first == self.lowest + len(self.model)
            self.model += [(v, 3) for v in batch]
        self.after_append(log)

    @rule(data=st.data())
    def read_one(self, data: st.DataObject) -> None:
        assert self.log is not None
        if not self.model:
            return
        i = data.draw(st.integers(0, len(self.model) - 1))
        record = self.run(self.log.read(self.lowest + i))
        assert (record.value, record.term) == self.model[i]

    @rule(data=st.data(), max_bytes=st.integers(1, 2000), max_records=st.integers(1, 30))
    def read_range(self, data: st.DataObject, max_bytes: int, max_records: int) -> None:
        assert self.log is not None
        i = data.draw(st.integers(0, len(self.model)))
        got = self.run(self.log.read_range(self.lowest + i, max_bytes, max_records))
        expected = self.model[i : i + max_records]
        assert [(r.value, r.term) for r in got] == expected[: len(got)]
        if i < len(self.model):
            assert got, "read_range must return at least one record"
        if len(got) < len(expected):  # stopped by the byte budget, and not earlier
            used = sum(len(r.value) for r in got)
            assert used <= max_bytes or len(got) == 1
            assert used + len(expected[len(got)][0]) > max_bytes

    @rule(data=st.data(), max_bytes=st.integers(1, 2000), max_records=st.integers(1, 30))
    def read_batch(self, data: st.DataObject, max_bytes: int, max_records: int) -> None:
        assert self.log is not None
        i = data.draw(st.integers(0, len(self.model)))
        batch = self.run(self.log.read_batch(self.lowest + i, max_bytes, max_records))
        got = [(r.value, r.term) for r in batch.records()]
        assert got == self.model[i : i + len(got)]  # may stop early at a segment's end
        assert batch.payload == b"".join(v for v, _ in got)
        if i < len(self.model):
            assert len(batch) >= 1
            assert sum(batch.lengths) <= max_bytes or len(batch) == 1

    @precondition(lambda self: self.model)
    @rule(where=st.floats(0, 1))
    def truncate(self, where: float) -> None:
        assert self.log is not None
        i = int(where * len(self.model))
        self.run(self.log.truncate(self.lowest + i))
        del self.model[i:]

    @rule()
    def reopen(self) -> None:
        assert self.log is not None
        self.run(self.log.close())
        self.open_log()

    @rule()
    def retention(self) -> None:
        assert self.log is not None
        self.run(self.log.apply_retention(now_ms=1 << 62))  # everything is old
        dropped = self.log.lowest_index - self.lowest
        if self.config.retention_bytes is None and self.config.retention_ms is None:
            assert dropped == 0
        self.after_append(self.log)

    # -- crashes -------------------------------------------------------------------

    @rule(seed=st.integers(0, 2**32), kill=st.booleans())
    def crash_when_idle(self, seed: int, kill: bool) -> None:
        """Everything that returned is durable: the log comes back exactly."""
        self.crash(kill, seed)
        log = self.open_log()
        assert (log.lowest_index, log.highest_index) == (self.lowest, self.lowest + len(self.model))
        assert self.read_all(log) == self.model

    @rule(
        actions=st.lists(action_strategy, min_size=1, max_size=4),
        cut_after=st.integers(0, 60),
        seed=st.integers(0, 2**32),
        kill=st.booleans(),
    )
    def crash_during(
        self, actions: list[tuple[str, Any]], cut_after: int, seed: int, kill: bool
    ) -> None:
        """Run `actions`, stop the disk after `cut_after` operations, crash."""
        assert self.log is not None
        log = self.log
        done: list[tuple[str, Any]] = []  # completed actions, with what they returned
        acked: dict[int, int] = {}  # batch position -> first index, in the running action
        running: list[tuple[str, Any]] = []

        async def perform() -> None:
            nonlocal log
            for action in actions:
                running[:] = [action]
                acked.clear()
                kind, arg = action
                if kind == "append":

                    async def one(target: SegmentedLog, k: int, batch: list[bytes]) -> None:
                        acked[k] = await target.append(batch, term=4)

                    await asyncio.gather(*(one(log, k, b) for k, b in enumerate(arg)))
                    done.append((kind, (arg, dict(acked), log.lowest_index)))
                elif kind == "truncate":
                    at = log.lowest_index + int(arg * (log.highest_index - log.lowest_index))
                    running[:] = [(kind, at)]
                    await log.truncate(at)
                    done.append((kind, at))
                elif kind == "retention":
                    await log.apply_retention(now_ms=1 << 62)
                    done.append((kind, log.lowest_index))
                else:
                    await log.close()
                    log = await SegmentedLog.open(
                        DIRECTORY, self.config, backend=self.disk, clock_ms=self.clock_ms
                    )
                    done.append((kind, None))
            running.clear()

        self.disk.cut_power_after(cut_after)
        task = self.machine.run_until_frozen(perform())
        if task.done() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
        last_segment_base = log._segments[-1].base_index  # where retention had to stop
        self.crash(kill, seed)

        # What the completed actions promise.
        for kind, result in done:
            if kind == "append":
                batches, firsts, lowest = result
                for k, batch in enumerate(batches):
                    assert firsts[k] == self.lowest + len(self.model)
                    self.model += [(v, 4) for v in batch]
                self.drop_front(lowest)
            elif kind == "truncate":
                del self.model[result - self.lowest :]
            elif kind == "retention":
                self.drop_front(result)

        recovered = self.open_log()
        low, high = recovered.lowest_index, recovered.highest_index
        records = self.read_all(recovered)
        end = self.lowest + len(self.model)
        in_flight = running[0] if running else ("none", None)
        may_drop_front = in_flight[0] in ("retention", "append") and (
            self.config.retention_bytes is not None or self.config.retention_ms is not None
        )
        if may_drop_front:
            assert self.lowest <= low <= max(self.lowest, last_segment_base)
        else:
            assert low == self.lowest
        if in_flight[0] == "truncate":
            assert in_flight[1] <= high <= end  # cut at the truncation point, or not yet
            assert records == self.model[low - self.lowest : high - self.lowest]
        else:
            assert high >= end, f"acknowledged records lost: log ends at {high}, model at {end}"
            assert records[: end - low] == self.model[low - self.lowest :]
            # Beyond the model: only batches of a running append, whole, in the
            # order they were staged, including every one acknowledged.
            prefixes: list[list[tuple[bytes, int]]] = [[]]
            if in_flight[0] != "append":
                acked.clear()
            else:
                for k, batch in enumerate(in_flight[1]):
                    if k in acked:
                        assert acked[k] == end + len(prefixes[-1])
                    prefixes.append(prefixes[-1] + [(v, 4) for v in batch])
            extra = records[end - low :]
            assert extra in prefixes[len(acked) :], f"records never appended or lost: {extra!r}"
        self.model = records
        self.lowest = low

    def drop_front(self, lowest: int) -> None:
        dropped = lowest - self.lowest
        assert dropped >= 0
        del self.model[:dropped]
        self.lowest = lowest

    # -- invariants ----------------------------------------------------------------

    @invariant()
    def bounds_agree(self) -> None:
        if self.log is not None:
            assert self.log.lowest_index == self.lowest
            assert self.log.highest_index == self.lowest + len(self.model)

    def teardown(self) -> None:
        if self.log is not None:
            self.run(self.log.close())
        self.machine.close()


# The mutation check (scripts/log_mutants.py) needs a verdict, not a minimal example.
PHASES = [Phase.explicit, Phase.reuse, Phase.generate]
if not os.environ.get("LAMINAR_MODEL_NO_SHRINK"):
    PHASES.append(Phase.shrink)
LogMachine.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=30, deadline=None, phases=PHASES
)
TestLogModel = LogMachine.TestCase
