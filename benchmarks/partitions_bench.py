"""Tens of thousands of partitions on one node (issue 24, finding 3), in one run.

    .venv/bin/python benchmarks/partitions_bench.py [--topics 5] [--partitions 10000]

Starts a node, measures a pinger's p99 at rest, creates the topics, produces
one record (naming its partition) to every partition, reads every record back
by identity, restarts the node on the same data and measures how long it takes
to be ready, the first produce after it, and the pinger at rest again. Peak
descriptors (every process of the node, from /proc) and RSS are sampled all
along. Prints one JSON object.

    .venv/bin/python benchmarks/partitions_bench.py --cluster 3 --partitions 12000

instead creates one topic of 12,000 partitions on a static cluster of three
nodes (one shard each, every partition a Raft group of three) and reports the
first node's ping p99 at rest, during the create and while the groups settle.

The pinger is a process of its own (a client in this one would share its GIL
with the producer): it pings the node port every 5 ms and reports each
latency with its time, so each phase takes the pings that fell inside it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from laminar.client import Client, Pending
from tests.system.nodes import RunningNode, start_node

PING_INTERVAL_S = 0.005


def pinger(bootstrap: str) -> None:
    """Ping until stdin closes; then print `time latency_ms` lines (-1: no answer)."""
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    samples: list[tuple[float, float]] = []
    with Client(bootstrap) as client:
        while not done.is_set():
            start = time.monotonic()
            try:
                client.ping()
                samples.append((start, (time.monotonic() - start) * 1000))
            except Exception:  # a restart: no answer is a sample of its own kind
                samples.append((start, -1.0))
                time.sleep(0.1)
            time.sleep(PING_INTERVAL_S)
    print("\n".join(f"{t} {ms}" for t, ms in samples))


class Sampler:
    """Peak descriptors and RSS over every process of the nodes, sampled."""

    def __init__(self) -> None:
        self.nodes: list[RunningNode] = []
        self.fds_peak = 0
        self.rss_peak_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def now(self) -> tuple[int, float]:
        fds, rss_kib = 0, 0
        pids = [p for n in self.nodes if n.alive() for p in (n.pid, *n.shard_pids())]
        for pid in pids:
            try:
                fds += len(os.listdir(f"/proc/{pid}/fd"))
                with open(f"/proc/{pid}/status") as status:
                    for line in status:
                        if line.startswith("VmRSS:"):
                            rss_kib += int(line.split()[1])
            except (FileNotFoundError, ProcessLookupError):
                continue
        return fds, rss_kib / 1024

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            fds, rss = self.now()
            self.fds_peak = max(self.fds_peak, fds)
            self.rss_peak_mib = max(self.rss_peak_mib, rss)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def pinging(
    bootstrap: str, phases: dict[str, tuple[float, float]], out: dict[str, Any]
) -> Iterator[None]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--pinger", bootstrap],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield
    finally:
        stdout, _ = proc.communicate("", timeout=60)
    samples = [tuple(map(float, line.split())) for line in stdout.splitlines() if line]
    for phase, (start, end) in phases.items():
        inside = [ms for t, ms in samples if start <= t < end]
        answered = sorted(ms for ms in inside if ms >= 0)
        if not answered:
            continue
        out[f"ping_{phase}"] = {
            "count": len(answered),
            "unanswered": len(inside) - len(answered),
            "p50_ms": round(statistics.median(answered), 3),
            "p99_ms": round(answered[min(len(answered) - 1, int(len(answered) * 0.99))], 3),
            "max_ms": round(answered[-1], 3),
        }


def timed(phases: dict[str, tuple[float, float]], name: str, action: Callable[[], Any]) -> float:
    start = time.monotonic()
    action()
    end = time.monotonic()
    phases[name] = (start, end)
    return end - start


def rest(seconds: float) -> None:
    time.sleep(seconds)  # the phase *is* a stretch of time at rest


def rest_then_create(
    phases: dict[str, tuple[float, float]],
    out: dict[str, Any],
    sampler: Sampler,
    rest_s: float,
    create: Callable[[], Any],
) -> None:
    """The first two phases of both modes: at rest, then the topics' creation."""
    timed(phases, "at_rest", lambda: rest(rest_s))
    out["fds_at_rest"] = sampler.now()[0]
    out["create_s"] = round(timed(phases, "during_create", create), 2)


