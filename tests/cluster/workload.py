"""A Jepsen-style workload: clients produce and read while a nemesis injects faults,
then every replica's log is read and the history checked (`tests.cluster.history`).

    python -m tests.cluster.workload --minutes 10      # make soak: prints a summary
    outcome = run(tmp_path, Settings(duration_s=20))   # tests/cluster/test_workload.py

Clients (threads, one `Client` each) pick at random between:

- an idempotent produce (producer id + sequence, retried by the client across
  leader changes): acknowledged, or `info` whatever the error, since the error
  of the last retry hides what the earlier attempts did; a new producer id
  follows any error;
- a plain produce, sent once (no retries): acknowledged, `fail` when the node
  refused it (NOT_LEADER, NOT_ENOUGH_REPLICAS, NOT_READY, SHUTTING_DOWN: nothing
  appended) or could not be reached, `info` when its answer was lost;
- a read from the leader (through the client) or from a random replica
  (follower reads), continuing where this client's last read there stopped.

Every value is unique (client, counter). The nemesis applies one fault at a
time to one node, then heals it: SIGKILL and restart; SIGSTOP then SIGCONT; and
with network namespaces (root): the node's cable pulled (`isolate`), the node
cut off from its peers while clients still reach it (`split`), 30% packet loss.
No delay: the kernel has no netem. After the run everything is healed, the
replicas converge, and the history is checked against every replica's log.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from laminar.client import (
    CannotConnectError,
    Client,
    LaminarError,
    NotEnoughReplicasError,
    NotLeaderError,
    NotReadyError,
    RetryPolicy,
    ShuttingDownError,
)
from laminar.placement import partition_id
from laminar.wire import ErrorResponse, FetchRequest
from laminar.wire.records import decode_record
from tests.cluster.history import Produce, Read, Report, check
from tests.cluster.netns import TestNetwork, netns_reason
from tests.cluster.nodes import Cluster, committed_values, host_index, leader_of, offsets, request
from tests.support import wait_until

TOPIC = "history"
PROCESS_FAULTS = ("kill", "pause")
NETWORK_FAULTS = ("isolate", "split", "loss")
REFUSED = (
    NotLeaderError,
    NotEnoughReplicasError,
    NotReadyError,
    ShuttingDownError,
    CannotConnectError,
)
"""Errors of a produce sent once that mean nothing was appended."""


@dataclass(frozen=True)
class Settings:
    duration_s: float = 20.0
    clients: int = 4
    partitions: int = 2
    faults: tuple[str, ...] = PROCESS_FAULTS + NETWORK_FAULTS
    """Those the machine cannot do (the network faults without namespaces) are left out."""
    fault_s: tuple[float, float] = (1.0, 4.0)
    """How long a fault lasts (uniform in the range)."""
    calm_s: tuple[float, float] = (1.0, 3.0)
    """How long the cluster runs unharmed between faults."""
    seed: int = 0


@dataclass(frozen=True)
class Fault:
    at_s: float
    kind: str
    node: str
    lasted_s: float

    def __str__(self) -> str:
        return f"at {self.at_s:5.1f} s: {self.kind} {self.node} for {self.lasted_s:.1f} s"


@dataclass
class Outcome:
    """What a run did and what the checker found."""

    settings: Settings
    report: Report
    produces: Counter[str] = field(default_factory=Counter)
    reads: int = 0
    records_read: int = 0
    faults: list[Fault] = field(default_factory=list)

    def summary(self) -> str:
        produced = ", ".join(f"{n} {kind}" for kind, n in sorted(self.produces.items()))
        faults = Counter(fault.kind for fault in self.faults)
        lines = [
            f"history check: {'VALID' if self.report.valid else 'INVALID'}",
            f"  {self.settings.duration_s:.0f} s, {self.settings.clients} clients, "
            f"{self.settings.partitions} partitions, seed {self.settings.seed}",
            f"  produces: {produced or 'none'}",
            f"  reads: {self.reads} answers, {self.records_read} records",
            f"  faults: {', '.join(f'{n} {k}' for k, n in sorted(faults.items())) or 'none'}",
            *(f"    {fault}" for fault in self.faults),
            *(f"  {line}" for line in self.report.summary().splitlines()),
        ]
        return "\n".join(lines)


class History:
    """The operations of every client thread, in completion order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ops: list[Produce | Read] = []
        self.ends: dict[int, int] = {}
        """partition -> one past the highest offset any client saw (where reads start)."""

    def add(self, op: Produce | Read) -> None:
        with self._lock:
            self.ops.append(op)
            if isinstance(op, Produce) and op.offset is not None:
                self.ends[op.partition] = max(self.ends.get(op.partition, 0), op.offset + 1)
            elif isinstance(op, Read) and op.records:
                end = op.records[-1][0] + 1
                self.ends[op.partition] = max(self.ends.get(op.partition, 0), end)


