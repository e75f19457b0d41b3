"""ByteBudget: how many bytes leaders may send to learners (moves) per tick.

A move copies a partition's whole retained log to its new replica; without a
limit the copies of many moves would take the disk and network the
partitions' own writes need. One budget is shared by every group of a shard:
the shell refills it once per tick (`refill`), and a leader sends a learner
an append only while it is not spent, with at most what is left (`take`;
one entry bigger than a tick's budget still goes, overdrawing it; an
install is not cut short). No clock here: the shell's ticks are the time.
"""

from __future__ import annotations


class ByteBudget:
    """Bytes per tick for appends to learners (see the module docstring)."""

    def __init__(self, bytes_per_tick: int) -> None:
        if bytes_per_tick < 1:
            raise ValueError("bytes_per_tick must be >= 1")
        self.bytes_per_tick = bytes_per_tick
        self.available = bytes_per_tick
        self.sent_bytes = 0
        """Every byte taken so far (for metrics)."""
        self.refused = 0
        """Sends refused because the tick's budget was spent."""

    def refill(self) -> None:
        """A tick passed: a full tick's budget again (unspent bytes do not pile up)."""
        self.available = self.bytes_per_tick

    def spent(self) -> bool:
        if self.available > 0:
            return False
        self.refused += 1
        return True

    def take(self, size: int) -> None:
        self.available -= size
        self.sent_bytes += size
