"""What one benchmark run does: the workload, the load model and their sizes.

One frozen `RunConfig` describes a run completely; it is written verbatim into
the JSON results, and every target in a comparison runs the very same one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Final, Literal

Workload = Literal["produce", "consume", "e2e"]
LoadModel = Literal["closed", "open"]
StartFrom = Literal["beginning", "tail"]

WORKLOADS: Final[tuple[Workload, ...]] = ("produce", "consume", "e2e")
LOAD_MODELS: Final[tuple[LoadModel, ...]] = ("closed", "open")
START_FROM: Final[tuple[StartFrom, ...]] = ("beginning", "tail")

HEADER_BYTES: Final = 16
"""Every record starts with its intended send time and a sequence number (u64 each)."""


def backlog_split(prefill: int, partitions: int) -> list[int]:
    """Records prefilled into each partition (as even as possible), written in
    partition order: partition p holds prefill sequence numbers from
    `sum(split[:p])` on."""
    base, extra = divmod(prefill, partitions)
    return [base + (1 if p < extra else 0) for p in range(partitions)]


class BenchConfigError(ValueError):
    """A setting is invalid; the message says which and what is allowed."""


@dataclass(frozen=True, slots=True)
class RunConfig:
    """One run's workload; identical for every target compared."""

    workload: Workload = "produce"
    load: LoadModel = "closed"
    start_from: StartFrom = "beginning"
    """Where consumers start (`consume` only): a prefilled backlog, or its tail
    while producers write (`e2e` consumers always tail)."""
    rate: float = 0.0
    """Open loop: records per second over all producers together."""
    window: int = 8
    """Batches in flight per producer (closed: the concurrency; open: the bound)."""
    record_bytes: int = 1024
    batch: int = 1
    """Records per produce request (one request, one durable acknowledgement)."""
    partitions: int = 1
    producers: int = 1
    consumers: int = 1
    duration_s: float | None = 10.0
    count: int | None = None
    """Records per producer (or per consumer of a backlog); with `duration_s`
    the run ends at whichever comes first."""
    warmup_s: float = 2.0
    """Sent but not measured, for every target alike."""
    prefill: int = 100_000
    """Records written before a `consume --from beginning` run (not measured)."""
    fetch_max_records: int = 500
    fetch_wait_ms: int = 100
    """Long-poll bound of a consumer's fetch when nothing is there yet."""
    prefetch: int = 0
    """Fetches a consumer keeps in flight ahead of the batch it takes in, where
    the target's client can ask ahead: laminar's `AsyncClient.reader`; NATS
    reads through a push consumer (the server sends ahead, flow-controlled)
    instead of pull fetches. Redis Streams cannot: an XREAD's cursor is the
    last id of the previous reply, so its reader keeps one XREAD at a time.
    0 (the default): one fetch at a time for every target."""
    drain_s: float = 10.0
    """After the last send, how long answers and deliveries may still come."""
    pin_workers: bool = False
    """Pin each load-generator process to one CPU (round robin)."""

    def __post_init__(self) -> None:
        def fail(message: str) -> None:
            raise BenchConfigError(message)

        if self.workload not in WORKLOADS:
            fail(f"--workload must be one of {', '.join(WORKLOADS)}")
        if self.load not in LOAD_MODELS:
            fail(f"--load must be one of {', '.join(LOAD_MODELS)}")
        if self.start_from not in START_FROM:
            fail(f"--from must be one of {', '.join(START_FROM)}")
        if self.load == "open" and not self.rate > 0:
            fail("--load open needs --rate (records per second, over all producers)")
        if self.load == "closed" and self.rate:
            fail("--rate only applies to --load open")
        for name in ("window", "batch", "partitions", "fetch_max_records"):
            if getattr(self, name) < 1:
                fail(f"--{name.replace('_', '-')} must be at least 1")
        if self.record_bytes < HEADER_BYTES:
            fail(f"--record-size must be at least {HEADER_BYTES} bytes (the record header)")
        if self.producers < (0 if self.consumes_backlog else 1):
            fail("--producers must be at least 1 for this workload")
        if self.consumers < (1 if self.workload != "produce" else 0):
            fail("--consumers must be at least 1 for this workload")
        if self.duration_s is None and self.count is None:
            fail("give --duration or --count")
        if self.duration_s is not None and not self.duration_s > 0:
            fail("--duration must be positive")
        if self.count is not None and self.count < 1:
            fail("--count must be at least 1")
        if self.warmup_s < 0 or self.drain_s < 0 or self.fetch_wait_ms < 0 or self.prefetch < 0:
            fail("--warmup, --drain, --fetch-wait and --prefetch must not be negative")
        if self.consumes_backlog and self.prefill < 1:
            fail("--prefill must be at least 1 for consume --from beginning")

    @property
    def consumes_backlog(self) -> bool:
        """Consumers drain a prefilled backlog; no producers run during the run."""
        return self.workload == "consume" and self.start_from == "beginning"

    @property
    def producer_count(self) -> int:
        return 0 if self.consumes_backlog else self.producers

    @property
    def consumer_count(self) -> int:
        return 0 if self.workload == "produce" else self.consumers

    @property
    def primary_metric(self) -> str:
        """The histogram a report leads with for this workload."""
        if self.workload == "produce":
            return "produce"
        if self.workload == "e2e":
            return "e2e"
        return "fetch"

    @property
    def rate_per_producer(self) -> float:
        return self.rate / max(1, self.producer_count)

    def describe(self) -> str:
        """A one-line human description (titles of tables and plots)."""
        parts: list[str] = [self.workload]
        if self.workload == "consume":
            parts.append(f"from {self.start_from}")
        if not self.consumes_backlog:
            if self.load == "open":
                parts.append(f"open loop {self.rate:g} rec/s")
            else:
                parts.append(f"closed loop window {self.window}")
        parts.append(f"{self.record_bytes} B records")
        if not self.consumes_backlog:
            parts.append(f"batch {self.batch}")
        parts.append(f"{self.partitions} partition{'s' if self.partitions != 1 else ''}")
        if self.producer_count:
            parts.append(f"{self.producer_count} producer{'s' if self.producer_count != 1 else ''}")
        if self.consumer_count:
            parts.append(f"{self.consumer_count} consumer{'s' if self.consumer_count != 1 else ''}")
            if self.prefetch:
                parts.append(f"prefetch {self.prefetch}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
