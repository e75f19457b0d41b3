"""What a group member's `poll` and `commit` each take, one consumer reading
a backlog in batches with a commit per batch (issue 26's waited commits):
the client-side time of each call, per batch, next to the same loop with
unwaited commits and with none.

    .venv/bin/python benchmarks/commit_latency.py [--records 200000] [--rounds 3]

One `laminar-node --cores 2 --flush always`, a backlog of 1 KiB records in 4
partitions, batches of 500 (prefetch at its default); each round runs the
three modes in rotated order, each under a new group. Prints, per mode, the
median over rounds of records/s and of each round's p50 and p90 poll and
commit times. Where a waited commit's time goes on the node is measured
apart (RESULTS, "Where a waited commit's time goes").
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from laminar.bench.machine import fsync_floor_us
from laminar.bench.servers.laminar_node import LaminarNode
from laminar.client import Client

PARTITIONS = 4
BATCH = 500
MODES = ("waited", "unwaited", "none")


def consume(address: str, group: str, records: int, mode: str) -> dict[str, float]:
    polls: list[float] = []
    commits: list[float] = []
    got = 0
    with (
        Client(address) as client,
        client.consumer(group, ["t"], start="earliest", max_records=BATCH) as consumer,
    ):
        start = time.perf_counter()
        while got < records:
            before = time.perf_counter()
            batch = consumer.poll(timeout_s=1.0)
            polled = time.perf_counter()
            if not batch:
                continue
            if mode != "none":
                consumer.commit(wait=mode == "waited")
            polls.append(polled - before)
            commits.append(time.perf_counter() - polled)
            got += len(batch)
        elapsed = time.perf_counter() - start
    polls.sort()
    commits.sort()
    return {
        "records_s": got / elapsed,
        "poll_p50_us": polls[len(polls) // 2] * 1e6,
        "poll_p90_us": polls[len(polls) * 9 // 10] * 1e6,
        "commit_p50_us": commits[len(commits) // 2] * 1e6,
        "commit_p90_us": commits[len(commits) * 9 // 10] * 1e6,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="commit-latency-"))
    node = LaminarNode(work, cores=2)
    address = node.start()
    try:
        value = os.urandom(1024)
        with Client(address) as client:
            client.create_topic("t", PARTITIONS)
            per = args.records // PARTITIONS
            for p in range(PARTITIONS):
                for first in range(0, per, 1000):
                    client.produce("t", p, [value] * min(1000, per - first))
        floor = fsync_floor_us(work)
        print(f"fdatasync floor: {floor}")
        runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
        for round_no in range(args.rounds):
            order = MODES[round_no % 3 :] + MODES[: round_no % 3]
            for mode in order:
                figures = consume(address, f"g{round_no}-{mode}", per * PARTITIONS, mode)
                runs[mode].append(figures)
                print(round_no, mode, {k: round(v) for k, v in figures.items()}, flush=True)
        print("| mode | records/s | poll p50 / p90 us | commit p50 / p90 us |")
        print("| --- | --- | --- | --- |")
        for mode, rounds in runs.items():
            med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
            print(
                f"| {mode} | {med['records_s']:,.0f} | {med['poll_p50_us']:.0f} / "
                f"{med['poll_p90_us']:.0f} | {med['commit_p50_us']:.0f} / "
                f"{med['commit_p90_us']:.0f} |"
            )
    finally:
        node.stop()


if __name__ == "__main__":
    main()
