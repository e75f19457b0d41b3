"""Plain against idempotent produce through the blocking client: one node, one
partition, batch 1, a window of requests in flight, rounds alternating which
goes first. Prints the median records/s of each and their ratio, and the
median CPU the node's shards and this client spent per record (less sensitive
than records/s to what else runs on the machine).

    .venv/bin/python benchmarks/idempotence_probe.py --records 4000 --window 64 --rounds 6
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from laminar.client import Client, Produced
from tests.system.nodes import start_node


def cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of processes `pids` so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def run(client: Client, records: int, window: int) -> float:
    """Records/s of `records` single-record produces with `window` in flight."""
    start = time.perf_counter()
    pending: deque[Produced] = deque()
    for i in range(records):
        pending.append(client.produce_nowait("t", 0, [b"%08d" % i + b"x" * 92]))
        if len(pending) >= window:
            pending.popleft().result()
    while pending:
        pending.popleft().result()
    return records / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {"plain": [], "idempotent": []}
    node_us: dict[str, list[float]] = {"plain": [], "idempotent": []}
    client_us: dict[str, list[float]] = {"plain": [], "idempotent": []}
    with (
        tempfile.TemporaryDirectory() as tmp,
        start_node(Path(tmp), 1) as node,
        Client(node.bootstrap, idempotent=False) as plain,
        Client(node.bootstrap, idempotent=True) as idem,  # the default since issue 15
    ):
        plain.create_topic("t", partitions=1)
        for r in range(args.rounds):
            order = [("plain", plain), ("idempotent", idem)]
            for name, client in order if r % 2 == 0 else order[::-1]:
                shards = node.shard_pids()
                node0, client0 = cpu_s(shards), time.process_time()
                rates[name].append(run(client, args.records, args.window))
                node_us[name].append((cpu_s(shards) - node0) / args.records * 1e6)
                client_us[name].append((time.process_time() - client0) / args.records * 1e6)
    for name, values in rates.items():
        rounds = [round(v) for v in values]
        print(
            f"{name:11s} median {statistics.median(values):8.0f} rec/s  rounds {rounds}  "
            f"CPU per record: node {statistics.median(node_us[name]):.1f} us, "
            f"client {statistics.median(client_us[name]):.1f} us"
        )
    ratio = statistics.median(rates["idempotent"]) / statistics.median(rates["plain"])
    print(f"idempotent / plain: {ratio:.2f}")


if __name__ == "__main__":
    main()
