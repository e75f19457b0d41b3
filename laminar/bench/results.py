"""Results of runs: one `RunResult` per target per round, built from the
workers' reports, and everything serialisable to JSON.

Rates are records over the measured time: from the start of the measurement
window to the last measured acknowledgement (producers) or delivery
(consumers), so a target that falls behind and answers late is charged the
time it took. Failed runs are results too, with the reason and the end of the
server's log; a report never silently drops a run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from laminar.bench.config import RunConfig
from laminar.bench.delivery import DeliveryVerdict
from laminar.bench.histogram import LatencyHistogram
from laminar.bench.tally import HISTOGRAMS, WorkerReport

MiB = 1 << 20
GENERATOR_BOUND_SHARE: Final = 0.85
"""Above this share of a core, a load generator may be what limits a run."""


@dataclass(frozen=True, slots=True)
class RoleFigures:
    """Throughput of one side (producers or consumers) of a run."""

    records: int
    bytes: int
    ops: int
    elapsed_s: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def mib_per_s(self) -> float:
        return self.bytes / MiB / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "records_per_s": self.records_per_s,
            "mib_per_s": self.mib_per_s,
        }


@dataclass(slots=True)
class RunResult:
    """One target, one round."""

    target: str
    round: int
    status: str
    """"ok", "errors" (finished, with errors or unanswered requests), "failed"."""
    started_at: str
    loadavg_at_start: tuple[float, float, float]
    durability: dict[str, Any]
    versions: dict[str, str]
    error: str | None = None
    produce: RoleFigures | None = None
    consume: RoleFigures | None = None
    histograms: dict[str, LatencyHistogram] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    error_samples: list[str] = field(default_factory=list)
    issued_ops: int = 0
    due_ops: int = 0
    unfinished_ops: int = 0
    late_ops: int = 0
    empty_fetches: int = 0
    produced_total: int = 0
    consumed_total: int = 0
    worker_cpu_s: float = 0.0
    wall_s: float = 0.0
    server_log_tail: str = ""
    generator_core_shares: list[float] = field(default_factory=list)
    """Per load-generator process: the share of a core it used while working."""
    server_cpu_cores: float | None = None
    """CPU the server (with its child processes) used over the run, in cores;
    for a cluster, all its server processes together."""
    server_cpu_by_process: dict[str, float] = field(default_factory=dict)
    """The same per server process (a cluster's nodes), by name."""
    delivery: dict[str, Any] | None = None
    """The identity check (`laminar.bench.delivery.DeliveryVerdict.to_dict`)."""
    fsync_floor_us: dict[str, float] | None = None
    """The bare 1 KiB pwritev+fdatasync latency just before the run (p50, p99)."""

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    @property
    def generator_core_share(self) -> float | None:
        """The busiest load generator's share of a core."""
        return max(self.generator_core_shares) if self.generator_core_shares else None

    @property
    def generator_bound(self) -> bool:
        """A generator was so busy that it, not the server, may have set the pace:
        such a run measures the client, not the server."""
        share = self.generator_core_share
        return share is not None and share > GENERATOR_BOUND_SHARE

    def note_delivery(self, verdict: DeliveryVerdict) -> None:
        """Record an identity check; a failed one makes the run "errors"."""
        if self.delivery is not None:
            merged = DeliveryVerdict.from_dict(self.delivery)
            merged.merge(verdict)
            verdict = merged
        self.delivery = verdict.to_dict()
        if not verdict.ok:
            self.status = "errors" if self.status == "ok" else self.status
            for problem, count in verdict.problems().items():
                self.errors[problem] = count
            self.error_samples.extend(verdict.samples)

    def throughput(self, config: RunConfig) -> float:
        """Records per second of the side the workload is about."""
        figures = self.produce if config.workload == "produce" else self.consume
        return 0.0 if figures is None else figures.records_per_s

    def latency(self, name: str) -> LatencyHistogram:
        return self.histograms.get(name) or LatencyHistogram()

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "round": self.round,
            "status": self.status,
            "error": self.error,
            "started_at": self.started_at,
            "loadavg_at_start": list(self.loadavg_at_start),
            "durability": self.durability,
            "versions": self.versions,
            "produce": None if self.produce is None else self.produce.to_dict(),
            "consume": None if self.consume is None else self.consume.to_dict(),
            "latency_us": {
                name: h.summary().to_dict() for name, h in self.histograms.items() if h.count
            },
            "histograms_hdr": {name: h.encode() for name, h in self.histograms.items() if h.count},
            "errors": self.errors,
            "error_samples": self.error_samples,
            "issued_ops": self.issued_ops,
            "due_ops": self.due_ops,
            "unfinished_ops": self.unfinished_ops,
            "late_ops": self.late_ops,
            "empty_fetches": self.empty_fetches,
            "produced_total": self.produced_total,
            "consumed_total": self.consumed_total,
            "worker_cpu_s": self.worker_cpu_s,
            "wall_s": self.wall_s,
            "server_log_tail": self.server_log_tail,
            "generator_core_shares": self.generator_core_shares,
            "generator_bound": self.generator_bound,
            "server_cpu_cores": self.server_cpu_cores,
            "server_cpu_by_process": self.server_cpu_by_process,
            "delivery": self.delivery,
            "fsync_floor_us": self.fsync_floor_us,
        }