def value(topic: str, partition: int) -> bytes:
    return f"{topic}/{partition}".encode()


def produce_all(client: Client, topics: list[str], partitions: int, window: int) -> None:
    pending: deque[Pending[int]] = deque()
    for topic in topics:
        for p in range(partitions):
            pending.append(client.produce_nowait(topic, p, [value(topic, p)]))
            if len(pending) >= window:
                pending.popleft().result()
    while pending:
        pending.popleft().result()


def check_all(client: Client, topics: list[str], partitions: int, window: int) -> None:
    """Every record back, by identity (its value names its place)."""
    pending: deque[tuple[str, int, Pending[Any]]] = deque()

    def settle() -> None:
        topic, p, waiting = pending.popleft()
        got = [r.value for r in waiting.result()]
        if got != [value(topic, p)]:
            raise AssertionError(
                f"{topic}/{p}: expected one record {value(topic, p)!r}, got {got!r}"
            )

    for topic in topics:
        for p in range(partitions):
            pending.append((topic, p, client.fetch_nowait(topic, p, 0)))
            if len(pending) >= window:
                settle()
    while pending:
        settle()


def first_produces(client: Client, topics: list[str], partitions: int, count: int) -> list[float]:
    """Latency (ms) of one produce each to `count` partitions not touched since
    the restart, one at a time: each opens (and recovers) its log."""
    rng = random.Random(7)
    out = []
    for _ in range(count):
        topic, p = rng.choice(topics), rng.randrange(partitions)
        start = time.perf_counter()
        client.produce(topic, p, [b"after-restart"])
        out.append((time.perf_counter() - start) * 1000)
    return out


def metric(node: RunningNode, name: str) -> int:
    """The sum of a /metrics gauge over the node's shards."""
    text = node.admin_get("/metrics")[1]
    return sum(
        int(float(line.split()[-1])) for line in text.splitlines() if line.startswith(name + "{")
    )


def settle(
    nodes: list[RunningNode], args: argparse.Namespace, seen: list[tuple[float, int, int]]
) -> None:
    """Until every replica of the create is open and at most 1% of the groups are
    active (elected and quiesced), or `--settle-s` pass; `seen` gets (s, open, active)."""
    start = time.monotonic()
    replicas = args.partitions * min(3, len(nodes))
    while time.monotonic() - start < args.settle_s:
        opened = sum(metric(n, "laminar_raft_groups") for n in nodes)
        active = sum(metric(n, "laminar_raft_groups_active") for n in nodes)
        seen.append((time.monotonic() - start, opened, active))
        if opened >= replicas and active <= replicas // 100:
            return
        time.sleep(0.5)  # a poll interval, not a wait for something


