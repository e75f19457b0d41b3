"""How soon the same client writes on past a leader that stopped (SIGSTOP).

The figure of `tests/cluster/test_silent_leader.py`, measured here rather than
asserted there (a shared machine makes any timing assert flaky): a fresh
three-node cluster per run, a one-partition topic with replication factor 3,
one `Client` producing, its partition's leader SIGSTOPped; the time from the
fault to the acknowledgement of the first produce sent after it
(`tests.cluster.failover`, which also checks every replica by identity).
Issue 22's goal is `FAILOVER_BOUND_S` (two election timeouts and a second).

    .venv/bin/python benchmarks/silent_leader_bench.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.cluster.failover import FAILOVER_BOUND_S, same_client_fails_over, sigstop
from tests.cluster.nodes import Cluster


def one_run(tmp: Path) -> float:
    with Cluster.start(tmp, 3) as cluster:
        return same_client_fails_over(cluster, "stopped", sigstop(cluster))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    seconds = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="laminar-silent-") as tmp:
            seconds.append(one_run(Path(tmp)))
        print(f"run {run + 1}: next produce acknowledged {seconds[-1]:.2f} s after the SIGSTOP")
    median = statistics.median(seconds)
    met = "met" if median <= FAILOVER_BOUND_S else "NOT met"
    print(f"median {median:.2f} s; goal {FAILOVER_BOUND_S:g} s {met}")
    print(f"load average (1 min) {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