def run_from_dict(data: dict[str, Any]) -> RunResult:
    """The inverse of `RunResult.to_dict` (to re-render saved results)."""

    def figures(d: dict[str, Any] | None) -> RoleFigures | None:
        if d is None:
            return None
        return RoleFigures(d["records"], d["bytes"], d["ops"], d["elapsed_s"])

    one, five, fifteen = data["loadavg_at_start"]
    result = RunResult(
        target=data["target"],
        round=data["round"],
        status=data["status"],
        started_at=data["started_at"],
        loadavg_at_start=(one, five, fifteen),
        durability=data["durability"],
        versions=data["versions"],
        error=data["error"],
        produce=figures(data["produce"]),
        consume=figures(data["consume"]),
        histograms={
            name: LatencyHistogram.decode(text) for name, text in data["histograms_hdr"].items()
        },
        errors=data["errors"],
        error_samples=data["error_samples"],
    )
    for name in (
        "issued_ops",
        "due_ops",
        "unfinished_ops",
        "late_ops",
        "empty_fetches",
        "produced_total",
        "consumed_total",
        "worker_cpu_s",
        "wall_s",
        "server_log_tail",
    ):
        setattr(result, name, data[name])
    for name in (
        "generator_core_shares",
        "server_cpu_cores",
        "server_cpu_by_process",
        "delivery",
        "fsync_floor_us",
    ):
        if name in data:  # results saved before these existed lack them
            setattr(result, name, data[name])
    return result


def _figures(reports: list[WorkerReport], measure_start_ns: int) -> RoleFigures | None:
    if not reports:
        return None
    last = max(r.last_ns for r in reports)
    elapsed = (last - measure_start_ns) / 1e9 if last > measure_start_ns else 0.0
    return RoleFigures(
        records=sum(r.records for r in reports),
        bytes=sum(r.bytes for r in reports),
        ops=sum(r.ops for r in reports),
        elapsed_s=elapsed,
    )


def fill_from_reports(
    result: RunResult, reports: list[WorkerReport], measure_start_ns: int
) -> None:
    """Merge the workers' histograms and counts into `result`."""
    producers = [r for r in reports if r.role == "producer"]
    consumers = [r for r in reports if r.role == "consumer"]
    result.produce = _figures(producers, measure_start_ns)
    result.consume = _figures(consumers, measure_start_ns)
    for name in HISTOGRAMS:
        merged = LatencyHistogram.merged(
            [LatencyHistogram.decode(r.histograms[name]) for r in reports if name in r.histograms]
        )
        if merged.count:
            result.histograms[name] = merged
    errors: Counter[str] = Counter()
    for r in reports:
        errors.update(r.errors)
        result.error_samples.extend(r.error_samples)
    result.errors = dict(errors)
    result.error_samples = result.error_samples[:10]
    result.issued_ops = sum(r.issued_ops for r in producers)
    result.due_ops = sum(r.due_ops for r in producers)
    result.unfinished_ops = sum(r.unfinished_ops for r in producers)
    result.late_ops = sum(r.late_ops for r in producers)
    result.empty_fetches = sum(r.empty_fetches for r in consumers)
    result.produced_total = sum(r.total_records for r in producers)
    result.consumed_total = sum(r.total_records for r in consumers)
    result.worker_cpu_s = sum(r.cpu_s for r in reports)
    result.generator_core_shares = [r.core_share for r in reports]
    if errors or result.unfinished_ops:
        result.status = "errors"
    for r in consumers:
        if r.delivery is not None:
            result.note_delivery(DeliveryVerdict.from_dict(r.delivery))
