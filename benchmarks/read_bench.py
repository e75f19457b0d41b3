"""What linearizable leader reads cost: leader reads (ReadIndex) against reads
any replica may answer (`read_from="follower"`), in one run.

A static cluster of 3 `laminar-node`s on loopback (one shard each), a topic of
one partition with replication factor 3 holding R records of S bytes. Two
workloads, each run once per mode per round, the modes' order rotated:

- `point`: one fetch of one record at a time (a consumer at the tail, a
  lookup): requests/s and latency percentiles. Each leader read waits for a
  heartbeat round to a majority.
- `scan`: the whole partition with `AsyncClient.reader` (prefetch 2, 1,000
  records per fetch): records/s. Reads in flight together share a round.

Figures are medians over rounds; client CPU and the nodes' CPU are shown.

    .venv/bin/python benchmarks/read_bench.py [--rounds 3] [--records 20000]
        [--size 1024] [--points 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from laminar.bench.machine import fsync_floor_us, tree_cpu_s
from laminar.bench.servers.laminar_cluster import LaminarCluster
from laminar.client import AsyncClient, Client

TOPIC = "reads"
MODES = ("leader", "follower")


async def point(bootstrap: str, mode: str, count: int, end: int) -> dict[str, float]:
    async with AsyncClient(bootstrap, read_from=mode) as client:
        await client.fetch_batch(TOPIC, 0, 0, max_records=1)  # routes learned, connected
        latencies = []
        start = time.perf_counter()
        for k in range(count):
            t0 = time.perf_counter()
            batch = await client.fetch_batch(TOPIC, 0, (k * 7919) % end, max_records=1)
            latencies.append(time.perf_counter() - t0)
            assert len(batch) == 1
        elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "req_per_s": count / elapsed,
        "p50_us": latencies[len(latencies) // 2] * 1e6,
        "p99_us": latencies[int(len(latencies) * 0.99)] * 1e6,
    }


async def scan(bootstrap: str, mode: str, end: int) -> dict[str, float]:
    async with AsyncClient(bootstrap, read_from=mode) as client:
        lowest = (await client.offsets(TOPIC, 0)).lowest
        got = 0
        start = time.perf_counter()
        async with client.reader(TOPIC, 0, lowest, max_records=1000, prefetch=2) as reader:
            while reader.position < end:
                got += len(await reader.next_batch())
        elapsed = time.perf_counter() - start
    return {"records_per_s": got / elapsed}


def measured(cluster: LaminarCluster, run: object) -> dict[str, float]:
    """Run a coroutine; its figures plus client and nodes' CPU seconds."""
    pids = cluster.pids()
    nodes0 = sum(tree_cpu_s(pid) for pid in pids.values())
    client0 = time.process_time()
    figures = asyncio.run(run)  # type: ignore[arg-type]
    figures["client_cpu_s"] = time.process_time() - client0
    figures["nodes_cpu_s"] = sum(tree_cpu_s(pid) for pid in pids.values()) - nodes0
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--points", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="read-bench-") as tmp:
        floor = fsync_floor_us(Path(tmp))
        print(f"fdatasync floor: p50 {floor['p50_us']:.0f} us, p99 {floor['p99_us']:.0f} us")
        cluster = LaminarCluster(Path(tmp), 3, 1)
        try:
            bootstrap = cluster.start()
            with Client(bootstrap) as client:
                client.create_topic(TOPIC, 1, replication_factor=3)
                value = b"x" * args.size
                for start in range(0, args.records, 500):
                    client.produce(TOPIC, 0, [value] * min(500, args.records - start))
                end = client.offsets(TOPIC, 0).highest
            results: dict[tuple[str, str], list[dict[str, float]]] = {}
            for r in range(args.rounds):
                order = MODES if r % 2 == 0 else MODES[::-1]
                for mode in order:
                    results.setdefault(("point", mode), []).append(
                        measured(cluster, point(bootstrap, mode, args.points, end))
                    )
                    results.setdefault(("scan", mode), []).append(
                        measured(cluster, scan(bootstrap, mode, end))
                    )
        finally:
            cluster.stop()
    for (workload, mode), runs in sorted(results.items()):
        medians = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
        shown = ", ".join(f"{k} {v:,.1f}" for k, v in medians.items())
        print(f"{workload:5} {mode:8} {shown}")
    for workload, key in (("point", "req_per_s"), ("scan", "records_per_s")):
        lead = statistics.median(run[key] for run in results[(workload, "leader")])
        follow = statistics.median(run[key] for run in results[(workload, "follower")])
        print(f"{workload}: leader (linearizable) / follower = {lead / follow:.2f}x")


if __name__ == "__main__":
    main()
