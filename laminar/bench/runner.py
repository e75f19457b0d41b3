"""One run: a fresh server, its streams, the load-generator processes, a result.

Every run starts the target's server on an empty directory (the same cold
start for every target), creates a stream with a fresh name, prefills it when
the workload reads a backlog, spawns the workers, waits until all are
connected, and then gives them one shared timeline: warm-up, measurement,
drain. Whatever happens, the workers are ended and the server is stopped
before the next run; a run that breaks becomes a failed `RunResult` with the
reason and the end of the server's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import queue
import shutil
import tempfile
import time
import traceback
import uuid
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Final

from laminar.bench.config import RunConfig, backlog_split
from laminar.bench.delivery import PREFILL_PRODUCER, DeliveryVerdict, Ledger, check_delivery
from laminar.bench.histogram import LatencyHistogram
from laminar.bench.machine import ProcessTreeCpu, fsync_floor_us, loadavg
from laminar.bench.progress import ProgressSink
from laminar.bench.records import RecordMaker
from laminar.bench.results import RunResult, fill_from_reports
from laminar.bench.tally import WorkerReport
from laminar.bench.targets import Endpoint, System, connect_target
from laminar.bench.worker import WorkerChannels, WorkerSpec, worker_main

READY_TIMEOUT_S: Final = 60.0
READ_BACK_RECORDS: Final = 1000
READ_BACK_WAIT_MS: Final = 300
"""The identity check's read-back: an answer this long empty ends a partition."""
READ_BACK_PATIENCE_S: Final = 10.0
"""A read-back that missed acknowledged records is made again, a partition
ending only after its answers stayed empty this long: a client that paces its
fetches (librdkafka backs off a full local queue for a second) is not a loss."""
START_DELAY_S: Final = 0.3
"""Between the go and the shared start: time for every worker to wake up."""
PREFILL_BATCH: Final = 100
PREFILL_WINDOW: Final = 16


class RunFailed(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class RunPlan:
    """How one run is carried out (the same for every target compared)."""

    config: RunConfig
    workroot: Path
    keep_data: bool = False


def consumer_partitions(consumer: int, consumers: int, partitions: int) -> tuple[int, ...]:
    """Partitions read by consumer `consumer`: every `consumers`-th one."""
    return tuple(range(consumer, partitions, consumers))


async def _setup(endpoint: Endpoint, stream: str, config: RunConfig) -> None:
    target = connect_target(endpoint)
    await target.connect()
    try:
        await target.create_stream(stream, config.partitions)
        if config.consumes_backlog:
            maker = RecordMaker(config.record_bytes, producer=PREFILL_PRODUCER)
            for p, n in enumerate(backlog_split(config.prefill, config.partitions)):
                batches = [min(PREFILL_BATCH, n - i) for i in range(0, n, PREFILL_BATCH)]
                for i in range(0, len(batches), PREFILL_WINDOW):
                    await asyncio.gather(
                        *(
                            target.produce(stream, p, maker.batch(0, size))
                            for size in batches[i : i + PREFILL_WINDOW]
                        )
                    )
    finally:
        await target.close()


def _specs(endpoint: Endpoint, stream: str, config: RunConfig) -> list[WorkerSpec]:
    cpus = sorted(os.sched_getaffinity(0)) if config.pin_workers else []
    specs: list[WorkerSpec] = []
    split = backlog_split(config.prefill, config.partitions)
    for i in range(config.producer_count):
        specs.append(WorkerSpec(len(specs), "producer", i, endpoint, config, stream, (), (), None))
    for i in range(config.consumer_count):
        parts = consumer_partitions(i, config.consumer_count, config.partitions)
        expected = tuple(split[p] for p in parts) if config.consumes_backlog else ()
        specs.append(
            WorkerSpec(len(specs), "consumer", i, endpoint, config, stream, parts, expected, None)
        )
    if cpus:
        specs = [WorkerSpec(**{**_fields(s), "cpu": cpus[s.worker_id % len(cpus)]}) for s in specs]
    return specs


def _fields(spec: WorkerSpec) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in WorkerSpec.__dataclass_fields__}


