"""Records per group-commit flush on every node, one node against a replicated cluster.

    .venv/bin/python benchmarks/flushes_per_commit.py --replicas 3
    .venv/bin/python benchmarks/flushes_per_commit.py --replicas 1
    .venv/bin/python benchmarks/flushes_per_commit.py --replicas 3 --profile benchmarks/out/r3
    .venv/bin/python benchmarks/flushes_per_commit.py --replicas 3 --batch 64

Starts the node(s) on loopback in a temporary directory, creates a one-partition
topic (replication_factor N), keeps `--window` (64) produces of `--batch`
records (1) in flight for `--seconds`, and prints the records produced and,
per node, the group-commit flushes (`laminar_flushes_total` from its
/metrics) and records per flush. How
many records share one write + fdatasync is what bounds durable throughput;
issue 15 used it to find the per-timestamp flushes of the Raft storage.

With `--profile DIR`, py-spy also samples every node's shard processes while
the load runs (raw collapsed stacks into DIR for flame graphs) and it prints,
per shard, the cores it used and the functions with the most samples (self
time); the load generator's own CPU is printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import subprocess
import sys
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


async def produce(bootstrap: str, replicas: int, seconds: float, window: int, batch: int) -> int:
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

    values = [b"y" * 1024] * batch

    async def one() -> None:
        nonlocal done
        while time.monotonic() < end:
            await client.produce("t", 0, values)
            done += batch

    await asyncio.gather(*(one() for _ in range(window)))
    await client.close()
    return done


def shard_pids(node_pid: int) -> list[int]:
    """A node's shard processes: its supervisor's children."""
    children = Path(f"/proc/{node_pid}/task/{node_pid}/children").read_text().split()
    return [int(pid) for pid in children]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def top_functions(raw: Path, count: int = 12) -> list[tuple[float, str]]:
    """(percent of samples, function (file)) by self time, from py-spy's raw output."""
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        total += int(n)
        if frames:
            m = re.match(r"(.*) \((.*):\d+\)", frames[-1])
            counts[f"{m[1]} ({m[2].rsplit('/', 1)[-1]})" if m else frames[-1]] += int(n)
    return [(100 * n / max(total, 1), name) for name, n in counts.most_common(count)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, default=3, choices=(1, 3, 5))
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--window", type=int, default=64)
    p.add_argument("--batch", type=int, default=1, help="records per produce call")
    p.add_argument("--profile", type=Path, help="py-spy every shard into this directory")
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
        shards = {n: shard_pids(node.pid) for n, node in nodes.items() if node.pid}
        spies: list[subprocess.Popen[bytes]] = []
        try:
            before = {n: flushes(node.info) for n, node in nodes.items()}
            if args.profile:
                args.profile.mkdir(parents=True, exist_ok=True)
                spies = [
                    spy(pid, args.profile, args.seconds) for pids in shards.values() for pid in pids
                ]
            cpu_before = {pid: cpu_seconds(pid) for pids in shards.values() for pid in pids}
            generator_before = time.process_time()
            records = asyncio.run(
                produce(bootstrap, args.replicas, args.seconds, args.window, args.batch)
            )
            generator = (time.process_time() - generator_before) / args.seconds
            cpu = {pid: (cpu_seconds(pid) - t) / args.seconds for pid, t in cpu_before.items()}
            after = {n: flushes(node.info) for n, node in nodes.items()}
            for process in spies:
                process.wait(timeout=60)
        finally:
            server.stop()
    print(f"replicas {args.replicas}: {records} records in {args.seconds:g} s (batch {args.batch})")
    print(f"  load generator: {generator:.2f} cores; {os.getloadavg()[0]:.2f} load average")
    for n in nodes:
        count = after[n] - before[n]
        per = records / count if count else 0.0
        print(f"  {n}: {count:.0f} flushes, {per:.1f} records per flush")
        for pid in shards.get(n, ()):
            print(f"    shard {pid}: {cpu[pid]:.2f} cores")
            if args.profile:
                for percent, name in top_functions(args.profile / f"{pid}.txt"):
                    print(f"      {percent:5.1f}%  {name}")


def spy(pid: int, out: Path, seconds: float) -> subprocess.Popen[bytes]:
    """py-spy sampling `pid` for `seconds`, raw collapsed stacks into out/pid.txt."""
    installed = Path(sys.executable).with_name("py-spy")
    command = [
        str(installed) if installed.exists() else "py-spy",
        "record",
        "-p",
        str(pid),
        "-d",
        str(max(1, int(seconds))),
        "-r",
        "200",
    ]
    command += ["-f", "raw", "-o", str(out / f"{pid}.txt")]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
