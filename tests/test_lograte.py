"""The rate-limited log: a storm of one kind costs a bounded number of lines."""

from __future__ import annotations

import logging

import pytest

from laminar.lograte import RateLimitedLog


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_storm_writes_at_most_the_rate_then_says_how_many_were_suppressed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    log = RateLimitedLog(logging.getLogger("t.lograte"), lines=3, interval_s=10, clock=clock)
    with caplog.at_level(logging.WARNING, "t.lograte"):
        written = [log.warning("accept", "accept failed: %s", n) for n in range(1000)]
        assert written.count(True) == 3
        assert [r.getMessage() for r in caplog.records] == [
            "accept failed: 0",
            "accept failed: 1",
            "accept failed: 2",
        ]
        caplog.clear()
        clock.now = 10.5
        assert log.warning("accept", "accept failed: %s", "later")
        assert [r.getMessage() for r in caplog.records] == [
            "suppressed 997 similar lines (accept) in 10 s",
            "accept failed: later",
        ]


def test_kinds_are_limited_separately(caplog: pytest.LogCaptureFixture) -> None:
    log = RateLimitedLog(logging.getLogger("t.lograte"), lines=1, interval_s=10, clock=Clock())
    with caplog.at_level(logging.WARNING, "t.lograte"):
        for _ in range(5):
            log.warning("accept", "accept failed")
            log.warning("handshake", "handshake refused")
    assert [r.getMessage() for r in caplog.records] == ["accept failed", "handshake refused"]


def test_a_quiet_kind_says_nothing_about_suppression(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    log = RateLimitedLog(logging.getLogger("t.lograte"), lines=2, interval_s=1, clock=clock)
    with caplog.at_level(logging.WARNING, "t.lograte"):
        log.warning("k", "one")
        clock.now = 5
        log.warning("k", "two")
    assert [r.getMessage() for r in caplog.records] == ["one", "two"]
