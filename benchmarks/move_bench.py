"""The produce latency while a partition moves, next to the same load without a move.

Real `laminar-node` processes on loopback joined through one seed (SWIM, a
cluster secret, `--routing userspace`, one shard each, `--flush always`):
three nodes and a topic of `--partitions` partitions (default 1) with
replication factor 3 (so on all three); the one that will move is filled
with `--fill-mib` MiB of `--fill-size`-byte records (the others stay empty;
those the newcomer takes move too, at no copying cost). An
open-loop producer sends one `--size`-byte record per request at `--rate`
records/s for the whole run with the stock `AsyncClient` (idempotent by
default, following the partition's leader as any application does); each
request's latency runs from its intended send time (coordinated omission
corrected, as in `laminar-bench`). Then a fourth node joins, named so that
weighted rendezvous (`laminar.placement.replica_nodes`) puts it in the
partition's top three: the partition moves (the newcomer added as a learner
and caught up from the leader's first record, promoted, and the node that
left the top three removed). `--leaving` picks the partition and the
newcomer's name so that the node pushed out is a follower (default) or the
leader, which then hands its leadership over first (a newcomer pushes out
the lowest scored of three replicas, so this needs a partition whose leader
scores lowest: use `--partitions 8`).

Latencies are split by intended send time into two windows:

- steady: `--steady` seconds with no move (checked: no learner, the same
  replicas all through);
- move: from the last poll that saw no move under way to the first poll that
  saw it done (no learner of the partition in any node's
  `laminar_partition_moving`, and the partition served by exactly its
  rendezvous targets); polls every `--poll` s, so the window is up to two
  polls longer than the move itself.

Odd runs measure the steady window before the join (three nodes), even runs
after the move settled (four nodes), so neither window is always first.
Requests outside both (warm-up, the join, the settling) are reported as
"other". CPU is the bench process's (the load generator and the poller) and
each node's (supervisor and shard) over each window.

When the producer stops, every replica of the target set is read back and
checked by identity: every acknowledged record, of the fill and of the load,
present exactly once. A record lost, duplicated or from nowhere fails the
run (exit code 1). A produce answered DUPLICATE_SEQUENCE (appended before, at
an index the node no longer remembers) counts as a failed request in the
windows, as its caller sees an exception, but its record as acknowledged:
the node says it is there, and the check holds it to that.

    .venv/bin/python benchmarks/move_bench.py [--runs 3] [--rate 2000] [--size 100]
        [--fill-mib 64] [--fill-size 4096] [--steady 10] [--move-rate BYTES/S]
        [--partitions 1] [--leaving follower|leader] [--timeline DIR] [--profile DIR]
        [--logs DIR] [--workdir DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import psutil

from laminar.bench.delivery import Ledger, check_delivery
from laminar.bench.loadmodels import Outcome, open_loop
from laminar.bench.machine import tree_cpu_s
from laminar.bench.pacing import MonotonicClock, Schedule, TimerfdPacer
from laminar.bench.records import RecordMaker
from laminar.cli.status import parse_prometheus
from laminar.client import AsyncClient, DuplicateSequenceError, LaminarError, RetryPolicy
from laminar.placement import partition_id, replica_nodes
from laminar.wire.records import decode_user_record
from tests.cluster.nodes import offsets, read_replica
from tests.cluster.test_gossip_cluster import gossip_cluster, member_states
from tests.support import wait_until
from tests.system.nodes import RunningNode

TOPIC = "moving"
RF = 3
LOAD_PRODUCER = 1
FILL_PRODUCER = 2
FILL_BATCH_BYTES = 256 << 10
FILL_IN_FLIGHT = 4
IN_FLIGHT_MAX = 4096
"""Open-loop requests in flight at most (2 s at 2,000/s); a send waiting for
a slot is charged the wait."""
ERROR_SAMPLES = 5
MOVE_START_S = 60.0
"""The move must begin this soon after the newcomer is ready."""


# -- the load -----------------------------------------------------------------------------


class OpenLoopProducer:
    """One record per request at a fixed rate until `stop`; every outcome kept."""

    def __init__(self, client: AsyncClient, partition: int, rate: float, size: int) -> None:
        self.client = client
        self.partition = partition
        self.maker = RecordMaker(size, producer=LOAD_PRODUCER)
        self.schedule = Schedule.for_rate(time.monotonic_ns(), rate)
        self.outcomes: list[tuple[int, int, bool]] = []
        """(intended_ns, done_ns, acknowledged) per request."""
        self.errors: dict[str, int] = {}
        self.first_errors: list[str] = []
        """The first few failures: when (from the first request), what, why."""
        self._sequence_of: dict[int, int] = {}
        self._stop = False

    async def run(self) -> None:
        pacer = TimerfdPacer()
        try:
            await open_loop(
                self._send,
                self.schedule,
                IN_FLIGHT_MAX,
                lambda _k, _at: not self._stop,
                MonotonicClock(),
                pacer,
                self._done,
            )
        finally:
            pacer.close()

    def stop(self) -> None:
        self._stop = True

    async def _send(self, k: int) -> None:
        self._sequence_of[k] = self.maker.ledger.sent
        values = self.maker.batch(self.schedule.intended_ns(k), 1)
        await self.client.produce(TOPIC, self.partition, values)

    def _done(self, outcome: Outcome) -> None:
        sequence = self._sequence_of.pop(outcome.k)
        if outcome.error is None or isinstance(outcome.error, DuplicateSequenceError):
            # DUPLICATE_SEQUENCE: appended before, at an index the node forgot.
            # The caller sees an error, but the record must be there: checked.
            self.maker.ledger.ack(sequence, 1)
        if outcome.error is not None:
            name = type(outcome.error).__name__
            self.errors[name] = self.errors.get(name, 0) + 1
            if len(self.first_errors) < ERROR_SAMPLES:
                at = (outcome.intended_ns - self.schedule.start_ns) / 1e9
                self.first_errors.append(f"{at:.3f} s: {name}: {outcome.error}")
        self.outcomes.append((outcome.intended_ns, outcome.done_ns, outcome.error is None))


async def fill(client: AsyncClient, partition: int, mib: float, size: int) -> Ledger:
    """`mib` MiB of `size`-byte records, a few batches in flight; every one
    must be acknowledged."""
    maker = RecordMaker(size, producer=FILL_PRODUCER)
    total = max(1, int(mib * (1 << 20)) // size)
    per_batch = max(1, FILL_BATCH_BYTES // size)
    slots = asyncio.Semaphore(FILL_IN_FLIGHT)

    async def one(first: int, values: list[bytes]) -> None:
        try:
            await client.produce(TOPIC, partition, values)
        finally:
            slots.release()
        maker.ledger.ack(first, len(values))

    tasks = []
    while maker.ledger.sent < total:
        await slots.acquire()
        first = maker.ledger.sent
        values = maker.batch(time.monotonic_ns(), min(per_batch, total - first))
        tasks.append(asyncio.ensure_future(one(first, values)))
    await asyncio.gather(*tasks)
    return maker.ledger


# -- watching the partition ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Observation:
    at_ns: int
    learners: frozenset[str]
    """Nodes catching up as learners of the partition (`laminar_partition_moving`)."""
    holders: frozenset[str]
    """Nodes that serve the partition as a replica (answer ListOffsets for it)."""
    leader: str | None
    bench_cpu_s: float
    node_cpu_s: dict[str, float]
    fsyncs: dict[str, tuple[float, float]]
    """Per node: durable writes of its partition logs so far, and their seconds."""


class Monitor(threading.Thread):
    """Polls every node's /metrics and the partition's replicas every `poll_s`."""

    def __init__(self, nodes: dict[str, RunningNode], pid: int, poll_s: float) -> None:
        super().__init__(daemon=True)
        self.nodes = nodes
        self.pid = pid
        self.poll_s = poll_s
        self.observations: list[Observation] = []
        self._halt = threading.Event()
        self._bench = psutil.Process()

    def run(self) -> None:
        while not self._halt.is_set():
            self.observations.append(self.observe())
            self._halt.wait(self.poll_s)

    def halt(self) -> None:
        self._halt.set()
        self.join()

    def observe(self) -> Observation:
        learners: set[str] = set()
        holders: set[str] = set()
        leaders: list[str] = []
        cpu: dict[str, float] = {}
        fsyncs: dict[str, tuple[float, float]] = {}
        topic_id, index = self.pid >> 32, self.pid & 0xFFFF_FFFF
        for name, node in list(self.nodes.items()):
            if not node.alive():
                continue
            cpu[name] = tree_cpu_s(node.pid)  # the supervisor and its shards
            try:
                samples = parse_prometheus(_get(f"{node.admin_url}/metrics"))
            except OSError:
                samples = []
            fsync = {m: v for m, _, v in samples if m.startswith("laminar_fsync_latency_seconds_")}
            if fsync:
                fsyncs[name] = (
                    fsync.get("laminar_fsync_latency_seconds_count", 0.0),
                    fsync.get("laminar_fsync_latency_seconds_sum", 0.0),
                )
            learners |= {
                labels["learner"]
                for metric, labels, _ in samples
                if metric == "laminar_partition_moving"
                and int(labels["topic_id"]) == topic_id
                and int(labels["partition"]) == index
            }
            try:
                answer = offsets(node, self.pid)
            except (AssertionError, OSError):
                continue  # NOT_LEADER: no replica here (yet, or any more)
            holders.add(name)
            if answer.leader is not None:
                leaders.append(answer.leader)
        times = self._bench.cpu_times()
        return Observation(
            time.monotonic_ns(),
            frozenset(learners),
            frozenset(holders),
            max(set(leaders), key=leaders.count) if leaders else None,
            times.user + times.system,
            cpu,
            fsyncs,
        )

    async def until(self, check: Any, what: str, timeout_s: float) -> Observation:
        """The first new observation for which `check(obs)` holds."""
        seen = len(self.observations)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            while seen < len(self.observations):
                obs = self.observations[seen]
                seen += 1
                if check(obs):
                    return obs
            await asyncio.sleep(self.poll_s / 4)
        raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")

    def leader_shard(self) -> int:
        """The pid of the partition's leader's shard (one shard per node)."""
        leader = self.observations[-1].leader
        assert leader is not None, "no leader known"
        return int(self.nodes[leader].info["shard_pids"][0])

    def between(self, lo_ns: int, hi_ns: int) -> list[Observation]:
        return [o for o in self.observations if lo_ns <= o.at_ns <= hi_ns]


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=2) as response:
        return str(response.read().decode())


class Profiler:
    """`py-spy record` of one process while a window lasts (`--profile DIR`):
    collapsed stacks, one file per run and window. Off without a directory."""

    def __init__(self, out: Path | None, run: int) -> None:
        self.out = out
        self.run = run
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, pid: int, window: str) -> None:
        if self.out is None:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        spy = Path(sys.executable).with_name("py-spy")
        path = self.out / f"run{self.run}-{window}.txt"
        command = [str(spy), "record", "--pid", str(pid), "--format", "raw", "--nonblocking"]
        self._proc = subprocess.Popen(
            [*command, "--output", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.send_signal(signal.SIGINT)  # py-spy writes its file and exits
            self._proc.wait(30)
            self._proc = None


# -- one run ---------------------------------------------------------------------------------


@dataclass
class Window:
    name: str
    seconds: float = 0.0
    requests: int = 0
    errors: int = 0
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    max_ms: float = math.nan
    bench_cpu_pct: float = math.nan
    node_cpu_pct: dict[str, float] = field(default_factory=dict)
    fsync_ms: dict[str, float] = field(default_factory=dict)
    """Per node: the mean durable write (write + fdatasync) of its logs."""


@dataclass
class RunResult:
    run: int
    steady_first: bool
    partition: int = 0
    newcomer: str = ""
    removed: str = ""
    leader_before: str | None = None
    leader_after: str | None = None
    move_s: float = math.nan
    windows: dict[str, Window] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    first_errors: list[str] = field(default_factory=list)
    fill_records: int = 0
    acknowledged: int = 0
    delivery: dict[str, dict[str, Any]] = field(default_factory=dict)
    load: tuple[float, float] = (math.nan, math.nan)


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least `q` of them at or below it."""
    if not sorted_values:
        return math.nan
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def window(
    name: str,
    outcomes: list[tuple[int, int, bool]],
    inside: Any,
    rate: float,
    monitor: Monitor,
    span: tuple[int, int] | None = None,
) -> Window:
    """The requests whose intended time is `inside(t)` (their schedule's
    seconds at `rate`), and the CPU over `span`."""
    chosen = [(i, d, ok) for i, d, ok in outcomes if inside(i)]
    latencies = sorted((d - i) / 1e6 for i, d, ok in chosen if ok)
    out = Window(
        name,
        len(chosen) / rate,
        len(chosen),
        sum(1 for *_, ok in chosen if not ok),
        percentile(latencies, 0.50),
        percentile(latencies, 0.99),
        latencies[-1] if latencies else math.nan,
    )
    polls = monitor.between(*span) if span is not None else []
    if len(polls) >= 2:
        first, last = polls[0], polls[-1]
        elapsed = (last.at_ns - first.at_ns) / 1e9
        out.bench_cpu_pct = 100 * (last.bench_cpu_s - first.bench_cpu_s) / elapsed
        for node in last.node_cpu_s:
            since = next(p for p in polls if node in p.node_cpu_s)  # a newcomer: from its first
            took = (last.at_ns - since.at_ns) / 1e9
            if took > 0:
                used = last.node_cpu_s[node] - since.node_cpu_s[node]
                out.node_cpu_pct[node] = 100 * used / took
        for node, (count, total) in last.fsyncs.items():
            since = next(p for p in polls if node in p.fsyncs)
            writes = count - since.fsyncs[node][0]
            if writes > 0:
                out.fsync_ms[node] = 1000 * (total - since.fsyncs[node][1]) / writes
    return out


