"""Records per group-commit flush on every node, one node against a replicated cluster.

    .venv/bin/python benchmarks/flushes_per_commit.py --replicas 3
    .venv/bin/python benchmarks/flushes_per_commit.py --replicas 1

Starts the node(s) on loopback in a temporary directory, creates a one-partition
topic (replication_factor N), keeps 64 one-record produces in flight for
`--seconds`, and prints the requests done and, per node, the group-commit
flushes (`laminar_flushes_total` from its /metrics) and records per flush. How
many records share one write + fdatasync is what bounds durable throughput;
issue 15 used it to find the per-timestamp flushes of the Raft storage.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from laminar.bench.servers.laminar_cluster import LaminarCluster
from laminar.bench.servers.laminar_node import LaminarNode
from laminar.client import AsyncClient, LaminarError

_FLUSHES = re.compile(r"^laminar_flushes_total(?:\{[^}]*\})? ([0-9.e+]+)$", re.M)


def flushes(info: dict[str, Any]) -> float:
    url = f"http://127.0.0.1:{info['admin_port']}/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return sum(float(v) for v in _FLUSHES.findall(text))


async def produce(bootstrap: str, replicas: int, seconds: float, window: int) -> int:
    client = AsyncClient(bootstrap)
    await client.connect()
    await client.create_topic("t", 1, replication_factor=replicas if replicas > 1 else None)
    while replicas > 1:  # a new Raft group elects its leader first
        try:
            if (await client.describe_topic("t")).partitions[0].leader is not None:
                break
        except LaminarError:
            pass
        await asyncio.sleep(0.1)
    done = 0
    end = time.monotonic() + seconds

    async def one() -> None:
        nonlocal done
        while time.monotonic() < end:
            await client.produce("t", 0, [b"y" * 1024])
            done += 1

    await asyncio.gather(*(one() for _ in range(window)))
    await client.close()
    return done


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, default=3, choices=(1, 3, 5))
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--window", type=int, default=64)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="flushes-") as tmp:
        nodes: dict[str, LaminarNode]
        server: LaminarCluster | LaminarNode
        if args.replicas > 1:
            server = LaminarCluster(Path(tmp), args.replicas, cores_per_node=1)
            bootstrap, nodes = server.start(), server.nodes
        else:
            server = LaminarNode(Path(tmp), 2)
            bootstrap, nodes = server.start(), {"n1": server}
        try:
            before = {n: flushes(node.info) for n, node in nodes.items()}
            requests = asyncio.run(produce(bootstrap, args.replicas, args.seconds, args.window))
            after = {n: flushes(node.info) for n, node in nodes.items()}
        finally:
            server.stop()
    print(f"replicas {args.replicas}: {requests} one-record produces in {args.seconds:g} s")
    for n in nodes:
        count = after[n] - before[n]
        per = requests / count if count else 0.0
        print(f"  {n}: {count:.0f} flushes, {per:.1f} records per flush")


if __name__ == "__main__":
    main()
