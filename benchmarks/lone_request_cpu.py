"""What one durable request costs the node when it comes alone: a one-record
produce, one at a time (the next sent when the last is answered), against a
fresh `laminar-node --cores 2 --flush always`.

    .venv/bin/python benchmarks/lone_request_cpu.py [--seconds 6] [--rounds 3]

Prints, per round, requests/s and, per request, the CPU of every thread of
the node's processes that did work (the shard's loop thread, its io_uring
workers) and their context switches (voluntary: it slept and was woken;
involuntary: it was preempted), read from /proc. The lone request is what a
consumer group's commit per batch and an unbatched produce pay (issue 23,
issue 26): a flush cycle nothing shares.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import psutil

from laminar.bench.servers.laminar_node import LaminarNode
from laminar.client import Client

Counters = dict[tuple[int, int], tuple[float, float, int, int]]
"""(user s, system s, voluntary, involuntary switches) per (pid, tid)."""


def _threads(pids: list[int]) -> Counters:
    out: Counters = {}
    for pid in pids:
        for thread in psutil.Process(pid).threads():
            status = Path(f"/proc/{pid}/task/{thread.id}/status").read_text()
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            out[(pid, thread.id)] = (
                thread.user_time,
                thread.system_time,
                int(fields["voluntary_ctxt_switches"]),
                int(fields["nonvoluntary_ctxt_switches"]),
            )
    return out


def _names(pids: list[int]) -> dict[tuple[int, int], str]:
    return {
        (pid, thread.id): Path(f"/proc/{pid}/task/{thread.id}/comm").read_text().strip()
        for pid in pids
        for thread in psutil.Process(pid).threads()
    }


def one_round(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as directory:
        node = LaminarNode(Path(directory), 2, flush="always")
        address = node.start()
        try:
            with Client(address) as client:
                client.create_topic("lone", 1)
                client.produce("lone", 0, [b"x"])
                supervisor = psutil.Process(node.pid)
                pids = [supervisor.pid] + [p.pid for p in supervisor.children(recursive=True)]
                before = _threads(pids)
                started, requests = time.monotonic(), 0
                while time.monotonic() - started < seconds:
                    client.produce("lone", 0, [b"x"])
                    requests += 1
                elapsed = time.monotonic() - started
                after = _threads(pids)
                names = _names(pids)
        finally:
            node.stop()
    print(f"{requests / elapsed:,.0f} requests/s, one at a time; per request:")
    total = 0.0
    for key, (user, system, voluntary, involuntary) in sorted(after.items()):
        u0, s0, v0, i0 = before.get(key, (0.0, 0.0, 0, 0))
        cpu_us = (user - u0 + system - s0) / requests * 1e6
        switches = (voluntary - v0 + involuntary - i0) / requests
        if cpu_us < 1 and switches < 0.05:
            continue
        total += cpu_us
        name = names.get(key, "?")
        print(
            f"  {name:>16} {key[1]:>7}: user {(user - u0) / requests * 1e6:6.0f} us, "
            f"system {(system - s0) / requests * 1e6:5.0f} us, switches "
            f"{(voluntary - v0) / requests:4.2f} voluntary, {(involuntary - i0) / requests:4.2f} "
            "involuntary"
        )
    print(f"  node CPU {total:.0f} us per request")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for _ in range(args.rounds):
        one_round(args.seconds)


if __name__ == "__main__":
    main()