async def measure(tmp: Path, args: argparse.Namespace, run: int) -> RunResult:
    result = RunResult(run, steady_first=run % 2 == 1)
    flags = {} if args.move_rate is None else {"move_rate": args.move_rate}
    with gossip_cluster(tmp, 3, **flags) as (nodes, start):
        names = set(nodes)
        wait_until(lambda: all(set(member_states(n)) == names for n in nodes.values()), "joined")
        bootstrap = ",".join(n.bootstrap for n in nodes.values())
        client = AsyncClient(bootstrap, retry=RetryPolicy(budget_s=30))
        await client.connect()
        try:
            return await _measure(client, nodes, start, args, result)
        finally:
            await client.close()
            if args.logs is not None:  # the nodes' logs, to read what happened
                args.logs.mkdir(parents=True, exist_ok=True)
                for name, node in nodes.items():
                    shutil.copyfile(node.log_path, args.logs / f"run{run}-{name}.log")


async def _measure(
    client: AsyncClient,
    nodes: dict[str, RunningNode],
    start: Any,
    args: argparse.Namespace,
    result: RunResult,
) -> RunResult:
    deadline = time.monotonic() + 60
    while True:
        try:
            topic = await client.create_topic(TOPIC, args.partitions, replication_factor=RF)
            break
        except LaminarError:  # the metadata group still electing
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
    first = frozenset(nodes)
    partition, newcomer = await choose(client, topic.topic_id, first, args)
    result.partition, result.newcomer = partition, newcomer
    pid = partition_id(topic.topic_id, partition)
    monitor = Monitor(nodes, pid, args.poll)
    profiler = Profiler(args.profile, result.run)
    monitor.start()
    try:
        await monitor.until(lambda o: o.holders == first and o.leader, "replicas", 60)
        target = frozenset(replica_nodes(pid, dict.fromkeys([*first, newcomer], 1.0), RF))
        (result.removed,) = first - target
        fill_ledger = await fill(client, partition, args.fill_mib, args.fill_size)
        result.fill_records = fill_ledger.sent
        producer = OpenLoopProducer(client, partition, args.rate, args.size)
        running = asyncio.ensure_future(producer.run())
        try:
            await asyncio.sleep(args.warmup)
            if result.steady_first:
                steady = await _steady(monitor, profiler, args.steady, first)
                moved = await _move(monitor, profiler, start, newcomer, first, target, result)
            else:
                moved = await _move(monitor, profiler, start, newcomer, first, target, result)
                await asyncio.sleep(args.settle)
                steady = await _steady(monitor, profiler, args.steady, target)
            await asyncio.sleep(args.tail)
        finally:
            producer.stop()
            await running
        outcomes = producer.outcomes
        spans = {"steady": steady, "move": moved}
        result.windows = {
            name: window(
                name, outcomes, lambda t, s=span: s[0] <= t < s[1], args.rate, monitor, span
            )
            for name, span in spans.items()
        }
        result.windows["other"] = window(
            "other",
            outcomes,
            lambda t: not any(lo <= t < hi for lo, hi in spans.values()),
            args.rate,
            monitor,
        )
        result.errors = producer.errors
        result.first_errors = producer.first_errors
        if args.timeline is not None:
            write_timeline(args.timeline / f"run{result.run}.tsv", outcomes, monitor, spans)
    finally:
        monitor.halt()
    result.acknowledged = producer.maker.ledger.acknowledged()
    ledgers = {FILL_PRODUCER: fill_ledger, LOAD_PRODUCER: producer.maker.ledger}
    result.delivery = verify(nodes, target, pid, ledgers)
    return result


