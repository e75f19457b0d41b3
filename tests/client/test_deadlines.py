"""`Deadlines`: one timer per connection expires exactly the requests that are due.

Driven by a fake loop whose clock the test moves, so nothing depends on how
busy the machine is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from laminar.client.aio_connection import Deadlines


class _Timer:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    """`time()` and `call_at()`, with time moved by `advance()`."""

    def __init__(self) -> None:
        self.now = 100.0
        self.timers: list[_Timer] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(when, callback)
        self.timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        self.now += seconds
        while True:
            due = [t for t in self.timers if not t.cancelled and t.when <= self.now]
            if not due:
                return
            for timer in due:
                self.timers.remove(timer)
                timer.callback()

    @property
    def armed(self) -> int:
        return sum(1 for t in self.timers if not t.cancelled)


def _deadlines() -> tuple[FakeLoop, Deadlines, list[tuple[int, float]]]:
    loop = FakeLoop()
    expired: list[tuple[int, float]] = []
    fake: Any = loop
    return loop, Deadlines(fake, lambda c, t: expired.append((c, t))), expired


def test_only_unanswered_requests_expire_in_deadline_order() -> None:
    loop, deadlines, expired = _deadlines()
    deadlines.add(1, 5.0)
    deadlines.add(2, 30.0)  # a long-poll: not due yet
    deadlines.add(3, 5.0)
    deadlines.add(4, 2.0)
    deadlines.add(5, 5.0)
    deadlines.discard(3, 5.0)  # answered in time
    loop.advance(4.0)
    assert expired == [(4, 2.0)]
    loop.advance(1.0)
    assert expired == [(4, 2.0), (1, 5.0), (5, 5.0)]
    deadlines.discard(1, 5.0)  # an answer after expiry changes nothing
    loop.advance(25.0)
    assert expired[-1] == (2, 30.0) and len(expired) == 4
    assert loop.armed == 0


def test_an_answered_head_does_not_hide_a_later_deadline() -> None:
    """The timer is armed for the first request; once that is answered, the timer
    fires early, finds nothing due, and re-arms for the next one."""
    loop, deadlines, expired = _deadlines()
    deadlines.add(1, 2.0)
    loop.advance(1.0)
    deadlines.add(2, 2.0)
    deadlines.discard(1, 2.0)
    loop.advance(1.0)  # the timer set for request 1 fires: nothing due, re-armed
    assert expired == [] and loop.armed == 1
    loop.advance(1.0)
    assert expired == [(2, 2.0)]


def test_one_timer_serves_many_requests_and_close_stops_it() -> None:
    loop, deadlines, expired = _deadlines()
    for corr in range(1000):
        deadlines.add(corr, 30.0)
    assert loop.armed == 1  # not a timer per request
    for corr in range(999):
        deadlines.discard(corr, 30.0)
    deadlines.close()
    loop.advance(60.0)
    assert expired == [] and loop.armed == 0