class Worker:
    """One client thread's random mix of produces and reads (see the module docstring)."""

    def __init__(
        self, number: int, cluster: Cluster, pids: list[int], history: History, seed: int
    ) -> None:
        self.number = number
        self.cluster = cluster
        self.pids = pids
        self.history = history
        self.rng = random.Random(seed)
        self.counter = 0
        self.epoch = 0
        self.sequences: dict[int, int] = {}
        self.positions: dict[tuple[int, str | None], int] = {}
        """(partition, node or None for the leader) -> where the next read starts."""
        retry = RetryPolicy(budget_s=10)
        self.client = Client(cluster.bootstrap, timeout_s=12, retry=retry)
        self.once = Client(cluster.bootstrap, timeout_s=12, retry=RetryPolicy(budget_s=0))

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                partition = self.rng.randrange(len(self.pids))
                roll = self.rng.random()
                if roll < 0.35:
                    self.produce_idempotent(partition)
                elif roll < 0.6:
                    self.produce_once(partition)
                else:
                    self.read(partition)
        finally:
            self.client.close()
            self.once.close()

    def _value(self) -> bytes:
        self.counter += 1
        return b"c%d-%d" % (self.number, self.counter)

    def produce_idempotent(self, partition: int) -> None:
        value = self._value()
        sequence = self.sequences.get(partition, 0)
        producer_id = (self.number + 1) << 20 | self.epoch
        try:
            offset = self.client.produce(
                TOPIC, partition, [value], producer_id=producer_id, sequence=sequence
            )
        except LaminarError:
            self.history.add(Produce(partition, value, "info"))
            self.epoch += 1  # the sequence may or may not have been used: start afresh
            self.sequences.clear()
            return
        self.sequences[partition] = sequence + 1
        self.history.add(Produce(partition, value, "ok", offset))

    def produce_once(self, partition: int) -> None:
        value = self._value()
        try:
            offset = self.once.produce(TOPIC, partition, [value])
        except REFUSED:
            self.history.add(Produce(partition, value, "fail"))
            return
        except LaminarError:
            self.history.add(Produce(partition, value, "info"))
            return
        self.history.add(Produce(partition, value, "ok", offset))

    def read(self, partition: int) -> None:
        """Consume from where this client last stopped on that replica (or on the
        leader), as a consumer polls; far behind, or after an error, start again
        near the end the clients know of."""
        target = None if self.rng.random() < 0.5 else self.rng.choice(sorted(self.cluster.nodes))
        key = (partition, target)
        end = self.history.ends.get(partition, 0)
        start = self.positions.get(key)
        if start is None or end - start > 200:
            start = max(0, end - self.rng.randrange(1, 30))
        try:
            if target is None:
                fetched = self.client.fetch(TOPIC, partition, start, max_records=50)
                records = tuple((r.index, r.value) for r in fetched)
            else:
                records = self._read_replica(target, partition, start)
        except (LaminarError, OSError, AssertionError):
            self.positions.pop(key, None)  # a node down, paused or cut off, or behind
            return
        self.history.add(Read(partition, records))
        if records:
            self.positions[key] = records[-1][0] + 1

    def _read_replica(self, node: str, partition: int, start: int) -> tuple[tuple[int, bytes], ...]:
        pid = self.pids[partition]
        message = FetchRequest(pid, start, max_records=50, any_replica=True)
        answer = request(self.cluster.nodes[node], pid, message, timeout_s=5)
        if isinstance(answer, ErrorResponse):
            raise AssertionError(str(answer))
        return tuple((r.index, decode_record(r.blob)[0]) for r in answer.records)


class Nemesis:
    """One fault at a time on one node, each healed before the next. Faults come in
    rounds, every kind once per round in a random order; the node is mostly a
    random partition's leader (the interesting victim), else any node."""

    def __init__(
        self,
        cluster: Cluster,
        net: TestNetwork | None,
        pids: list[int],
        settings: Settings,
        log: list[Fault],
    ) -> None:
        self.cluster = cluster
        self.net = net
        self.pids = pids
        self.settings = settings
        self.rng = random.Random(settings.seed ^ 0x5EED)
        self.log = log
        possible = PROCESS_FAULTS + (NETWORK_FAULTS if net is not None else ())
        self.faults = [f for f in settings.faults if f in possible]
        self.started = time.monotonic()

    def run(self, stop: threading.Event) -> None:
        round_: list[str] = []
        while self.faults and not stop.wait(self.rng.uniform(*self.settings.calm_s)):
            if not round_:
                round_ = self.rng.sample(self.faults, len(self.faults))
            fault, node = round_.pop(), self._target()
            heal = self._apply(fault, node)
            at = time.monotonic() - self.started
            stop.wait(self.rng.uniform(*self.settings.fault_s))
            heal()
            self.log.append(Fault(at, fault, node, time.monotonic() - self.started - at))

    def _target(self) -> str:
        nodes = sorted(self.cluster.nodes)
        if self.rng.random() < 0.8:
            with contextlib.suppress(LaminarError, OSError, AssertionError):
                pid = self.rng.choice(self.pids)
                leader = offsets(self.cluster.nodes[self.rng.choice(nodes)], pid).leader
                if leader in nodes:
                    return leader
        return self.rng.choice(nodes)

    def _apply(self, fault: str, node: str) -> Callable[[], None]:
        cluster, net = self.cluster, self.net
        if fault == "kill":
            cluster.nodes[node].kill()
            return lambda: self._restart(node)
        if fault == "pause":
            os.killpg(cluster.nodes[node].pid, signal.SIGSTOP)
            return lambda: os.killpg(cluster.nodes[node].pid, signal.SIGCONT)
        assert net is not None
        if fault == "isolate":
            net.isolate(host_index(node))
        elif fault == "split":
            net.split(host_index(node))
        else:
            net.loss(host_index(node), 30)
        return net.heal

    def _restart(self, node: str) -> None:
        self.cluster.restart(node)


