"""Several targets, one workload, repeated rounds: medians and ratios.

Rounds are interleaved and rotated (A B C, B C A, C A B, ...) so that a
neighbour's burst of load on the shared machine lands on every target about
equally rather than on one target's whole series, and no target always runs
first (on a cold disk) or last; the verdict is the median over rounds, and
ratios are taken between medians. Every run is kept, failed ones included.

Every summary carries the load generators' and the server's CPU: a target
whose generator used more than 85% of a core in any round is flagged
"generator-bound": its figures say how fast the client was, not the server.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Final

from laminar.bench.config import RunConfig
from laminar.bench.histogram import LatencyHistogram
from laminar.bench.machine import loadavg
from laminar.bench.progress import ProgressSink
from laminar.bench.results import RunResult
from laminar.bench.runner import RunPlan, headline, run_once
from laminar.bench.targets import (
    System,
    SystemOptions,
    SystemUnavailable,
    make_system,
    server_of,
)

LATENCY_FIELDS = ("p50_us", "p90_us", "p99_us", "p999_us", "max_us")


RATE_HELD: Final = 0.95
"""A fixed-rate run delivering less than this share of its rate (median over
rounds) did not hold the rate: its latencies are the growing backlog, not
service times, and the p99 goal is not judged on it."""


@dataclass(slots=True)
class TargetSummary:
    """The medians over the rounds of one target that did not fail."""

    target: str
    durability: dict[str, Any]
    versions: dict[str, str]
    runs: int
    failed: int
    with_errors: int
    records_per_s: float | None
    mib_per_s: float | None
    latency_us: dict[str, float]
    """Median over rounds of each percentile of the primary histogram."""
    service_p99_us: float | None
    """Produce workloads: median p99 measured from the actual send (uncorrected)."""
    errors: int
    on_time: float | None = None
    """Open loop: median share of the scheduled requests that were sent no more
    than 1 ms late (below 1: the target, or the generator, fell behind)."""
    generator_core_share: float | None = None
    """The busiest load generator's share of a core, highest over the rounds."""
    server_cpu_cores: float | None = None
    """Median over rounds of the server's CPU use, in cores."""
    server_cpu_by_process: dict[str, float] = field(default_factory=dict)
    """Median over rounds of each server process's CPU use (a cluster's nodes)."""
    generator_bound_rounds: int = 0
    delivery_failures: int = 0
    """Rounds whose identity check found lost, duplicated or phantom records."""
    failures: list[str] = field(default_factory=list)

    @property
    def generator_bound(self) -> bool:
        return self.generator_bound_rounds > 0

    @property
    def server_cpu_us_per_record(self) -> float | None:
        """The server's CPU time per record (medians of both): what a door costs
        the server, comparable across clients that batch differently."""
        if self.server_cpu_cores is None or not self.records_per_s:
            return None
        return 1e6 * self.server_cpu_cores / self.records_per_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "durability": self.durability,
            "versions": self.versions,
            "runs": self.runs,
            "failed": self.failed,
            "with_errors": self.with_errors,
            "records_per_s_median": self.records_per_s,
            "mib_per_s_median": self.mib_per_s,
            "latency_us_median": self.latency_us,
            "service_p99_us_median": self.service_p99_us,
            "errors": self.errors,
            "on_time_median": self.on_time,
            "generator_core_share_max": self.generator_core_share,
            "server_cpu_cores_median": self.server_cpu_cores,
            "server_cpu_by_process_median": self.server_cpu_by_process,
            "server_cpu_us_per_record": self.server_cpu_us_per_record,
            "generator_bound_rounds": self.generator_bound_rounds,
            "delivery_failures": self.delivery_failures,
            "failures": self.failures,
        }


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _per_process_medians(runs: list[RunResult]) -> dict[str, float]:
    """Each server process's median CPU over the runs that measured it."""
    names = sorted({name for r in runs for name in r.server_cpu_by_process})
    return {
        name: statistics.median(
            [r.server_cpu_by_process[name] for r in runs if name in r.server_cpu_by_process]
        )
        for name in names
    }