async def choose(
    client: AsyncClient, topic_id: int, first: frozenset[str], args: argparse.Namespace
) -> tuple[int, str]:
    """The partition to move and the newcomer's name: the first partition
    for which some name n4, n5, ... enters its top replicas by weighted
    rendezvous and pushes out its leader (`--leaving leader`) or a follower.
    A newcomer can only push out the lowest scored of the three, so the
    leader can go only from partitions whose leader scores lowest."""
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(LaminarError):
            leaders = [p.leader for p in (await client.describe_topic(TOPIC)).partitions]
            if all(leaders):
                break
        if time.monotonic() > deadline:
            raise AssertionError("no leader for every partition within 60 s")
        await asyncio.sleep(0.1)
    for partition, leader in enumerate(leaders):
        pid = partition_id(topic_id, partition)
        for i in range(len(first) + 1, 1000):
            name = f"n{i}"
            top = replica_nodes(pid, dict.fromkeys([*first, name], 1.0), RF)
            if name in top and (leader not in top) == (args.leaving == "leader"):
                return partition, name
    raise AssertionError(
        f"no partition of {args.partitions} has its {args.leaving} pushed out by a newcomer "
        f"(leaders {leaders}); try more --partitions"
    )


async def _steady(
    monitor: Monitor, profiler: Profiler, seconds: float, holders: frozenset[str]
) -> tuple[int, int]:
    """A window of `seconds` during which the partition did not move."""
    profiler.start(monitor.leader_shard(), "steady")
    lo = time.monotonic_ns()
    await asyncio.sleep(seconds)
    hi = time.monotonic_ns()
    profiler.stop()
    await monitor.until(lambda o: o.at_ns > hi, "a poll after the steady window", 30)
    for obs in monitor.between(lo, hi):
        if obs.learners or obs.holders != holders:
            raise AssertionError(
                f"the partition moved during the steady window: learners "
                f"{sorted(obs.learners)}, replicas {sorted(obs.holders)}"
            )
    return lo, hi


