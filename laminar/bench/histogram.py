"""Latency histograms: HDR, in microseconds, merged exactly across processes.

Every load generator records into its own `LatencyHistogram`, ships it to the
coordinator in HDR's compressed encoding, and the coordinator adds the counts
bucket by bucket. Percentiles are read from the merged counts, never averaged
across generators: an average of p99s is not the p99 of anything.

Values are microseconds with three significant figures (HDR's error bound is
0.1% of the value), from 1 us to one hour; anything outside is clamped to the
range and counted in `clamped`, so an off-scale value is visible, not lost.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Final

from hdrh.histogram import HdrHistogram

LOWEST_US: Final = 1
HIGHEST_US: Final = 3_600_000_000
SIGNIFICANT_FIGURES: Final = 3
PERCENTILES: Final = (50.0, 90.0, 99.0, 99.9)


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """The figures a report shows for one histogram, in microseconds."""

    count: int
    min_us: int
    mean_us: float
    p50_us: int
    p90_us: int
    p99_us: int
    p999_us: int
    max_us: int

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


class LatencyHistogram:
    """An HDR histogram of latencies in microseconds."""

    def __init__(self, hdr: HdrHistogram | None = None, clamped: int = 0, sum_us: int = 0) -> None:
        self._hdr = hdr or HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_FIGURES)
        self.clamped = clamped
        """Values recorded outside [LOWEST_US, HIGHEST_US] (clamped into it)."""
        self.sum_us = sum_us
        """Sum of the recorded values (as recorded, after clamping): an exact mean
        without a walk over every bucket, which hdrh does in Python."""

    def record_ns(self, latency_ns: int, count: int = 1) -> None:
        """Record `count` occurrences of a latency given in nanoseconds."""
        self.record_us((latency_ns + 500) // 1000, count)

    def record_us(self, latency_us: int, count: int = 1) -> None:
        if latency_us < LOWEST_US:
            latency_us = LOWEST_US
            # A sub-microsecond latency is a rounding artefact, not an outlier.
        elif latency_us > HIGHEST_US:
            latency_us = HIGHEST_US
            self.clamped += count
        self._hdr.record_value(latency_us, count)
        self.sum_us += latency_us * count

    def merge(self, other: LatencyHistogram) -> None:
        """Add `other`'s counts to this histogram (exact, bucket by bucket)."""
        self._hdr.add(other._hdr)
        self.clamped += other.clamped
        self.sum_us += other.sum_us

    @classmethod
    def merged(cls, parts: list[LatencyHistogram]) -> LatencyHistogram:
        total = cls()
        for part in parts:
            total.merge(part)
        return total

    @property
    def count(self) -> int:
        return int(self._hdr.get_total_count())

    def value_at(self, percentile: float) -> int:
        """The latency at `percentile` (0-100), in microseconds; 0 when empty."""
        if self.count == 0:
            return 0
        return int(self._hdr.get_value_at_percentile(percentile))

    def summary(self) -> LatencySummary:
        count = self.count
        if count == 0:
            return LatencySummary(0, 0, 0.0, 0, 0, 0, 0, 0)
        h = self._hdr
        at = h.get_percentile_to_value_dict(list(PERCENTILES))
        return LatencySummary(
            count=count,
            min_us=int(h.get_min_value()),
            mean_us=self.sum_us / count,
            p50_us=int(at[50.0]),
            p90_us=int(at[90.0]),
            p99_us=int(at[99.0]),
            p999_us=int(at[99.9]),
            max_us=int(h.get_max_value()),
        )

    def spectrum(self, ticks_per_half_distance: int = 5) -> list[tuple[float, int]]:
        """(percentile, latency_us) points of the classic HDR percentile plot."""
        if self.count == 0:
            return []
        return [
            (float(item.percentile_level_iterated_to), int(item.value_iterated_to))
            for item in self._hdr.get_percentile_iterator(ticks_per_half_distance)
        ]

    def encode(self) -> str:
        """HDR's compressed, base64 text form, after "clamped:sum_us:"."""
        payload: bytes = self._hdr.encode()
        return f"{self.clamped}:{self.sum_us}:{payload.decode('ascii')}"

    @classmethod
    def decode(cls, text: str) -> LatencyHistogram:
        clamped, sum_us, payload = text.split(":", 2)
        return cls(HdrHistogram.decode(payload.encode("ascii")), int(clamped), int(sum_us))
