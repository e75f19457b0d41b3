"""What a node without CAP_BPF gets: run by test_routing.py under setpriv.

    python -m tests.xdp.unprivileged_node

Prints one JSON object: the effective capabilities, the plan `auto` chose and
why, whether every datagram reached its owner in that mode, and the error a
forced `ebpf` gives.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from laminar import placement
from laminar.xdp import ReuseportSteering, RoutingUnavailable, choose_routing

from .udp_helpers import deliver, many_pids, owners_seen, request

SHARDS = 3


def _cap_eff() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return -1


def main() -> None:
    plan = choose_routing("auto", SHARDS)
    report: dict[str, object] = {
        "uid": os.geteuid(),
        "cap_eff": _cap_eff(),
        "mode": str(plan.mode),
        "described": plan.describe(),
        "skipped": {str(mode): cause for mode, cause in plan.skipped},
    }
    with ReuseportSteering.prepare(SHARDS, "127.0.0.1", 0, routing=plan) as steering:
        pids = many_pids(600, seed=33)
        receivers = [steering.socket(i) for i in range(SHARDS)]
        datagrams = [request(pid, corr) for corr, pid in enumerate(pids)]
        seen = owners_seen(deliver(steering.port, receivers, datagrams))
        report["delivered"] = len(seen)
        report["at_owner"] = sum(
            1 for index, pid in seen.values() if index == placement.shard_for(pid, SHARDS)
        )
    plan.close()
    try:
        choose_routing("ebpf", SHARDS).close()
        report["forced_ebpf"] = "loaded"
    except RoutingUnavailable as exc:
        report["forced_ebpf"] = str(exc)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