@dataclass(slots=True)
class Comparison:
    config: RunConfig
    targets: list[str]
    rounds: int
    runs: list[RunResult] = field(default_factory=list)

    def runs_of(self, target: str) -> list[RunResult]:
        return [r for r in self.runs if r.target == target]

    def summary(self, target: str) -> TargetSummary:
        config = self.config
        runs = self.runs_of(target)
        good = [r for r in runs if r.ok]
        metric = config.primary_metric
        latency: dict[str, float] = {}
        for name in LATENCY_FIELDS:
            values = [float(getattr(r.latency(metric).summary(), name)) for r in good]
            median = _median(values)
            if median is not None:
                latency[name] = median
        side = "produce" if config.workload == "produce" else "consume"
        figures = [getattr(r, side) for r in good if getattr(r, side) is not None]
        service = [
            float(r.latency("produce_service").summary().p99_us)
            for r in good
            if r.latency("produce_service").count
        ]
        on_time = [
            (r.issued_ops - r.late_ops) / r.due_ops
            for r in good
            if r.due_ops and config.load == "open"
        ]
        first = runs[0] if runs else None
        shares = [s for r in good if (s := r.generator_core_share) is not None]
        return TargetSummary(
            target=target,
            durability=first.durability if first else {},
            versions=first.versions if first else {},
            runs=len(runs),
            failed=len(runs) - len(good),
            with_errors=sum(1 for r in good if r.status == "errors"),
            records_per_s=_median([f.records_per_s for f in figures]),
            mib_per_s=_median([f.mib_per_s for f in figures]),
            latency_us=latency,
            service_p99_us=_median(service) if config.workload == "produce" else None,
            errors=sum(sum(r.errors.values()) for r in runs),
            on_time=_median(on_time),
            generator_core_share=max(shares) if shares else None,
            server_cpu_cores=_median([c for r in good if (c := r.server_cpu_cores) is not None]),
            server_cpu_by_process=_per_process_medians(good),
            generator_bound_rounds=sum(1 for r in good if r.generator_bound),
            delivery_failures=sum(
                1 for r in good if r.delivery is not None and not r.delivery.get("ok", True)
            ),
            failures=[f"round {r.round}: {r.error}" for r in runs if not r.ok],
        )

    def summaries(self) -> list[TargetSummary]:
        return [self.summary(t) for t in self.targets]

    def ratios(self) -> dict[str, dict[str, float | None]]:
        """For each other target: baseline (the first target) divided by it,
        for throughput (above 1: the baseline is faster) and for each latency
        percentile (below 1: the baseline is quicker)."""
        summaries = self.summaries()
        base = summaries[0]
        out: dict[str, dict[str, float | None]] = {}
        for other in summaries[1:]:
            row: dict[str, float | None] = {
                "records_per_s": _ratio(base.records_per_s, other.records_per_s)
            }
            for name in LATENCY_FIELDS:
                row[name] = _ratio(base.latency_us.get(name), other.latency_us.get(name))
            out[other.target] = row
        return out

    def goal(self) -> dict[str, Any] | None:
        """The issue's goal: the baseline against the best peer acknowledging
        after fsync. Throughput (highest peer; at least 1.0x) is checked only in
        a closed loop (at a fixed rate everyone sends the same); p99 (lowest
        peer; at most 1.0x) only at a fixed rate (in a closed loop a p99 is
        Little's law applied to the throughput, not a latency result). A check
        against a peer whose generator was bound says so: it is not a server
        comparison."""
        summaries = self.summaries()
        base = summaries[0]
        family = server_of(base.target)
        peers = [
            s
            for s in summaries[1:]
            if s.durability.get("fsync_before_ack")
            and server_of(s.target) != family
            and s.runs > s.failed
        ]
        if not peers or base.runs == base.failed or self.config.consumes_backlog:
            return None
        goal: dict[str, Any] = {"baseline": base.target}
        if self.config.load == "closed":
            best = max(peers, key=lambda s: s.records_per_s or 0.0)
            ratio = _ratio(base.records_per_s, best.records_per_s)
            goal["best_throughput_peer"] = best.target
            goal["throughput_ratio"] = ratio
            goal["throughput_met"] = ratio is not None and ratio >= 1.0
        else:
            best = min(peers, key=lambda s: s.latency_us.get("p99_us", float("inf")))
            ratio = _ratio(base.latency_us.get("p99_us"), best.latency_us.get("p99_us"))
            goal["best_p99_peer"] = best.target
            goal["p99_ratio"] = ratio
            held = RATE_HELD * self.config.rate
            unheld = sorted(s.target for s in (base, best) if (s.records_per_s or 0.0) < held)
            goal["rate_not_held"] = unheld
            goal["p99_met"] = None if unheld else ratio is not None and ratio <= 1.0
        goal["generator_bound"] = sorted(s.target for s in (base, best) if s.generator_bound)
        return goal

    def merged_histogram(self, target: str, name: str) -> LatencyHistogram:
        """All non-failed rounds of `target` merged (for distribution plots)."""
        return LatencyHistogram.merged([r.latency(name) for r in self.runs_of(target) if r.ok])


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _unavailable(name: str, reason: str, round_no: int) -> RunResult:
    return RunResult(
        target=name,
        round=round_no,
        status="failed",
        started_at="",
        loadavg_at_start=loadavg(),
        durability={},
        versions={},
        error=f"SystemUnavailable: {reason}",
    )


def run_comparison(
    targets: list[str],
    plan: RunPlan,
    rounds: int,
    options: SystemOptions,
    progress: ProgressSink,
) -> Comparison:
    """Run every target `rounds` times, interleaved."""
    comparison = Comparison(plan.config, list(targets), rounds)
    systems: dict[str, System | str] = {}
    for name in targets:
        try:
            systems[name] = make_system(name, options)
        except SystemUnavailable as exc:
            systems[name] = str(exc)
    for round_no in range(1, rounds + 1):
        shift = (round_no - 1) % len(targets)
        for name in targets[shift:] + targets[:shift]:
            system = systems[name]
            if isinstance(system, str):
                result = _unavailable(name, system, round_no)
                progress.begin_run(name, round_no, rounds)
                progress.end_run(result, headline(result, plan.config))
            else:
                result = run_once(system, plan, round_no, rounds, progress)
            comparison.runs.append(result)
    return comparison