class _Workers:
    """The worker processes of one run and the coordinator's side of their talk."""

    def __init__(self, specs: list[WorkerSpec]) -> None:
        self.ctx = multiprocessing.get_context("spawn")
        ctx = self.ctx
        self.channels = WorkerChannels(
            queue=ctx.Queue(),
            go=ctx.Event(),
            abort=ctx.Event(),
            producers_done=ctx.Event(),
            start_ns=ctx.Value("q", 0, lock=False),
            measure_start_ns=ctx.Value("q", 0, lock=False),
            measure_end_ns=ctx.Value("q", -1, lock=False),
        )
        self.specs = specs
        self.procs: list[BaseProcess] = []

    def start(self) -> None:
        for spec in self.specs:
            proc = self.ctx.Process(
                target=worker_main,
                args=(spec, self.channels),
                name=f"bench-{spec.role}-{spec.index}",
                daemon=True,
            )
            proc.start()
            self.procs.append(proc)

    def get(self, timeout_s: float) -> tuple[Any, ...] | None:
        try:
            message: tuple[Any, ...] = self.channels.queue.get(timeout=timeout_s)
        except queue.Empty:
            return None
        return message

    def dead_without_report(self, reported: set[int]) -> list[str]:
        return [
            f"{p.name} exited with code {p.exitcode} without a report"
            for spec, p in zip(self.specs, self.procs, strict=True)
            if spec.worker_id not in reported and p.exitcode is not None
        ]

    def stop(self) -> None:
        self.channels.abort.set()
        self.channels.go.set()  # release anyone still waiting, to see the abort
        deadline = time.monotonic() + 10.0
        for proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
                proc.join(5.0)
        with contextlib.suppress(Exception):
            self.channels.queue.close()
            self.channels.queue.join_thread()


def _wait_ready(workers: _Workers, progress: ProgressSink) -> None:
    ready: set[int] = set()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while len(ready) < len(workers.specs):
        message = workers.get(0.2)
        if message is not None:
            kind, worker_id = message[0], message[1]
            if kind == "ready":
                ready.add(worker_id)
                progress.phase(f"workers ready {len(ready)}/{len(workers.specs)}")
            elif kind == "failed":
                raise RunFailed(f"worker {worker_id} failed while connecting:\n{message[2]}")
        dead = workers.dead_without_report(ready)
        if dead:
            raise RunFailed("; ".join(dead))
        if time.monotonic() > deadline:
            raise RunFailed(f"workers not ready after {READY_TIMEOUT_S:g} s")


def _collect(
    workers: _Workers,
    config: RunConfig,
    progress: ProgressSink,
    result: RunResult,
    server_cpu: ProcessTreeCpu,
) -> list[WorkerReport]:
    """Gather the workers' reports, showing progress; `server_cpu` is sampled
    at the measurement window's start and end (to within a poll)."""
    ch = workers.channels
    producers = {s.worker_id for s in workers.specs if s.role == "producer"}
    reports: dict[int, WorkerReport] = {}
    counts: dict[int, tuple[int, int]] = {}
    measure_start = ch.measure_start_ns.value
    measure_end = ch.measure_end_ns.value
    hard_deadline = None
    if measure_end > 0:
        hard_deadline = measure_end + round((3 * config.drain_s + 30) * 1e9)
    if not producers:
        ch.producers_done.set()
    while len(reports) < len(workers.specs):
        wait_s = 0.25
        if not server_cpu.started:  # sample at the window's start, not a poll later
            wait_s = min(wait_s, max(0.0, (measure_start - time.monotonic_ns()) / 1e9))
        message = workers.get(wait_s)
        if message is not None:
            kind, worker_id = message[0], message[1]
            if kind == "progress":
                counts[worker_id] = (message[2], message[3])
            elif kind == "report":
                reports[worker_id] = message[2]
                counts[worker_id] = (message[2].total_records, sum(message[2].errors.values()))
                if producers <= reports.keys():
                    ch.producers_done.set()
            elif kind == "failed":
                result.error_samples.append(f"worker {worker_id}: {message[2][-2000:]}")
                raise RunFailed(f"worker {worker_id} failed:\n{message[2]}")
        now = time.monotonic_ns()
        if not server_cpu.started and now >= measure_start:
            server_cpu.start()
        if measure_end > 0 and now >= measure_end:
            server_cpu.stop()
        phase = "warm-up" if now < measure_start else "measuring"
        remaining = None
        if measure_end > 0:
            if now >= measure_end:
                phase = "draining"
            remaining = max(0.0, (measure_end - now) / 1e9)
        key = "produce" if producers else "consume"
        records = sum(c[0] for wid, c in counts.items() if (wid in producers) == (key == "produce"))
        progress.counts(records, sum(c[1] for c in counts.values()), phase, remaining)
        dead = workers.dead_without_report(set(reports))
        if dead:
            raise RunFailed("; ".join(dead))
        if hard_deadline is not None and now > hard_deadline:
            raise RunFailed("workers did not finish in time (drain deadline passed)")
    server_cpu.stop()
    return list(reports.values())


def server_cpu_over(result: RunResult, server_cpu: ProcessTreeCpu, elapsed_s: float) -> None:
    """A backlog consume is over in a fraction of a second, less than the
    sampling window around it (workers report when done, the poll adds up to a
    quarter second): the server's CPU seconds are divided by the consume's
    own duration, the time the server was busy with it."""
    if server_cpu.cpu_s is None or elapsed_s <= 0:
        return
    result.server_cpu_by_process = {name: s / elapsed_s for name, s in server_cpu.cpu_s.items()}
    result.server_cpu_cores = sum(result.server_cpu_by_process.values())