async def _move(
    monitor: Monitor,
    profiler: Profiler,
    start: Any,
    newcomer: str,
    first: frozenset[str],
    target: frozenset[str],
    result: RunResult,
) -> tuple[int, int]:
    """Start the newcomer; the span from the last poll before the move began
    to the first poll that saw it done."""
    seed = monitor.nodes["n1"].info["membership_address"]
    result.leader_before = monitor.observations[-1].leader
    ready = len(monitor.observations)
    profiler.start(monitor.leader_shard(), "move")
    await asyncio.to_thread(start, newcomer, seed)
    began = await monitor.until(
        lambda o: bool(o.learners) or o.holders != first, "the move to begin", MOVE_START_S
    )
    before = [o for o in monitor.observations[ready:] if o.at_ns < began.at_ns]
    lo = before[-1].at_ns if before else monitor.observations[ready - 1].at_ns
    done = await monitor.until(
        lambda o: not o.learners and o.holders == target, "the move to end", 600
    )
    profiler.stop()
    result.leader_after = done.leader
    result.move_s = (done.at_ns - lo) / 1e9
    return lo, done.at_ns


def verify(
    nodes: dict[str, RunningNode], target: frozenset[str], pid: int, ledgers: dict[int, Ledger]
) -> dict[str, dict[str, Any]]:
    """Every replica of the target set holds every acknowledged record exactly
    once (once their commit indexes agree)."""

    def agreed() -> bool:
        marks = {offsets(nodes[n], pid).committed_index for n in target}
        return len(marks) == 1

    wait_until(agreed, "the replicas' commit indexes agree", 120)
    out = {}
    for name in sorted(target):
        values = [decode_user_record(blob)[0] for _, blob in read_replica(nodes[name], pid)]
        out[name] = check_delivery(ledgers, values).to_dict()
    return out


