"""Plain against idempotent produce through the blocking client: one node, one
partition, batch 1, a window of requests in flight, rounds alternating which
goes first. Prints the median records/s of each and their ratio.

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

from laminar.client import Client
from laminar.client.sync import Pending
from tests.system.nodes import start_node


def run(client: Client, records: int, window: int) -> float:
    """Records/s of `records` single-record produces with `window` in flight."""
    start = time.perf_counter()
    pending: deque[Pending[int]] = deque()
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
    with (
        tempfile.TemporaryDirectory() as tmp,
        start_node(Path(tmp), 1) as node,
        Client(node.bootstrap, idempotent=False) as plain,
        Client(node.bootstrap) as idem,  # idempotent: the client's default
    ):
        plain.create_topic("t", partitions=1)
        for r in range(args.rounds):
            order = [("plain", plain), ("idempotent", idem)]
            for name, client in order if r % 2 == 0 else order[::-1]:
                rates[name].append(run(client, args.records, args.window))
    for name, values in rates.items():
        rounds = [round(v) for v in values]
        print(f"{name:11s} median {statistics.median(values):8.0f} rec/s  rounds {rounds}")
    ratio = statistics.median(rates["idempotent"]) / statistics.median(rates["plain"])
    print(f"idempotent / plain: {ratio:.2f}")


if __name__ == "__main__":
    main()