class Convergence:
    """Whether every replica of every partition agrees on the leader and the commit
    index, unchanged for `STEADY_S` (no writers are left: what is committed then
    is final)."""

    STEADY_S = 1.0

    def __init__(self, cluster: Cluster, pids: list[int]) -> None:
        self.cluster = cluster
        self.pids = pids
        self.last: list[tuple[str, int]] | None = None
        self.since = 0.0

    def __call__(self) -> bool:
        state = []
        for pid in self.pids:
            views = {
                (answer.leader, answer.committed_index)
                for answer in (offsets(node, pid) for node in self.cluster.nodes.values())
            }
            if len(views) != 1 or None in next(iter(views)):
                self.last = None
                return False
            state.append(views.pop())
        if state != self.last:
            self.last, self.since = state, time.monotonic()
        return time.monotonic() - self.since >= self.STEADY_S


def run_on(cluster: Cluster, net: TestNetwork | None, settings: Settings) -> Outcome:
    """The workload against a running cluster (see the module docstring)."""
    with Client(cluster.bootstrap, retry=RetryPolicy(budget_s=30)) as admin:
        topic = admin.create_topic(TOPIC, partitions=settings.partitions, replication_factor=3)
    pids = [partition_id(topic.topic_id, p) for p in range(settings.partitions)]
    for pid in pids:
        leader_of(cluster, pid)  # every node knows the topic (see `leader_of`)
    history = History()
    faults: list[Fault] = []
    stop = threading.Event()
    workers = [
        Worker(n, cluster, pids, history, settings.seed * 1000 + n) for n in range(settings.clients)
    ]
    nemesis = Nemesis(cluster, net, pids, settings, faults)
    with ThreadPoolExecutor(len(workers) + 1) as pool:
        tasks: list[Callable[[threading.Event], None]] = [w.run for w in workers]
        running = [pool.submit(task, stop) for task in (*tasks, nemesis.run)]
        stop.wait(settings.duration_s)
        stop.set()
        for task in running:
            task.result()  # a client or the nemesis that failed fails the run
    wait_until(Convergence(cluster, pids), "every replica converging", timeout_s=120)
    final = {
        name: {p: committed_values(node, pid) for p, pid in enumerate(pids)}
        for name, node in cluster.nodes.items()
    }
    outcome = Outcome(settings, check(history.ops, final), faults=faults)
    for op in history.ops:
        if isinstance(op, Produce):
            outcome.produces[op.outcome] += 1
        else:
            outcome.reads += 1
            outcome.records_read += len(op.records)
    return outcome


@contextlib.contextmanager
def cluster_for(tmp: Path, use_netns: bool) -> Iterator[tuple[Cluster, TestNetwork | None]]:
    """Three nodes in namespaces when the machine allows (and asked), else on loopback."""
    if use_netns and netns_reason() is None:
        with TestNetwork(3) as net, Cluster.start_on(net, tmp, 3) as cluster:
            yield cluster, net
    else:
        with Cluster.start(tmp, 3) as cluster:
            yield cluster, None


def run(tmp: Path, settings: Settings, use_netns: bool = True) -> Outcome:
    with cluster_for(tmp, use_netns) as (cluster, net):
        return run_on(cluster, net, settings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--seed", type=int, default=None, help="default: random")
    parser.add_argument("--no-netns", action="store_true", help="loopback, process faults only")
    args = parser.parse_args(argv)
    if not 0 < args.minutes <= 24 * 60 or not 1 <= args.clients <= 64:
        parser.error("--minutes must be in (0, 1440] and --clients in 1..64")
    if not 1 <= args.partitions <= 64:
        parser.error("--partitions must be in 1..64")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    settings = Settings(args.minutes * 60, args.clients, args.partitions, seed=seed)
    if not args.no_netns and netns_reason() is not None:
        print(f"no network faults: {netns_reason()}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="laminar-workload-") as tmp:
        outcome = run(Path(tmp), settings, use_netns=not args.no_netns)
    print(outcome.summary())
    return 0 if outcome.report.valid else 1


if __name__ == "__main__":
    sys.exit(main())
