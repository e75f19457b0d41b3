"""A `laminar.clock.Clock` that tests move."""

from __future__ import annotations

import time

WALL_START_MS = 1_800_000_000_000
"""A frozen clock's wall time, give or take its monotonic offset (2027-01-15)."""


class FakeClock:
    """Frozen unless moved with `advance`; with `running=True` it also follows the
    real clocks (for tests whose peers and timers run in real time), so before
    any `advance` it reads exactly what the system clock does."""

    def __init__(self, *, running: bool = False) -> None:
        self.running = running
        self.offset_s = 0.0 if running else 1000.0

    def monotonic(self) -> float:
        return self.offset_s + (time.monotonic() if self.running else 0.0)

    def wall_ms(self) -> int:
        base = time.time_ns() // 1_000_000 if self.running else WALL_START_MS
        return base + round(self.offset_s * 1000)

    def advance(self, seconds: float) -> None:
        """Make `seconds` pass at once, on both clocks."""
        self.offset_s += seconds
