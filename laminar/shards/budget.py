"""The bytes a client can make one shard hold, against one bound for all its connections.

Why. Each connection's own bounds (a receive buffer of two frames, 256
requests in flight, 16 MiB of answers) multiply by the number of
connections: a few hundred clients each sending large frames, parking
long-polls, or pipelining fetches whose answers they never read, could make
a shard hold gigabytes (3 connections x 150 unread fetches, 34 KB sent, took
a shard to +1.2 GiB). One budget per shard bounds the sum.

What counts, input and output alike:

- bytes received and not yet started (a partial frame in a connection's
  buffer, or complete frames it has not started yet);
- every request in flight, charged its wire size plus `InputBudget.admit` for
  what decoding it made (the header's Python objects, bounded by
  `REQUEST_HEADER_LIMITS`, and the task serving it), plus the answer it may
  queue (`answer_reserve_bytes`);
- answers queued on a connection and not yet taken by the kernel, at their
  size, from when they are queued until they are written (or dropped with
  the connection).

A request's charge is released when it is answered; buffered bytes when they
become a request (which takes over the charge) or when the connection
closes; an answer's when the kernel takes it.

A fetch's answer can be as large as its `max_bytes` (capped to half a frame
by the handler), and it is read at once or after a long-poll: the decision is
to *reserve* it before the fetch starts, not to bound the number of fetches
in flight. A fetch starts only when its reserve fits the budget (beside what
the connection itself has buffered, so a connection is never blocked by its
own input), so the answers a shard can be made to hold are bounded by the
budget, not by connections x fetches. Other answers are small (an error, an
acknowledgement, offsets) or bounded by the node's own state (a metadata
answer lists at most `--max-topics` topics): they reserve nothing and are
charged as they are queued.

The rules a connection follows (`laminar.shards.connection`):

- It reads only while the shard is under budget, except that a connection
  holding nothing may always read one chunk, and one whose buffered input is
  below its fair share (`fair_share_bytes`: the limit over the connections
  holding input, at least `SHARE_DIVISOR_MIN` of them) may read on while the
  shard holds less than its overdraft (the limit plus an eighth, at most 32
  MiB). So partial frames on many connections cannot starve another client's
  frame of a fair share's size (36 partial 8 MiB produces held a 2 MB produce
  for 28 s, until the frame deadline). The shares are computed as connections
  come, so early ones may have read larger shares: hence the overdraft's hard
  ceiling, and the shedding: while a connection under its share waits for
  budget ("starved"), the shard closes connections holding more than a share
  of partial input begun over 0.2 s ago (`SHED_GRACE_S`), largest first, until
  it is under budget (`Shard._shed_for_starved`, run as soon as a connection
  starves). Once contended, a connection holds more than a fair share of
  partial input for 0.2 s at most.
- It starts a buffered frame only while under its own bounds (requests in
  flight, answer bytes) and, over budget, only when it has nothing in flight
  or queued; a fetch only when its reserve fits.

So a ping on a fresh connection is served while the budget is spent, and the
overshoot is bounded by the overdraft plus `max_connections x (one read +
one small answer)`. A connection that stalls
holding part of a frame is closed by the frame deadline (`--frame-timeout`),
which frees what it held; one that does not read its answers holds at most
its answer bound until the idle timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from laminar.wire import Frame, Op
from laminar.wire.codec import HEADER_OFFSET

REQUEST_OVERHEAD_BYTES: Final = 1024
"""The task, future and frame objects of one request in flight."""
HEADER_OBJECT_BYTES_PER_BYTE: Final = 32
"""The most Python object bytes one header byte decodes into under
`REQUEST_HEADER_LIMITS` (a 3-byte int is a 36-byte object in a list)."""


def answer_reserve_bytes(frame: Frame, fetch_bytes_max: int) -> int:
    """What to reserve for `frame`'s answer before starting it: a fetch's
    `max_bytes` as its handler caps it (`fetch_bytes_max`), nothing for other
    ops (their answers are charged as they are queued). A fetch answers at
    least one record even past `max_bytes`; that excess is charged when the
    answer is queued."""
    if frame.op != Op.FETCH:
        return 0
    requested = frame.header.get("max_bytes")
    if isinstance(requested, int) and 0 < requested < fetch_bytes_max:
        return requested
    return fetch_bytes_max


SHARE_DIVISOR_MIN: Final = 8
"""A fair share is at most this fraction of the limit, however few connections hold input."""
OVERDRAFT_FRACTION: Final = 8
OVERDRAFT_BYTES_MAX: Final = 32 << 20
"""Fair-share reads over budget stop once the shard holds its limit plus an eighth
of it, at most 32 MiB: what an attack can add beyond the budget stays small (the
issue's target: RSS within the budget + 64 MiB), and a starved connection is
served by shedding the largest holders, not by an ever larger overdraft."""


class InputBudget:
    """One shard's input bytes: `used` against `limit_bytes` (see the module docstring)."""

    __slots__ = (
        "_waiters",
        "holders",
        "limit_bytes",
        "on_starved",
        "peak_bytes",
        "recent_peak_bytes",
        "used",
    )

    def __init__(self, limit_bytes: int) -> None:
        if limit_bytes < 1:
            raise ValueError(f"an input budget needs a positive limit, got {limit_bytes}")
        self.limit_bytes = limit_bytes
        self.used = 0
        self.peak_bytes = 0
        self.on_starved: Callable[[], None] | None = None
        """Called when a connection under its fair share starts waiting for budget
        (the shard sheds connections holding more)."""
        self.holders = 0
        """Connections holding input (buffered bytes): the fair share's divisor."""
        self.recent_peak_bytes = 0
        """The most charged since its owner last reset it (the heap trim's cue)."""
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def exhausted(self) -> bool:
        return self.used >= self.limit_bytes

    @property
    def fair_share_bytes(self) -> int:
        """What one connection's input may reach over budget (module docstring)."""
        return self.limit_bytes // max(SHARE_DIVISOR_MIN, self.holders)

    @property
    def overdraft_bytes(self) -> int:
        return self.limit_bytes + min(self.limit_bytes // OVERDRAFT_FRACTION, OVERDRAFT_BYTES_MAX)

    def fits(self, n: int, own_bytes: int = 0) -> bool:
        """Whether `n` more bytes fit, not counting `own_bytes` the asker holds."""
        return self.used - own_bytes + n <= self.limit_bytes

    def charge(self, n: int) -> None:
        self.used += n
        if self.used > self.recent_peak_bytes:
            self.recent_peak_bytes = self.used
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
