"""Random operation sequences against a list model, with reopen and power cuts.

The model is a Python list of values and a lowest index. The log must agree
with it after every step; after a simulated power cut (memory backend: every
unsynced byte lost, or a random prefix of it kept) the log must still hold
every acknowledged record and nothing that was never appended.
"""

from __future__ import annotations

import asyncio
import random

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from laminar.log import LogConfig, MemoryBackend, SegmentedLog

DIRECTORY = "/mem/log"
values_strategy = st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=12)


class LogMachine(RuleBasedStateMachine):
    """Drives one log on the memory backend, on one long-lived event loop."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.backend = MemoryBackend()
        self.model: list[bytes] = []
        self.terms: list[int] = []
        self.lowest = 0
        self.log: SegmentedLog

    def run(self, coro):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(coro)

    @initialize(
        segment_bytes=st.sampled_from([200, 700, 5000]),
        preallocate=st.sampled_from([0, 512]),
        in_flight=st.sampled_from([1, 3]),
    )
    def open_log(self, segment_bytes: int, preallocate: int, in_flight: int) -> None:
        self.config = LogConfig(
            segment_bytes=segment_bytes,
            overflow_bytes=segment_bytes * 4,
            preallocate_bytes=preallocate,
            max_flushes_in_flight=in_flight,
        )
        self.log = self.run(SegmentedLog.open(DIRECTORY, self.config, backend=self.backend))

    @rule(values=values_strategy, term=st.integers(0, 5))
    def append(self, values: list[bytes], term: int) -> None:
        first = self.run(self.log.append(values, term=term))
        assert first == self.lowest + len(self.model)
        self.model.extend(values)
        self.terms.extend([term] * len(values))

    @rule(batches=st.lists(values_strategy, min_size=2, max_size=6))
    def append_concurrently(self, batches: list[list[bytes]]) -> None:
        async def go() -> list[int]:
            return list(await asyncio.gather(*(self.log.append(b) for b in batches)))

        firsts = self.run(go())
        # Concurrent batches land whole and in some order, never interleaved.
        for first, batch in sorted(zip(firsts, batches, strict=True)):
            assert first == self.lowest + len(self.model)
            self.model.extend(batch)
            self.terms.extend([0] * len(batch))

    @rule(data=st.data())
    def read_one(self, data: st.DataObject) -> None:
        if not self.model:
            return
        i = data.draw(st.integers(0, len(self.model) - 1))
        record = self.run(self.log.read(self.lowest + i))
        assert record.value == self.model[i]
        assert record.term == self.terms[i]

    @rule(data=st.data(), max_bytes=st.integers(1, 2000), max_records=st.integers(1, 30))
    def read_range(self, data: st.DataObject, max_bytes: int, max_records: int) -> None:
        i = data.draw(st.integers(0, len(self.model)))
        got = self.run(self.log.read_range(self.lowest + i, max_bytes, max_records))
        expected = self.model[i : i + max_records]
        assert [r.value for r in got] == expected[: len(got)]
        if i < len(self.model):
            assert got, "read_range must return at least one record"
        if len(got) < len(expected):  # stopped by the byte budget, and not earlier
            used = sum(len(r.value) for r in got)
            assert used <= max_bytes or len(got) == 1
            assert used + len(expected[len(got)]) > max_bytes

    @rule(data=st.data(), max_bytes=st.integers(1, 2000), max_records=st.integers(1, 30))
    def read_batch(self, data: st.DataObject, max_bytes: int, max_records: int) -> None:
        i = data.draw(st.integers(0, len(self.model)))
        batch = self.run(self.log.read_batch(self.lowest + i, max_bytes, max_records))
        expected = self.model[i : i + max_records]
        values = [r.value for r in batch.records()]
        assert values == expected[: len(values)]  # may stop early at a segment's end
        assert batch.payload == b"".join(values)
        assert list(batch.terms) == self.terms[i : i + len(values)]
        if i < len(self.model):
            assert len(batch) >= 1
            assert sum(batch.lengths) <= max_bytes or len(batch) == 1

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.model)))
        self.run(self.log.truncate(self.lowest + i))
        del self.model[i:]
        del self.terms[i:]

    @rule()
    def reopen(self) -> None:
        self.run(self.log.close())
        self.log = self.run(SegmentedLog.open(DIRECTORY, self.config, backend=self.backend))

    @rule(
        batches=st.lists(values_strategy, min_size=1, max_size=5),
        steps=st.integers(0, 12),
        seed=st.integers(0, 2**32),
        torn=st.booleans(),
    )
    def power_cut_during_appends(
        self, batches: list[list[bytes]], steps: int, seed: int, torn: bool
    ) -> None:
        """Start appends, let the loop run a few steps, cut the power."""
        tasks = [self.loop.create_task(self.log.append(b)) for b in batches]

        async def advance() -> None:
            for _ in range(steps):
                await asyncio.sleep(0)

        self.run(advance())
        acked = sorted((t.result(), b) for t, b in zip(tasks, batches, strict=True) if t.done())
        self.backend.crash(random.Random(seed) if torn else None)
        for task in tasks:
            task.cancel()
        self.run(asyncio.gather(*tasks, return_exceptions=True))
        self.log = self.run(SegmentedLog.open(DIRECTORY, self.config, backend=self.backend))

        # Everything acknowledged survives ...
        for first, batch in acked:
            assert first == self.lowest + len(self.model)
            self.model.extend(batch)
            self.terms.extend([0] * len(batch))
        # ... and anything more is exactly what was being appended, in order.
        start = self.lowest + len(self.model)
        extra: list[bytes] = []
        if self.log.highest_index > start:
            extra = [r.value for r in self.run(self.log.read_range(start, 1 << 30))]
        unacked = [b for t, b in zip(tasks, batches, strict=True) if t.cancelled()]
        assert _is_concatenation_prefix(extra, unacked)
        self.model.extend(extra)
        self.terms.extend([0] * len(extra))

    @rule()
    def retention(self) -> None:
        self.run(self.log.apply_retention(now_ms=1 << 62))  # everything is old
        dropped = self.log.lowest_index - self.lowest
        assert dropped >= 0
        del self.model[:dropped]
        del self.terms[:dropped]
        self.lowest = self.log.lowest_index

    @invariant()
    def bounds_agree(self) -> None:
        if hasattr(self, "log"):
            assert self.log.lowest_index == self.lowest
            assert self.log.highest_index == self.lowest + len(self.model)

    def teardown(self) -> None:
        if hasattr(self, "log"):
            self.run(self.log.close())
        # Logs abandoned at a power cut leave their flusher tasks behind.
        leftovers = asyncio.all_tasks(self.loop)
        for task in leftovers:
            task.cancel()
        if leftovers:
            self.run(asyncio.wait(leftovers))
        self.loop.close()


def _is_concatenation_prefix(extra: list[bytes], batches: list[list[bytes]]) -> bool:
    """Is `extra` a prefix of some order of whole `batches` concatenated?

    Unacknowledged batches were staged in task start order, so the order is the
    list's own; only a prefix of it can have reached the disk.
    """
    flat = [v for batch in batches for v in batch]
    return extra == flat[: len(extra)]


TestLogModel = LogMachine.TestCase
