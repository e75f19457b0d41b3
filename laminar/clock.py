"""Time as the shard and replication layers read it: one injected `Clock`.

Code that decides by elapsed time (retry an offline partition no sooner than
30 s later, call a peer silent after an election timeout) asks the clock it
was given instead of `time`, so a test makes time pass by moving a fake clock
rather than by patching module constants. The composition root (`Shard`)
hands its clock down; constructors default to `SYSTEM_CLOCK`. Timers still run
on the event loop's own time (`asyncio.sleep`, `wait_for`): a clock is read,
never waited on.
"""

from __future__ import annotations

import time
from typing import Final, Protocol


class Clock(Protocol):
    """The two times the node reads."""

    def monotonic(self) -> float:
        """Seconds that never go back, for intervals and deadlines."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch, for times people and peers read."""
        ...


class SystemClock:
    """The machine's clocks."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


SYSTEM_CLOCK: Final = SystemClock()