def write_timeline(
    path: Path,
    outcomes: list[tuple[int, int, bool]],
    monitor: Monitor,
    spans: dict[str, tuple[int, int]],
) -> None:
    """Per 100 ms of intended send time: the requests, their p99 and max, and
    what the last poll saw (`--timeline DIR`, to see where a window's tail is)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    start = outcomes[0][0]
    buckets: dict[int, list[float]] = {}
    for intended, done, ok in outcomes:
        buckets.setdefault((intended - start) // 100_000_000, []).append(
            (done - intended) / 1e6 if ok else math.inf
        )
    rows = ["t_s\twindow\trequests\tp99_ms\tmax_ms\tlearners\treplicas\tleader"]
    polls = monitor.observations
    for bucket, latencies in sorted(buckets.items()):
        at = start + bucket * 100_000_000
        name = next((n for n, (lo, hi) in spans.items() if lo <= at < hi), "other")
        seen = next((o for o in reversed(polls) if o.at_ns <= at + 100_000_000), polls[0])
        latencies.sort()
        rows.append(
            f"{bucket / 10:.1f}\t{name}\t{len(latencies)}\t{percentile(latencies, 0.99):.1f}\t"
            f"{latencies[-1]:.1f}\t{','.join(sorted(seen.learners))}\t"
            f"{','.join(sorted(seen.holders))}\t{seen.leader}"
        )
    path.write_text("\n".join(rows) + "\n")


# -- reporting -----------------------------------------------------------------------------------


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}"


def _line(r: RunResult) -> str:
    order = "steady first" if r.steady_first else "move first"
    role = "the leader" if r.removed == r.leader_before else "a follower"
    ratio = r.windows["move"].p99_ms / r.windows["steady"].p99_ms
    holders = ", ".join(sorted(r.delivery))
    ok = all(v["ok"] for v in r.delivery.values())
    checked = "each exactly once" if ok else "NOT each exactly once"
    return (
        f"run {r.run} ({order}): partition {r.partition}: {r.newcomer} joins, {r.removed} "
        f"leaves ({role}; leader {r.leader_before} -> {r.leader_after}); move {r.move_s:.1f} s; "
        f"p99 move/steady {ratio:.2f}; {r.acknowledged} load + {r.fill_records} fill records "
        f"acknowledged, {checked} on {holders}; load {r.load[0]:.1f} -> {r.load[1]:.1f}"
    )


def _per_node(values: dict[str, float], digits: int) -> str:
    return ", ".join(f"{n} {v:.{digits}f}" for n, v in sorted(values.items())) or "-"


def _median(runs: list[RunResult], which: str, attr: str) -> float:
    return statistics.median(getattr(r.windows[which], attr) for r in runs)


def table(runs: list[RunResult]) -> str:
    rows = [
        "| run | first | window | s | requests | errors | p50 ms | p99 ms | max ms | bench CPU "
        "| node CPU % | node fsync mean ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        for w in r.windows.values():
            rows.append(
                f"| {r.run} | {'steady' if r.steady_first else 'move'} | {w.name} | "
                f"{w.seconds:.1f} | {w.requests} | {w.errors} | {_ms(w.p50_ms)} | "
                f"{_ms(w.p99_ms)} | {_ms(w.max_ms)} | "
                f"{'-' if math.isnan(w.bench_cpu_pct) else f'{w.bench_cpu_pct:.0f}%'} | "
                f"{_per_node(w.node_cpu_pct, 0)} | {_per_node(w.fsync_ms, 1)} |"
            )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=2000.0, help="records/s, one per request")
    parser.add_argument("--size", type=int, default=100, help="bytes per load record")
    parser.add_argument("--fill-mib", type=float, default=64.0, help="MiB in the partition")
    parser.add_argument("--fill-size", type=int, default=4096, help="bytes per fill record")
    parser.add_argument("--steady", type=float, default=10.0, help="seconds of the steady window")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--settle", type=float, default=2.0, help="after a move, before steady")
    parser.add_argument("--tail", type=float, default=0.5, help="producing after the last window")
    parser.add_argument("--poll", type=float, default=0.1, help="seconds between polls")
    parser.add_argument(
        "--move-rate", type=int, default=None, help="the nodes' --move-rate (default: theirs)"
    )
    parser.add_argument("--partitions", type=int, default=1, help="of the topic; one of them moves")
    parser.add_argument(
        "--leaving",
        choices=("follower", "leader"),
        default="follower",
        help="which replica the newcomer pushes out (the leader: it hands leadership over first)",
    )
    parser.add_argument(
        "--profile", type=Path, default=None, help="py-spy the leader's shard in each window"
    )
    parser.add_argument(
        "--timeline", type=Path, default=None, help="per-100 ms latency, one file per run"
    )
    parser.add_argument("--logs", type=Path, default=None, help="copy the nodes' logs here")
    parser.add_argument(
        "--workdir", type=Path, default=None, help="where the nodes' data goes (default: TMPDIR)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write every run here")
    args = parser.parse_args()
    if not 1 <= args.runs <= 20 or not 0 < args.rate <= 100_000 or not 16 <= args.size <= 1 << 20:
        parser.error("--runs is 1..20, --rate (0, 100000], --size 16..1 MiB")
    if not 16 <= args.fill_size <= 1 << 20 or not 0 < args.fill_mib <= 4096:
        parser.error("--fill-size is 16..1 MiB, --fill-mib (0, 4096]")
    runs = []
    for run in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory(prefix="move-bench-", dir=args.workdir) as tmp:
            load_before = os.getloadavg()[0]
            result = asyncio.run(measure(Path(tmp), args, run))
            result.load = (load_before, os.getloadavg()[0])
        print(_line(result), flush=True)
        if result.errors:
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(result.errors.items()))
            print(f"  failed produces: {kinds}; first: " + " | ".join(result.first_errors))
        runs.append(result)
        bad = {n: v for n, v in result.delivery.items() if not v["ok"]}
        if bad:
            print(f"DELIVERY FAILED in run {run}: {json.dumps(bad)}", file=sys.stderr, flush=True)
    print(table(runs))
    failed = [r.run for r in runs if not all(v["ok"] for v in r.delivery.values())]

    def ratio(attr: str) -> float:
        return statistics.median(
            getattr(r.windows["move"], attr) / getattr(r.windows["steady"], attr) for r in runs
        )

    print(
        f"median of {args.runs}: steady p50/p99/max {_median(runs, 'steady', 'p50_ms'):.1f}/"
        f"{_median(runs, 'steady', 'p99_ms'):.1f}/{_median(runs, 'steady', 'max_ms'):.1f} ms, "
        f"move {_median(runs, 'move', 'p50_ms'):.1f}/{_median(runs, 'move', 'p99_ms'):.1f}/"
        f"{_median(runs, 'move', 'max_ms'):.1f} ms; move / steady (median of the runs' ratios): "
        f"p50 {ratio('p50_ms'):.2f}, p99 {ratio('p99_ms'):.2f}, max {ratio('max_ms'):.2f}; "
        f"move {statistics.median(r.move_s for r in runs):.1f} s ({args.fill_mib:g} MiB, "
        f"--move-rate {'default' if args.move_rate is None else args.move_rate}, the "
        f"{args.leaving} leaves); "
        + (
            f"DELIVERY FAILED in run(s) {failed}: acknowledged records missing"
            if failed
            else "every acknowledged record on every replica, exactly once"
        )
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([asdict(r) for r in runs], indent=2, default=str) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