def run_once(
    system: System, plan: RunPlan, round_no: int, rounds: int, progress: ProgressSink
) -> RunResult:
    """Run `plan` against `system` once; never raises for a failed run."""
    config = plan.config
    plan.workroot.mkdir(parents=True, exist_ok=True)
    safe = system.name.replace(":", "-")
    workdir = Path(tempfile.mkdtemp(prefix=f"{safe}-r{round_no}-", dir=plan.workroot))
    result = RunResult(
        target=system.name,
        round=round_no,
        status="ok",
        started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        loadavg_at_start=loadavg(),
        durability=system.durability().to_dict(),
        versions=system.versions(),
    )
    progress.begin_run(system.name, round_no, rounds)
    wall_start = time.monotonic()
    stream = f"bench{uuid.uuid4().hex[:10]}"
    workers: _Workers | None = None
    try:
        progress.phase("measuring the fdatasync floor")
        result.fsync_floor_us = fsync_floor_us(workdir)
        progress.phase("starting server")
        endpoint = system.start(workdir)
        progress.phase("creating stream" + (" and prefilling" if config.consumes_backlog else ""))
        asyncio.run(_setup(endpoint, stream, config))
        workers = _Workers(_specs(endpoint, stream, config))
        progress.phase("starting workers")
        workers.start()
        _wait_ready(workers, progress)
        ch = workers.channels
        start = time.monotonic_ns() + round(START_DELAY_S * 1e9)
        warmup = 0 if config.consumes_backlog else round(config.warmup_s * 1e9)
        ch.start_ns.value = start
        ch.measure_start_ns.value = start + warmup
        if config.duration_s is not None:
            ch.measure_end_ns.value = start + warmup + round(config.duration_s * 1e9)
        server_cpu = ProcessTreeCpu(system.server_pids())
        ch.go.set()
        reports = _collect(workers, config, progress, result, server_cpu)
        result.server_cpu_cores = server_cpu.cores
        result.server_cpu_by_process = server_cpu.by_process or {}
        fill_from_reports(result, reports, ch.measure_start_ns.value)
        if config.consumes_backlog and result.consume is not None:
            server_cpu_over(result, server_cpu, result.consume.elapsed_s)
        if config.producer_count:
            progress.phase("reading back for the identity check")
            verdict = asyncio.run(_read_back(endpoint, stream, config, reports, 0.0))
            if verdict.lost:
                progress.phase(f"{verdict.lost} missed: reading back again, patiently")
                verdict = asyncio.run(
                    _read_back(endpoint, stream, config, reports, READ_BACK_PATIENCE_S)
                )
            result.note_delivery(verdict)
    except Exception as exc:
        result.status = "failed"
        result.error = f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, RunFailed):
            result.error_samples.append(traceback.format_exc()[-3000:])
        result.server_log_tail = system.log_tail()
    finally:
        if workers is not None:
            workers.stop()
        with contextlib.suppress(Exception):
            system.stop()
        result.wall_s = time.monotonic() - wall_start
        if not plan.keep_data:
            shutil.rmtree(workdir, ignore_errors=True)
    progress.end_run(result, headline(result, config))
    return result


async def _read_back(
    endpoint: Endpoint,
    stream: str,
    config: RunConfig,
    reports: list[WorkerReport],
    patience_s: float,
) -> DeliveryVerdict:
    """Read every partition from the beginning and check it against what the
    producers were told was acknowledged (`laminar.bench.delivery`); a
    partition ends once its answers stayed empty `patience_s` (0: the first
    empty one). Not measured: the run's clock has stopped."""
    ledgers = {
        r.ledger[0]: Ledger.from_wire(r.ledger[1:])
        for r in reports
        if r.role == "producer" and r.ledger is not None
    }
    target = connect_target(endpoint)
    await target.connect()
    values: list[bytes | memoryview] = []
    try:
        for p in range(config.partitions):
            reader = await target.open_reader(stream, p, "beginning")
            try:
                empty_since = None
                while True:
                    got = await reader.fetch(READ_BACK_RECORDS, READ_BACK_WAIT_MS)
                    if got:
                        values.extend(got)
                        empty_since = None
                        continue
                    empty_since = empty_since or time.monotonic()
                    if time.monotonic() - empty_since >= patience_s:
                        break
            finally:
                await reader.close()
    finally:
        await target.close()
    return check_delivery(ledgers, values)


def headline(result: RunResult, config: RunConfig) -> str:
    """A one-line summary of a run (progress lines, tables)."""
    if result.status == "failed":
        return result.error or "failed"
    latency = result.histograms.get(config.primary_metric) or LatencyHistogram()
    s = latency.summary()
    text = (
        f"{result.throughput(config):,.0f} rec/s, {config.primary_metric} p50 "
        f"{s.p50_us / 1000:.2f} ms p99 {s.p99_us / 1000:.2f} ms max {s.max_us / 1000:.2f} ms"
    )
    if result.errors:
        text += f", {sum(result.errors.values())} errors"
    return text
