"""Log lines an attacker (or a storm) can provoke, at a bounded rate.

Why. Some lines are written once per event a remote party causes: a failed
accept (EMFILE comes 20 times a second), a refused handshake, a refused
channel connection. Unthrottled, a few kilobytes of input wrote 7,941 lines
in 20 s: the disk fills and the operator's real lines drown.

Rule: per kind, at most `lines` lines in each `interval_s`; past that, lines
of the kind are counted, not written, and the first line of the kind in a
later interval is preceded by one "suppressed K similar lines" line. So a
storm costs at most `lines + 1` lines per kind and interval, and nothing is
hidden silently. Kinds are fixed strings of the caller, never taken from
input (each kind is remembered). The clock is injected (tests drive it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

DEFAULT_LINES: Final = 5
DEFAULT_INTERVAL_S: Final = 10.0


class _Kind:
    __slots__ = ("started", "suppressed", "written")

    def __init__(self, started: float) -> None:
        self.started = started
        self.written = 0
        self.suppressed = 0


class RateLimitedLog:
    """A logger's lines, grouped by kind, each kind at most `lines` per `interval_s`."""

    def __init__(
        self,
        logger: logging.Logger,
        lines: int = DEFAULT_LINES,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if lines < 1 or not interval_s > 0:
            raise ValueError(f"need lines >= 1 and interval_s > 0, got {lines}, {interval_s}")
        self.logger = logger
        self.lines = lines
        self.interval_s = interval_s
        self._clock = clock
        self._kinds: dict[str, _Kind] = {}

    def log(self, level: int, kind: str, msg: str, *args: object) -> bool:
        """Write `msg % args` at `level` unless `kind` is over its rate; True if written."""
        now = self._clock()
        state = self._kinds.get(kind)
        if state is None:
            state = self._kinds[kind] = _Kind(now)
        elif now - state.started >= self.interval_s:
            if state.suppressed:
                self.logger.log(
                    level,
                    "suppressed %d similar lines (%s) in %.0f s",
                    state.suppressed,
                    kind,
                    now - state.started,
                )
            state.started, state.written, state.suppressed = now, 0, 0
        if state.written >= self.lines:
            state.suppressed += 1
            return False
        state.written += 1
        self.logger.log(level, msg, *args)
        return True

    def warning(self, kind: str, msg: str, *args: object) -> bool:
        return self.log(logging.WARNING, kind, msg, *args)
