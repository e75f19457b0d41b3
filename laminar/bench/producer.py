"""A producing load generator: the load model applied to `Target.produce`.

One operation is one produce request of `batch` records to one partition
(producer i writes its k-th batch to partition (i + k) mod P), acknowledged
with the target's durability. Measured are the operations intended (open
loop) or sent (closed loop) inside the measurement window; the warm-up before
it is sent the same way for every target and not measured. Every error is
counted, in every phase.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from laminar.bench.config import RunConfig
from laminar.bench.loadmodels import Outcome, closed_loop, open_loop
from laminar.bench.pacing import Clock, Pacer, Schedule
from laminar.bench.records import RecordMaker
from laminar.bench.tally import Tally, Timeline
from laminar.bench.targets.base import Target

LATE_NS = 1_000_000
"""An open-loop send this much after its intended time counts as late."""


class Producer:
    """State of one producer across its run (issue gate, outcomes, drain)."""

    def __init__(
        self,
        target: Target,
        config: RunConfig,
        stream: str,
        index: int,
        timeline: Timeline,
        tally: Tally,
        clock: Clock,
        abort: Callable[[], bool],
    ) -> None:
        self.target = target
        self.config = config
        self.stream = stream
        self.index = index
        self.timeline = timeline
        self.tally = tally
        self.clock = clock
        self.abort = abort
        self.maker = RecordMaker(config.record_bytes, producer=index)
        self._first_of: dict[int, int] = {}
        """Op k -> the sequence number of its first record, until it finishes."""
        self.schedule: Schedule | None = None
        if config.load == "open":
            interval_ns = max(1, round(1e9 * config.batch / config.rate_per_producer))
            stagger = interval_ns * index // max(1, config.producer_count)
            self.schedule = Schedule(timeline.start_ns + stagger, interval_ns)
        self.issued = 0
        self.finished = 0
        self._measured_records_issued = 0
        self.stopped_at_ns: int | None = None
        self._drain_ns = round(config.drain_s * 1e9)

    def keep_going(self, k: int, at_ns: int) -> bool:
        """The issue gate (see `laminar.bench.loadmodels`); sticky once False."""
        del k
        if self.stopped_at_ns is not None:
            return False
        t = self.timeline
        count = self.config.count
        end = t.measure_end_ns
        done = (
            self.abort()
            or (end is not None and at_ns >= end)
            or (count is not None and self._measured_records_issued >= count)
            # An open loop that fell behind stops issuing `drain_s` after the
            # window; what it never sent shows as due but not issued.
            or (end is not None and self.clock.now_ns() >= end + self._drain_ns)
        )
        if done:
            self.stopped_at_ns = self.clock.now_ns()
            return False
        if at_ns >= t.measure_start_ns:
            self.tally.issued_ops += 1
            self._measured_records_issued += self.config.batch
        self.issued += 1
        return True

    async def send(self, k: int) -> None:
        partitions = self.config.partitions
        partition = (self.index + k) % partitions
        if self.schedule is not None:
            intended = self.schedule.intended_ns(k)
        else:
            intended = self.clock.now_ns()
        self._first_of[k] = self.maker.ledger.sent
        values = self.maker.batch(intended, self.config.batch)
        await self.target.produce(self.stream, partition, values)

    def on_done(self, o: Outcome) -> None:
        self.finished += 1
        tally = self.tally
        first = self._first_of.pop(o.k, None)
        if o.error is not None:
            tally.error(o.error)
            return
        batch = self.config.batch
        if first is not None:
            self.maker.ledger.ack(first, batch)
        tally.total_records += batch
        if o.intended_ns < self.timeline.measure_start_ns:
            return
        tally.records += batch
        tally.bytes += batch * self.config.record_bytes
        tally.ops += 1
        if o.done_ns > tally.last_ns:
            tally.last_ns = o.done_ns
        tally.histograms["produce"].record_ns(o.done_ns - o.intended_ns, batch)
        tally.histograms["produce_service"].record_ns(o.done_ns - o.sent_ns, batch)
        if o.sent_ns - o.intended_ns > LATE_NS:
            tally.late_ops += 1

    async def run(self, pacer: Pacer) -> None:
        """Run the load model; cancel what is still in flight `drain_s` after
        issuing stopped."""
        config = self.config
        if self.schedule is not None:
            model = open_loop(
                self.send,
                self.schedule,
                config.window,
                self.keep_going,
                self.clock,
                pacer,
                self.on_done,
            )
        else:
            model = closed_loop(self.send, config.window, self.keep_going, self.clock, self.on_done)
        task = asyncio.ensure_future(model)
        drain_ns = self._drain_ns
        while not task.done():
            await asyncio.wait({task}, timeout=0.05)
            stopped = self.stopped_at_ns
            if stopped is not None and self.clock.now_ns() > stopped + drain_ns:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if not task.cancelled():
            error = task.exception()
            if error is not None:
                raise error
        self.tally.unfinished_ops = self.issued - self.finished
        self.tally.due_ops = self._due_ops()
        self.tally.ledger = (self.index, *self.maker.ledger.to_wire())

    def _due_ops(self) -> int:
        """Open loop: operations the schedule intended inside the measurement window."""
        t = self.timeline
        if self.schedule is None or t.measure_end_ns is None:
            return self.tally.issued_ops
        s = self.schedule
        first = max(0, math.ceil((t.measure_start_ns - s.start_ns) / s.interval_ns))
        end = max(0, math.ceil((t.measure_end_ns - s.start_ns) / s.interval_ns))
        return max(0, end - first)
