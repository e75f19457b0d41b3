"""Raft core benchmark: what the sans-IO core itself costs.

1. Entries committed per second through three in-process cores over an
   instant network (MemoryStorage, no fsync): the leader proposes a batch,
   every Ready is handled at once, until the batch is committed on the leader
   and applied everywhere. Batches of 64 and of 1 (per-entry vs per-batch
   cost), 1 KiB payloads.
2. The simulator's seeds per second (one process), and the projected time of
   `make soak` (10,000 seeds on 2 processes).

    .venv/bin/python benchmarks/raft_bench.py [--seconds 3] [--rounds 5] [--seeds 200]

Rounds alternate the batch sizes; figures are medians of the rounds. The
process CPU time is reported next to wall time: everything runs in this one
process, so CPU/wall near 1.0 means the core was never waiting.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections import deque

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from laminar.raft import LEADER, MemoryStorage, Message, RaftConfig, RaftCore

IDS = ("n1", "n2", "n3")


class InstantCluster:
    """Three cores; every message is delivered as soon as it is sent."""

    def __init__(self) -> None:
        self.storages = {node: MemoryStorage() for node in IDS}
        self.cores = {
            node: RaftCore(
                RaftConfig(node_id=node, voters=IDS, election_ticks=10, heartbeat_ticks=1),
                self.storages[node],
                random.Random(i),
            )
            for i, node in enumerate(IDS)
        }
        self.applied = dict.fromkeys(IDS, 0)
        self.queue: deque[Message] = deque()
        leader = self.cores["n1"]
        leader.campaign()
        self.pump()
        while leader.role != LEADER:
            for core in self.cores.values():
                core.tick()
            self.pump()

    def pump(self) -> None:
        cores, storages, queue, applied = self.cores, self.storages, self.queue, self.applied
        moved = True
        while moved:
            moved = False
            for node, core in cores.items():
                while core.has_ready():
                    rd = core.ready()
                    storage = storages[node]
                    if rd.entries:
                        storage.append(rd.entries)
                    if rd.hard_state is not None:
                        storage.set_hard_state(rd.hard_state)
                    queue.extend(rd.messages)
                    if rd.committed:
                        applied[node] = rd.committed[-1].index
                    core.advance(rd)
                    moved = True
            while queue:
                message = queue.popleft()
                cores[message.dst].step(message)
                moved = True


def commit_rate(batch: int, seconds: float, payload: bytes) -> tuple[float, float]:
    """(entries/s committed and applied on all three, CPU seconds per wall second)."""
    cluster = InstantCluster()
    leader = cluster.cores["n1"]
    payloads = [payload] * batch
    entries = 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    deadline = wall0 + seconds
    while time.perf_counter() < deadline:
        for _ in range(16):
            last = leader.propose_many(payloads) + batch - 1
            cluster.pump()
            if min(cluster.applied.values()) < last:
                raise AssertionError("a batch did not commit on every core")
            entries += batch
    wall = time.perf_counter() - wall0
    return entries / wall, (time.process_time() - cpu0) / wall


def simulator_rate(seeds: int) -> float:
    from tests.raft.sim.simulation import run_seed

    started = time.perf_counter()
    for seed in range(seeds):
        run_seed(seed)
    return seeds / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per round and batch size")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=200, help="simulator seeds to time")
    parser.add_argument("--payload-bytes", type=int, default=1024)
    args = parser.parse_args()
    payload = os.urandom(args.payload_bytes)
    print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1, 5 min)")
    results: dict[int, list[tuple[float, float]]] = {64: [], 1: []}
    for round_ in range(args.rounds):
        order = (64, 1) if round_ % 2 == 0 else (1, 64)
        for batch in order:
            results[batch].append(commit_rate(batch, args.seconds, payload))
    for batch, runs in results.items():
        rates = [r for r, _ in runs]
        cpu = statistics.median(c for _, c in runs)
        print(
            f"batch {batch:>2}: {statistics.median(rates):>9,.0f} entries/s committed "
            f"(rounds: {', '.join(f'{r:,.0f}' for r in rates)}); CPU/wall {cpu:.2f}"
        )
    ratio = statistics.median(a / b for (a, _), (b, _) in zip(results[64], results[1], strict=True))
    print(f"batch 64 / batch 1 (median of per-round ratios): {ratio:.1f}x")
    rate = simulator_rate(args.seeds)
    print(
        f"simulator: {rate:.1f} seeds/s on one process; 10,000 seeds on 2 processes "
        f"~ {10_000 / rate / 2 / 60:.1f} min"
    )
    print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1, 5 min)")


if __name__ == "__main__":
    main()