def cluster(args: argparse.Namespace) -> dict[str, Any]:
    """One create of `--partitions` partitions on a static cluster of
    `--cluster` nodes (one shard each): ping p99 on the first node at rest,
    during the create and while the new groups settle."""
    from tests.cluster.nodes import Cluster

    out: dict[str, Any] = {"cluster_nodes": args.cluster, "partitions": args.partitions}
    phases: dict[str, tuple[float, float]] = {}
    sampler = Sampler()
    root = Path(args.data_dir or tempfile.mkdtemp(prefix="partitions-bench-cluster-"))
    flags = {"max_topic_partitions": args.partitions}
    try:
        with Cluster.start(root, args.cluster, cores=1, **flags) as nodes:
            sampler.nodes = list(nodes.nodes.values())
            first = sampler.nodes[0]
            with pinging(first.bootstrap, phases, out), Client(nodes.bootstrap) as client:
                rest_then_create(
                    phases,
                    out,
                    sampler,
                    args.rest_s,
                    lambda: client.create_topic("wide", args.partitions),
                )
                groups: list[tuple[float, int, int]] = []
                out["settle_s"] = round(
                    timed(phases, "settling", lambda: settle(sampler.nodes, args, groups)), 2
                )
                out["raft_groups_open_active"] = [
                    (round(t, 1), opened, active)
                    for t, opened, active in groups[:: max(1, len(groups) // 20)]
                ]
                out["fds_after_settling"], out["rss_after_settling_mib"] = sampler.now()
                start = time.perf_counter()
                try:
                    client.produce("wide", args.partitions - 1, [b"last"])
                    out["produce_to_last_partition_ms"] = round(
                        (time.perf_counter() - start) * 1000, 1
                    )
                except Exception as exc:
                    out["produce_to_last_partition_ms"] = f"failed: {exc}"
            out["fds_peak"] = sampler.fds_peak
            out["rss_peak_mib"] = round(sampler.rss_peak_mib, 1)
    finally:
        sampler.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pinger", help=argparse.SUPPRESS)
    parser.add_argument("--topics", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=10_000, help="per topic")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--window", type=int, default=256, help="produces in flight")
    parser.add_argument("--rest-s", type=float, default=5.0)
    parser.add_argument("--first-produces", type=int, default=200)
    parser.add_argument("--data-dir", default=None, help="default: a temporary directory")
    parser.add_argument(
        "--cluster",
        type=int,
        default=0,
        metavar="NODES",
        help="instead: one create of --partitions on a static cluster of NODES nodes",
    )
    parser.add_argument(
        "--settle-s", type=float, default=30.0, help="cluster: pings after the create"
    )
    args = parser.parse_args()
    if args.pinger:
        pinger(args.pinger)
        return 0
    if args.cluster:
        print(json.dumps(cluster(args), indent=1))
        return 0

    topics = [f"t{n}" for n in range(args.topics)]
    total = args.topics * args.partitions
    root = Path(args.data_dir or tempfile.mkdtemp(prefix="partitions-bench-"))
    flags = {"max_topic_partitions": args.partitions, "max_partitions": max(total, 100)}
    out: dict[str, Any] = {"partitions": total, "topics": args.topics, "cores": args.cores}
    phases: dict[str, tuple[float, float]] = {}
    sampler = Sampler()
    node = start_node(root, cores=args.cores, **flags)
    sampler.nodes = [node]
    try:
        with pinging(node.bootstrap, phases, out), Client(node.bootstrap) as client:
            rest_then_create(
                phases,
                out,
                sampler,
                args.rest_s,
                lambda: [client.create_topic(t, args.partitions) for t in topics],
            )
            out["produce_all_s"] = round(
                timed(
                    phases,
                    "during_produce",
                    lambda: produce_all(client, topics, args.partitions, args.window),
                ),
                2,
            )
            out["fds_after_produce"], out["rss_after_produce_mib"] = sampler.now()
            out["check_all_s"] = round(
                timed(
                    phases,
                    "during_check",
                    lambda: check_all(client, topics, args.partitions, args.window),
                ),
                2,
            )
            timed(phases, "at_rest_full", lambda: rest(args.rest_s))
        metrics = node.admin_get("/metrics")[1]
        out["segment_files_open"] = [
            line.split()[-1]
            for line in metrics.splitlines()
            if line.startswith("laminar_segment_files_open{")
        ]
        out["fds_peak_first_run"] = sampler.fds_peak
        out["rss_peak_first_run_mib"] = round(sampler.rss_peak_mib, 1)
        start = time.monotonic()
        node.terminate()
        out["stop_s"] = round(time.monotonic() - start, 2)
        sampler.nodes = []
        start = time.monotonic()
        node = node.restart()
        sampler.nodes = [node]
        out["restart_ready_s"] = round(time.monotonic() - start, 2)
        with Client(node.bootstrap) as client:
            start = time.perf_counter()
            client.produce(topics[0], 0, [b"first"])
            out["first_produce_after_restart_ms"] = round((time.perf_counter() - start) * 1000, 2)
            firsts = sorted(first_produces(client, topics, args.partitions, args.first_produces))
            out["produce_to_unopened_partition_ms"] = {
                "count": len(firsts),
                "p50": round(statistics.median(firsts), 2),
                "p99": round(firsts[min(len(firsts) - 1, int(len(firsts) * 0.99))], 2),
            }
        phases_after: dict[str, tuple[float, float]] = {}
        with pinging(node.bootstrap, phases_after, out):
            timed(phases_after, "at_rest_after_restart", lambda: rest(args.rest_s))
        out["fds_after_restart"], out["rss_after_restart_mib"] = sampler.now()
        out["fds_peak"] = sampler.fds_peak
        out["rss_peak_mib"] = round(sampler.rss_peak_mib, 1)
    finally:
        sampler.stop()
        if node.alive():
            node.terminate()
    out["rss_after_produce_mib"] = round(out.get("rss_after_produce_mib", 0.0), 1)
    out["rss_after_restart_mib"] = round(out.get("rss_after_restart_mib", 0.0), 1)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
