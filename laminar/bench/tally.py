"""What one load generator counted, and the report it sends back.

A `Tally` lives in a worker process; `report()` freezes it into a picklable
`WorkerReport` with the histograms in HDR's encoding, which the coordinator
merges exactly (`laminar.bench.histogram`).
"""

from __future__ import annotations

import builtins
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from laminar.bench.histogram import LatencyHistogram

MAX_ERROR_SAMPLES = 5

HISTOGRAMS = ("produce", "produce_service", "fetch", "e2e")
"""produce: ack latency from the intended send time (what a user waits for);
produce_service: from the actual send (uncorrected; differs under stalls);
fetch: round trip of fetches that returned records;
e2e: from a record's intended send time until a consumer has it."""


@dataclass(frozen=True, slots=True)
class Timeline:
    """Absolute CLOCK_MONOTONIC times shared by every worker of a run."""

    start_ns: int
    measure_start_ns: int
    measure_end_ns: int | None
    """None in count mode: the run ends when the counts are reached."""


@dataclass(slots=True)
class WorkerReport:
    """Everything one worker measured, picklable."""

    worker_id: int
    role: str
    histograms: dict[str, str]
    records: int
    """Records acknowledged (producers) or received (consumers) in the measurement."""
    bytes: int
    ops: int
    """Requests completed in the measurement (produce batches, non-empty fetches)."""
    last_ns: int
    """When the last measured record was acknowledged or received (0: none)."""
    issued_ops: int = 0
    """Requests issued in the measurement (producers)."""
    due_ops: int = 0
    """Open loop: requests the schedule called for in the measurement window."""
    unfinished_ops: int = 0
    """Requests issued and never answered before the drain deadline."""
    late_ops: int = 0
    """Open loop: requests sent more than 1 ms after their intended time."""
    empty_fetches: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    error_samples: list[str] = field(default_factory=list)
    cpu_s: float = 0.0
    total_records: int = 0
    """Records acknowledged or received over the whole run, warm-up included."""
    busy_cpu_s: float = 0.0
    busy_wall_s: float = 0.0
    """CPU time and wall time of the work itself (from the shared start to the
    end of its drain): `busy_cpu_s / busy_wall_s` is the share of a core this
    generator used; near 1, it and not the target set the pace."""
    ledger: tuple[int, int, builtins.bytes] | None = None
    """Producers: (producer id, sequence numbers sent, bitmap of those acknowledged)."""
    delivery: dict[str, Any] | None = None
    """Backlog consumers: their identity check (`DeliveryVerdict.to_dict`)."""

    @property
    def core_share(self) -> float:
        return self.busy_cpu_s / self.busy_wall_s if self.busy_wall_s > 0 else 0.0


class Tally:
    """Counters and histograms of one worker."""

    def __init__(self, worker_id: int, role: str) -> None:
        self.worker_id = worker_id
        self.role = role
        self.histograms = {name: LatencyHistogram() for name in HISTOGRAMS}
        self.records = 0
        self.bytes = 0
        self.ops = 0
        self.last_ns = 0
        self.issued_ops = 0
        self.due_ops = 0
        self.unfinished_ops = 0
        self.late_ops = 0
        self.empty_fetches = 0
        self.total_records = 0
        self.errors: Counter[str] = Counter()
        self.error_samples: list[str] = []
        self.ledger: tuple[int, int, bytes] | None = None
        self.delivery: dict[str, Any] | None = None
        self.cpu_at_start_s = time.process_time()

    def error(self, exc: BaseException) -> None:
        kind = type(exc).__name__
        self.errors[kind] += 1
        if len(self.error_samples) < MAX_ERROR_SAMPLES:
            self.error_samples.append(f"{kind}: {exc}"[:500])

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def report(
        self, cpu_s: float, busy_cpu_s: float = 0.0, busy_wall_s: float = 0.0
    ) -> WorkerReport:
        return WorkerReport(
            worker_id=self.worker_id,
            role=self.role,
            histograms={name: h.encode() for name, h in self.histograms.items()},
            records=self.records,
            bytes=self.bytes,
            ops=self.ops,
            last_ns=self.last_ns,
            issued_ops=self.issued_ops,
            due_ops=self.due_ops,
            unfinished_ops=self.unfinished_ops,
            late_ops=self.late_ops,
            empty_fetches=self.empty_fetches,
            errors=dict(self.errors),
            error_samples=list(self.error_samples),
            cpu_s=cpu_s,
            total_records=self.total_records,
            busy_cpu_s=busy_cpu_s,
            busy_wall_s=busy_wall_s,
            ledger=self.ledger,
            delivery=self.delivery,
        )
