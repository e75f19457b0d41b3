"""A consuming load generator: fetch loops over the consumer's partitions.

Each partition gets its own fetch loop (a long-poll on one partition must not
delay another that has data). Two shapes:

- backlog (`consume --from beginning`): read the prefilled records of each
  partition as fast as fetches return them; measured from the start.
- tail (`consume --from tail`, `e2e`): read what producers are writing now;
  a record is measured when its intended send time (in its header) falls in
  the measurement window, and its end-to-end latency is the time from then
  until the fetch that returned it completed. After the producers are done,
  each loop reads until a fetch comes back empty (caught up) or the drain
  time is over.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Callable, Sequence
from itertools import chain

from laminar.bench.config import RunConfig, backlog_split
from laminar.bench.delivery import (
    PREFILL_PRODUCER,
    DeliveryVerdict,
    Ledger,
    check_identities,
    identities_of,
)
from laminar.bench.histogram import LatencyHistogram
from laminar.bench.pacing import Clock
from laminar.bench.records import intended_ns_of
from laminar.bench.tally import Tally, Timeline
from laminar.bench.targets.base import Reader


class Consumer:
    """The fetch loops of one consumer process."""

    def __init__(
        self,
        readers: Sequence[Reader],
        partitions: Sequence[int],
        expected: Sequence[int],
        config: RunConfig,
        timeline: Timeline,
        tally: Tally,
        clock: Clock,
        producers_done: Callable[[], bool],
        abort: Callable[[], bool],
    ) -> None:
        self.readers = readers
        self.partitions = partitions
        self.expected = expected
        self._read: list[list[array[int]]] = [[] for _ in readers]
        """Backlog: the identities of every answer each loop got, checked after the run."""
        self.config = config
        self.timeline = timeline
        self.tally = tally
        self.clock = clock
        self.producers_done = producers_done
        self.abort = abort

        self._drain_end_ns: int | None = None

    async def run(self) -> None:
        await asyncio.gather(*(self._loop(i) for i in range(len(self.readers))))
        if self.expected:  # after the clock stopped: not measured
            self.tally.delivery = self._backlog_verdict().to_dict()

    def _backlog_verdict(self) -> DeliveryVerdict:
        """Each partition read from the beginning must have yielded its prefill
        records in order, each once: the first `received` of them, no gaps, no
        duplicates, none from elsewhere (a run cut short by its duration reads
        fewer, which is not a loss)."""
        split = backlog_split(self.config.prefill, self.config.partitions)
        verdict = DeliveryVerdict()
        for i, p in enumerate(self.partitions):
            first = sum(split[:p])
            answers = self._read[i]
            received = sum(map(len, answers))
            ledger = Ledger(first + split[p])
            ledger.ack(first, received)
            part = check_identities({PREFILL_PRODUCER: ledger}, chain.from_iterable(answers))
            part.acknowledged = received
            verdict.merge(part)
        return verdict

    def _over(self, received: int, expected: int | None, last_empty: bool) -> bool:
        if self.abort():
            return True
        now = self.clock.now_ns()
        if expected is not None:  # backlog
            end = self.timeline.measure_end_ns
            return received >= expected or (end is not None and now >= end)
        if not self.producers_done():
            return False
        if self._drain_end_ns is None:
            self._drain_end_ns = now + round(self.config.drain_s * 1e9)
        return last_empty or now >= self._drain_end_ns

    async def _loop(self, i: int) -> None:
        reader = self.readers[i]
        config = self.config
        expected = self.expected[i] if self.expected else None
        tally = self.tally
        clock = self.clock
        measure_start = self.timeline.measure_start_ns
        measure_end = self.timeline.measure_end_ns
        backlog = expected is not None
        fetch_hist = tally.histograms["fetch"]
        e2e_hist = tally.histograms["e2e"]
        record_bytes = config.record_bytes
        received = 0
        last_empty = False
        while not self._over(received, expected, last_empty):
            t0 = clock.now_ns()
            try:
                values = await reader.fetch(config.fetch_max_records, config.fetch_wait_ms)
            except Exception as exc:  # counted and reported; the loop goes on
                tally.error(exc)
                await asyncio.sleep(0.01)
                continue
            t1 = clock.now_ns()
            n = len(values)
            last_empty = n == 0
            if not n:
                tally.empty_fetches += 1
                continue
            received += n
            tally.total_records += n
            if backlog:
                self._read[i].append(identities_of(values, record_bytes))
                fetch_hist.record_ns(t1 - t0)
                tally.ops += 1
                tally.records += n
                tally.bytes += n * record_bytes
                tally.last_ns = max(tally.last_ns, t1)
                continue
            if t0 >= measure_start:
                fetch_hist.record_ns(t1 - t0)
                tally.ops += 1
            measured = _record_e2e(values, t1, measure_start, measure_end, e2e_hist)
            if measured:
                tally.records += measured
                tally.bytes += measured * record_bytes
                tally.last_ns = max(tally.last_ns, t1)


def _record_e2e(
    values: Sequence[bytes | memoryview],
    arrived_ns: int,
    measure_start: int,
    measure_end: int | None,
    hist: LatencyHistogram,
) -> int:
    """Record end-to-end latencies of the measured records in `values`; how many.

    Records of one produce batch share an intended time, so equal neighbours
    are recorded as one value with a count.
    """
    measured = 0
    run_value = -1
    run_count = 0
    for value in values:
        intended = intended_ns_of(value)
        if intended < measure_start or (measure_end is not None and intended >= measure_end):
            continue
        measured += 1
        if intended == run_value:
            run_count += 1
            continue
        if run_count:
            hist.record_ns(arrived_ns - run_value, run_count)
        run_value = intended
        run_count = 1
    if run_count:
        hist.record_ns(arrived_ns - run_value, run_count)
    return measured
