"""Clocks and pacers: when an open-loop sender's next message is due.

An open-loop generator must send message k at `start + k * interval`, whatever
happened to message k-1, and measure its latency from that intended time. The
event loop's own timers round every sleep up to a whole millisecond (epoll's
timeout unit), which would add up to 1 ms of invented latency to every message
at rates where a durable append takes a few hundred microseconds. So the pacer
sleeps on a Linux timerfd armed at the absolute intended time on
CLOCK_MONOTONIC (nanosecond resolution, woken by the kernel's hrtimer), and
`time.monotonic_ns()` reads the same clock in every process on the host, which
is what lets a consumer process measure end-to-end latency from a producer
process's intended send time.

`Clock` and `Pacer` are protocols so that tests can run the load models on
virtual time.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import time
from dataclasses import dataclass
from typing import Final, Protocol

_CLOCK_MONOTONIC: Final = 1
_TFD_NONBLOCK: Final = os.O_NONBLOCK
_TFD_CLOEXEC: Final = os.O_CLOEXEC
_TFD_TIMER_ABSTIME: Final = 1


class Clock(Protocol):
    def now_ns(self) -> int: ...


class Pacer(Protocol):
    async def sleep_until(self, deadline_ns: int) -> None:
        """Return at or (as little as possible) after `deadline_ns` on the clock."""
        ...

    def close(self) -> None: ...


class MonotonicClock:
    """CLOCK_MONOTONIC in nanoseconds: shared by every process on the host."""

    def now_ns(self) -> int:
        return time.monotonic_ns()


@dataclass(frozen=True, slots=True)
class Schedule:
    """Intended send times of an open-loop sender: `start_ns + k * interval_ns`."""

    start_ns: int
    interval_ns: int

    def __post_init__(self) -> None:
        if self.interval_ns <= 0:
            raise ValueError(f"interval_ns must be positive, got {self.interval_ns}")

    def intended_ns(self, k: int) -> int:
        return self.start_ns + k * self.interval_ns

    @classmethod
    def for_rate(cls, start_ns: int, ops_per_s: float) -> Schedule:
        if ops_per_s <= 0:
            raise ValueError(f"the rate must be positive, got {ops_per_s}")
        return cls(start_ns, max(1, round(1e9 / ops_per_s)))


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_libc = ctypes.CDLL(None, use_errno=True)


class TimerfdPacer:
    """Sleeps on a timerfd armed at an absolute CLOCK_MONOTONIC time."""

    def __init__(self) -> None:
        fd = _libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self._fd: int = fd
        self._waiter: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def sleep_until(self, deadline_ns: int) -> None:
        if time.monotonic_ns() >= deadline_ns:
            return
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            loop.add_reader(self._fd, self._on_ready)
        spec = _Itimerspec()
        spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(deadline_ns, 1_000_000_000)
        if _libc.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
        self._waiter = loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _on_ready(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:
            return
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def close(self) -> None:
        if self._fd < 0:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1


class LoopClock:
    """The running event loop's clock in nanoseconds (virtual time in tests)."""

    def now_ns(self) -> int:
        return round(asyncio.get_running_loop().time() * 1e9)


class LoopPacer:
    """Sleeps with the event loop's timers (millisecond granularity; tests)."""

    async def sleep_until(self, deadline_ns: int) -> None:
        delay_s = (deadline_ns - LoopClock().now_ns()) / 1e9
        if delay_s > 0:
            await asyncio.sleep(delay_s)

    def close(self) -> None:
        pass
