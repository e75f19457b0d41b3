"""A load-generator process: one producer or one consumer, its own event loop.

Workers are spawned (not forked) by the coordinator, each with a
`WorkerSpec`. A worker connects, opens its tail readers, says "ready", and waits
for the coordinator's go: all workers then share one `Timeline`, so warm-up
and measurement start at the same instant everywhere. While running it sends
its counts every half second (live progress) and at the end one
`WorkerReport`. Anything fatal is sent as a "failed" message with the
traceback, so that the run is reported as failed with a reason rather than
hanging or vanishing.

Messages on the queue: ("ready", id), ("progress", id, records, errors),
("report", id, WorkerReport), ("failed", id, text).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import multiprocessing
import os
import resource
import signal
import time
import traceback
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any, Final

from laminar.bench.config import RunConfig
from laminar.bench.consumer import Consumer
from laminar.bench.pacing import MonotonicClock, TimerfdPacer
from laminar.bench.producer import Producer
from laminar.bench.tally import Tally, Timeline
from laminar.bench.targets import Endpoint, Reader, Target, connect_target

GO_TIMEOUT_S: Final = 120.0
_PR_SET_PDEATHSIG: Final = 1
PROGRESS_EVERY_S: Final = 0.5


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    worker_id: int
    role: str
    """"producer" or "consumer"."""
    index: int
    """Index among the workers of its role."""
    endpoint: Endpoint
    config: RunConfig
    stream: str
    partitions: tuple[int, ...]
    """Consumers: the partitions it reads."""
    expected: tuple[int, ...]
    """Backlog consumers: records to read from each of its partitions."""
    cpu: int | None


@dataclass(frozen=True, slots=True)
class WorkerChannels:
    """The multiprocessing primitives shared by the coordinator and its workers."""

    queue: Queue[tuple[Any, ...]]
    go: Event
    abort: Event
    producers_done: Event
    start_ns: Synchronized[int]
    measure_start_ns: Synchronized[int]
    measure_end_ns: Synchronized[int]
    """-1: no end (count mode)."""


def _die_with_parent() -> None:
    """Ask the kernel to SIGKILL this worker when the coordinator dies, even by
    SIGKILL (which runs none of the coordinator's clean-up)."""
    parent = multiprocessing.parent_process()
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is not None and os.getppid() != parent.pid:
        os._exit(1)  # the coordinator was gone before the request took effect


def worker_main(spec: WorkerSpec, channels: WorkerChannels) -> None:
    """Process entry point."""
    try:
        _die_with_parent()
        if spec.cpu is not None:
            os.sched_setaffinity(0, {spec.cpu})
        asyncio.run(_run(spec, channels))
    except BaseException:
        channels.queue.put(("failed", spec.worker_id, traceback.format_exc()))


async def _run(spec: WorkerSpec, ch: WorkerChannels) -> None:
    target = connect_target(spec.endpoint)
    readers: list[Reader] = []
    try:
        await target.connect()
        if spec.role == "consumer" and not spec.config.consumes_backlog:
            # A tail must be taken before any producer starts: before "ready".
            for p in spec.partitions:
                readers.append(
                    await target.open_reader(spec.stream, p, "tail", spec.config.prefetch)
                )
        ch.queue.put(("ready", spec.worker_id))
        loop = asyncio.get_running_loop()
        went = await loop.run_in_executor(None, ch.go.wait, GO_TIMEOUT_S)
        if not went or ch.abort.is_set():
            return
        end = ch.measure_end_ns.value
        timeline = Timeline(ch.start_ns.value, ch.measure_start_ns.value, None if end < 0 else end)
        tally = Tally(spec.worker_id, spec.role)
        progress = asyncio.ensure_future(_progress(spec.worker_id, tally, ch))
        try:
            await _work(spec, ch, target, readers, timeline, tally)
        finally:
            progress.cancel()
        busy_cpu_s = time.process_time() - tally.cpu_at_start_s
        busy_wall_s = (time.monotonic_ns() - timeline.start_ns) / 1e9
        usage = resource.getrusage(resource.RUSAGE_SELF)
        report = tally.report(usage.ru_utime + usage.ru_stime, busy_cpu_s, busy_wall_s)
        ch.queue.put(("report", spec.worker_id, report))
    finally:
        for reader in readers:
            with contextlib.suppress(Exception):
                await reader.close()
        with contextlib.suppress(Exception):
            await target.close()


async def _work(
    spec: WorkerSpec,
    ch: WorkerChannels,
    target: Target,
    readers: list[Reader],
    timeline: Timeline,
    tally: Tally,
) -> None:
    clock = MonotonicClock()
    abort = ch.abort.is_set
    pacer = TimerfdPacer()
    try:
        await pacer.sleep_until(timeline.start_ns)
        tally.cpu_at_start_s = time.process_time()
        if spec.role == "producer":
            producer = Producer(
                target, spec.config, spec.stream, spec.index, timeline, tally, clock, abort
            )
            await producer.run(pacer)
        else:
            if spec.config.consumes_backlog:
                # Opened at the start, not before: a push-based reader (NATS)
                # would otherwise fill its buffer before the clock runs.
                for p in spec.partitions:
                    readers.append(
                        await target.open_reader(spec.stream, p, "beginning", spec.config.prefetch)
                    )
            consumer = Consumer(
                readers,
                spec.partitions,
                spec.expected,
                spec.config,
                timeline,
                tally,
                clock,
                ch.producers_done.is_set,
                abort,
            )
            await consumer.run()
    finally:
        pacer.close()


async def _progress(worker_id: int, tally: Tally, ch: WorkerChannels) -> None:
    while True:
        await asyncio.sleep(PROGRESS_EVERY_S)
        ch.queue.put(("progress", worker_id, tally.total_records, tally.error_count))
