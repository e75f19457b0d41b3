"""Time from a node's death to every partition back at its replication factor.

Real `laminar-node` processes on loopback, joined through one seed (SWIM,
`--routing userspace`, one shard each): a topic of P partitions with
replication factor 3 gets R records of S bytes per partition, then the node
holding the most replicas is SIGKILLed for good. Measured from the kill:

- detected: every survivor's membership view says the node is dead;
- restored: every partition is served by 3 live replicas, each holding every
  acknowledged record in order (polled every 0.1 s, so +-0.1 s plus the
  reads' own time).

`restored` includes the dead grace (`--dead-grace`, the time a restarting
node gets before its partitions are copied). Figures are medians of the runs.

    .venv/bin/python benchmarks/heal_bench.py [--runs 3] [--partitions 8]
        [--records 200] [--size 1024] [--grace 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from laminar.client import Client, RetryPolicy
from laminar.placement import partition_id
from tests.cluster.test_gossip_cluster import full_holders, gossip_cluster, member_states
from tests.support import wait_until

RF = 3


def one_run(
    tmp: Path, partitions: int, records: int, size: int, grace: float
) -> tuple[float, float]:
    with gossip_cluster(tmp, 4, dead_grace=grace) as (nodes, _start):
        names = set(nodes)
        wait_until(lambda: all(set(member_states(n)) == names for n in nodes.values()), "joined")
        bootstrap = ",".join(n.bootstrap for n in nodes.values())
        acked: dict[int, list[bytes]] = {}
        with Client(bootstrap, retry=RetryPolicy(budget_s=30)) as client:
            topic = wait_until(
                lambda: client.create_topic("heal", partitions=partitions, replication_factor=RF),
                "topic",
            )
            for p in range(partitions):
                values = [b"%d-%06d-" % (p, n) + b"x" * size for n in range(records)]
                for start in range(0, records, 50):
                    client.produce("heal", p, values[start : start + 50])
                acked[p] = values
        pids = [partition_id(topic.topic_id, p) for p in range(partitions)]

        def at_rf(live: dict) -> dict | None:
            return full_holders(live, pids, acked, RF)

        before = wait_until(lambda: at_rf(nodes), "placed")
        victim = max(nodes, key=lambda n: sum(n in h for h in before.values()))
        live = {n: node for n, node in nodes.items() if n != victim}
        killed = time.monotonic()
        nodes[victim].kill()
        wait_until(
            lambda: all(member_states(n).get(victim) == "dead" for n in live.values()), "dead", 120
        )
        detected = time.monotonic() - killed
        wait_until(lambda: at_rf(live), "restored", 300)
        return detected, time.monotonic() - killed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--grace", type=float, default=1.0)
    args = parser.parse_args()
    detected, restored = [], []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            d, r = one_run(Path(tmp), args.partitions, args.records, args.size, args.grace)
        detected.append(d)
        restored.append(r)
        print(
            f"run {run + 1}: dead seen by all survivors {d:.2f} s, all partitions at RF {r:.2f} s"
        )
    print(f"load average (1 min) {os.getloadavg()[0]:.1f}")
    print(
        f"median of {args.runs}: detected {statistics.median(detected):.2f} s, "
        f"restored {statistics.median(restored):.2f} s (grace {args.grace:g} s, "
        f"{args.partitions} partitions x {args.records} records x {args.size} B)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
