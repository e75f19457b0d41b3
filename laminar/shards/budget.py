"""The bytes of client input one shard holds, against one bound for all its connections.

Why. Each connection's own bounds (a receive buffer of two frames, 256
requests in flight) multiply by the number of connections: a few hundred
clients each sending large frames, or parking long-polls, could make a shard
hold gigabytes. One budget per shard bounds the sum.

What counts: bytes received and not yet decoded (a partial frame in a
connection's buffer) and every request in flight, charged its wire size plus
`InputBudget.admit` for what decoding it made (the header's Python objects,
bounded by `REQUEST_HEADER_LIMITS`, and the task serving it). A request's
charge is released when it is answered; buffered bytes when they become a
request (which takes over the charge) or when the connection closes.

The rule a connection follows: it reads only while the shard is under budget,
except that a connection holding nothing may always read one chunk. So a ping
on a fresh connection is served while the budget is spent, and the overshoot
is bounded by `max_connections x one read`. A connection that stalls holding
part of a frame is closed by the frame deadline (`--frame-timeout`), which
frees what it held.
"""

from __future__ import annotations

import asyncio
from typing import Final

from laminar.wire.codec import HEADER_OFFSET

REQUEST_OVERHEAD_BYTES: Final = 1024
"""The task, future and frame objects of one request in flight."""
HEADER_OBJECT_BYTES_PER_BYTE: Final = 32
"""The most Python object bytes one header byte decodes into under
`REQUEST_HEADER_LIMITS` (a 3-byte int is a 36-byte object in a list)."""


class InputBudget:
    """One shard's input bytes: `used` against `limit_bytes` (see the module docstring)."""

    __slots__ = ("_waiters", "limit_bytes", "peak_bytes", "used")

    def __init__(self, limit_bytes: int) -> None:
        if limit_bytes < 1:
            raise ValueError(f"an input budget needs a positive limit, got {limit_bytes}")
        self.limit_bytes = limit_bytes
        self.used = 0
        self.peak_bytes = 0
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def exhausted(self) -> bool:
        return self.used >= self.limit_bytes

    def charge(self, n: int) -> None:
        self.used += n
        if self.used > self.peak_bytes:
            self.peak_bytes = self.used

    def admit(self, frame_bytes: int, payload_bytes: int) -> int:
        """A request decoded from `frame_bytes` received bytes (charged already):
        charge what decoding it added and return its whole cost, to `release`
        when it is answered. One call per request: this is on the hot path."""
        extra = REQUEST_OVERHEAD_BYTES + HEADER_OBJECT_BYTES_PER_BYTE * (
            frame_bytes - HEADER_OFFSET - payload_bytes
        )
        self.used += extra
        return frame_bytes + extra

    def release(self, n: int) -> None:
        self.used -= n
        if self._waiters and self.used < self.limit_bytes:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def wake_when_available(self, waiter: asyncio.Future[None]) -> None:
        """Resolve `waiter` once the shard is under budget again."""
        if len(self._waiters) >= 64:  # drop waiters resolved meanwhile (their reader moved on)
            self._waiters = [w for w in self._waiters if not w.done()]
        self._waiters.append(waiter)
