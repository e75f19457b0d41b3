"""SWIM membership figures from the deterministic simulator (issue 16).

    .venv/bin/python benchmarks/swim_sim.py [--sizes 100,1000] [--seeds 3] [--json out.json]
    .venv/bin/python benchmarks/swim_sim.py --quick        # small sizes, a smoke run

Three experiments, each with Lifeguard on and off over the same seeds (so the
same faults hit both):

- detection: in a formed cluster, members crash one at a time (a new crash
  every `gap` seconds); for each, the time until the first member declares it
  dead and until every running member has it dead, in protocol periods
  (1 period = `probe_interval_ms`, 1 s by default). Median and p99 over all
  crashes of all seeds.
- dissemination: one member changes its weight; the time until every member
  has the new weight, for several cluster sizes, in protocol periods, with
  memberlist's gossip ticker (default) and with piggybacking on probes alone
  (`gossip_nodes=0`: pure SWIM, where rounds are protocol periods).
- false positives: no member crashes; the network loses 5% or 20% of packets,
  or 10% of members are slowed (each handles every packet and timer up to
  `--slow-ms` late: a starved CPU). Counted: *declarations* (a member's
  suspicion timer runs out on a running member), *false-dead views* (a running
  member marks a running member dead, however it learned it), and *incidents*
  (distinct member and incarnation declared dead).

The simulator is `tests/swim/` (network delay 1-5 ms unless a scenario says
otherwise). Everything is seeded: the same command prints the same numbers.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from laminar.swim import MemberChange, MemberState, SwimConfig
from tests.swim.simcluster import SimCluster, node_id
from tests.swim.simnet import NetworkProfile

LIFEGUARD = SwimConfig()
PLAIN = SwimConfig().without_lifeguard()
CONFIGS = {"lifeguard": LIFEGUARD, "swim": PLAIN}


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


# --- detection -------------------------------------------------------------------------


def detection(
    size: int, seed: int, config: SwimConfig, crashes: int, gap_ms: int
) -> dict[str, Any]:
    """Crash `crashes` members one after another; per crash, periods to the first
    declaration and to every running member knowing."""
    dead_at: dict[str, dict[int, int]] = {}

    def on_change(now: int, observer: int, change: MemberChange) -> None:
        if change.member.state is MemberState.DEAD and change.member.node_id in dead_at:
            dead_at[change.member.node_id].setdefault(observer, now)

    cluster = SimCluster(size, seed, config, on_change=on_change)
    rng = random.Random(f"{seed}/crashes")
    cluster.run_until(10_000)
    victims = rng.sample(range(size), crashes)
    first, everyone, incomplete = [], [], 0
    period = config.probe_interval_ms
    for victim in victims:
        crashed_at = cluster.now_ms
        cluster.crash(victim)
        dead_at[node_id(victim)] = {}
        cluster.run_until(crashed_at + gap_ms)
        seen = dead_at[node_id(victim)]
        running = [m.index for m in cluster.live()]
        if not seen:
            incomplete += 1
            continue
        first.append((min(seen.values()) - crashed_at) / period)
        if all(i in seen for i in running):
            everyone.append((max(seen[i] for i in running) - crashed_at) / period)
        else:
            incomplete += 1
    return {"first": first, "all": everyone, "incomplete": incomplete}


# --- dissemination -------------------------------------------------------------------


def dissemination(size: int, seed: int, config: SwimConfig, updates: int) -> list[float]:
    """Periods until every member has a weight change, for `updates` changes."""
    reached: dict[int, int] = {}
    target: dict[str, float] = {}

    def on_change(now: int, observer: int, change: MemberChange) -> None:
        member = change.member
        if target.get(member.node_id) == member.weight and observer not in reached:
            reached[observer] = now

    cluster = SimCluster(size, seed, config, on_change=on_change)
    rng = random.Random(f"{seed}/updates")
    cluster.run_until(5_000)
    periods: list[float] = []
    for k in range(updates):
        source = rng.randrange(size)
        weight = 2.0 + k
        reached.clear()
        target.clear()
        target[node_id(source)] = weight
        start = cluster.now_ms
        reached[source] = start
        cluster.set_weight(source, weight)
        cluster.run_until(start + 120_000, stop=lambda: len(reached) == size)
        if len(reached) == size:
            periods.append((max(reached.values()) - start) / config.probe_interval_ms)
        cluster.run_until(cluster.now_ms + 5_000)
    return periods


# --- false positives -------------------------------------------------------------------


@dataclass
class FalsePositives:
    declarations: int = 0
    declarations_of_healthy: int = 0
    false_dead_views: int = 0
    false_dead_views_of_healthy: int = 0
    incidents: set[tuple[str, int]] = field(default_factory=set)
    suspicions: int = 0
    refutations: int = 0
    member_periods: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "declarations": self.declarations,
            "declarations_of_healthy": self.declarations_of_healthy,
            "false_dead_views": self.false_dead_views,
            "false_dead_views_of_healthy": self.false_dead_views_of_healthy,
            "incidents": len(self.incidents),
            "suspicions": self.suspicions,
            "refutations": self.refutations,
            "member_periods": self.member_periods,
        }


def false_positives(
    size: int,
    seed: int,
    config: SwimConfig,
    duration_ms: int,
    profile: NetworkProfile,
    slowed_fraction: float,
    slow_ms: int,
) -> FalsePositives:
    result = FalsePositives()
    slowed: set[str] = set()
    declared_seen: dict[int, int] = {}
    holder: list[SimCluster] = []

    def on_change(now: int, observer: int, change: MemberChange) -> None:
        member = change.member
        if member.state is not MemberState.DEAD:
            return
        # Nobody crashes in these runs: every dead verdict is false. It is this
        # member's own declaration when its declaration count just went up (a
        # timer expiry yields exactly one such change; gossip never moves it).
        healthy = member.node_id not in slowed
        result.false_dead_views += 1
        result.false_dead_views_of_healthy += healthy
        result.incidents.add((member.node_id, member.incarnation))
        declared = holder[0].members[observer].swim.stats.deaths_declared
        if declared > declared_seen.get(observer, 0):
            declared_seen[observer] = declared_seen.get(observer, 0) + 1
            result.declarations += 1
            result.declarations_of_healthy += healthy

    cluster = SimCluster(size, seed, config, profile=profile, on_change=on_change)
    holder.append(cluster)
    rng = random.Random(f"{seed}/slowed")
    for index in rng.sample(range(size), round(size * slowed_fraction)):
        slowed.add(node_id(index))
        cluster.slow(index, slow_ms)
    cluster.run_until(duration_ms)
    for member in cluster.members:
        result.suspicions += member.swim.stats.suspicions_raised
        result.refutations += member.swim.stats.refutations
    result.member_periods = size * duration_ms // config.probe_interval_ms
    return result


# --- driver ----------------------------------------------------------------------------


def timed(label: str, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, with its wall time on stderr (the runs take minutes)."""
    start = time.perf_counter()
    value = fn(*args)
    print(f"  {label}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return value


def run_detection(args: argparse.Namespace, sizes: list[int]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for size in sizes:
        for name, config in CONFIGS.items():
            first: list[float] = []
            everyone: list[float] = []
            incomplete = 0
            for seed in range(args.seeds):
                label = f"detection n={size} {name} seed={seed}"
                r = timed(label, detection, size, seed, config, args.crashes, args.gap_ms)
                first += r["first"]
                everyone += r["all"]
                incomplete += r["incomplete"]
            entry = {
                "crashes": len(first) + incomplete,
                "first_median": statistics.median(first) if first else None,
                "first_p99": percentile(first, 99),
                "all_median": statistics.median(everyone) if everyone else None,
                "all_p99": percentile(everyone, 99),
                "incomplete": incomplete,
            }
            figures[f"{size}/{name}"] = entry
            print(f"detection n={size} {name}: {entry}", flush=True)
    return figures


def run_dissemination(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    variants = {"gossip": LIFEGUARD, "piggyback-only": replace(LIFEGUARD, gossip_nodes=0)}
    for size in (int(s) for s in args.spread_sizes.split(",")):
        for name, config in variants.items():
            label = f"dissemination n={size} {name}"
            periods = timed(label, dissemination, size, 1, config, args.updates)
            entry = {
                "median": statistics.median(periods) if periods else None,
                "max": max(periods) if periods else None,
                "updates": len(periods),
                "log2_n": round(math.log2(size), 2),
            }
            figures[f"{size}/{name}"] = entry
            print(f"dissemination n={size} {name}: {entry}", flush=True)
    return figures


def run_false_positives(args: argparse.Namespace, sizes: list[int]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    scenarios = {
        "loss 5%": (NetworkProfile(loss=0.05), 0.0),
        "loss 20%": (NetworkProfile(loss=0.2), 0.0),
        "10% slowed": (NetworkProfile(), 0.1),
    }
    duration_ms = args.fp_seconds * 1000
    for size in sizes:
        for scenario, (profile, fraction) in scenarios.items():
            for name, config in CONFIGS.items():
                total: dict[str, int] = {}
                for seed in range(args.seeds):
                    label = f"fp n={size} {scenario} {name} seed={seed}"
                    fp = timed(
                        label,
                        false_positives,
                        size,
                        seed,
                        config,
                        duration_ms,
                        profile,
                        fraction,
                        args.slow_ms,
                    )
                    for key, value in fp.as_json().items():
                        total[key] = total.get(key, 0) + value
                figures[f"{size}/{scenario}/{name}"] = total
                print(f"fp n={size} {scenario} {name}: {total}", flush=True)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000", help="cluster sizes for detection and FPs")
    parser.add_argument("--spread-sizes", default="25,50,100,200,400,800,1600")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--crashes", type=int, default=10, help="crashes per seed")
    parser.add_argument("--gap-ms", type=int, default=90_000, help="time between crashes")
    parser.add_argument("--updates", type=int, default=10, help="weight changes per size")
    parser.add_argument("--fp-seconds", type=int, default=300, help="length of each FP run")
    parser.add_argument("--slow-ms", type=int, default=20_000)
    parser.add_argument("--only", choices=["detection", "dissemination", "fp"], action="append")
    parser.add_argument("--quick", action="store_true", help="small sizes and short runs")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.spread_sizes = "50", "25,50,100"
        args.seeds, args.crashes, args.updates, args.fp_seconds = 1, 3, 3, 60
    sizes = [int(s) for s in args.sizes.split(",")]
    experiments = set(args.only or ["detection", "dissemination", "fp"])
    report: dict[str, Any] = {"command": " ".join(sys.argv), "seeds": args.seeds}
    if "detection" in experiments:
        report["detection"] = run_detection(args, sizes)
    if "dissemination" in experiments:
        report["dissemination"] = run_dissemination(args)
    if "fp" in experiments:
        report["false_positives"] = run_false_positives(args, sizes)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
