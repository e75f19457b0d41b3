"""Waiting on something observable instead of sleeping a fixed time.

A fixed sleep is either too short on a loaded machine (a positive check
flakes) or proves nothing (a "nothing happened" check passes before the thing
could have happened). `wait_until` polls a check until it returns something
truthy and fails naming what it waited for and what it saw last (`what` may
be a function, called only then, to describe the state of things at failure).

    leader = wait_until(lambda: offsets(node, pid).leader, "a leader of 0")
    await wait_until_async(lambda: group.committed >= 5, "five committed")

The sync and the async forms share one driver (`_Poll`); the async one sleeps
on the running loop, so the code under test keeps running meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

What = str | Callable[[], str]
"""What a wait is for, or a function describing it (with the state of things) on failure."""

TIMEOUT_S = 60.0
"""Long: a timeout is a failure, and on a shared 2-core machine things are slow."""
POLL_S_MIN = 0.005
POLL_S_MAX = 0.1
"""Polls start fast (most waits are short) and back off to this."""


class _Poll:
    """One wait's state: the deadline, the next pause, the last thing seen."""

    def __init__(self, check: Callable[[], Any], what: What, timeout_s: float) -> None:
        self.check, self.what, self.timeout_s = check, what, timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.pause_s = POLL_S_MIN
        self.last: object = None

    def attempt(self) -> Any:
        """The check's value; an exception counts as not yet (a node still starting)."""
        try:
            self.last = self.check()
        except Exception as exc:
            self.last = exc
            return None
        return self.last

    def next_pause_s(self) -> float:
        """How long to sleep before the next attempt; raises once past the deadline."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            seen = (
                f"{type(self.last).__name__}: {self.last}"
                if isinstance(self.last, Exception)
                else repr(self.last)
            )
            what = self.what if isinstance(self.what, str) else self.what()
            raise AssertionError(
                f"timed out after {self.timeout_s:g} s waiting for {what} (last: {seen})"
            )
        pause = min(self.pause_s, left)
        self.pause_s = min(self.pause_s * 2, POLL_S_MAX)
        return pause


def wait_until(check: Callable[[], Any], what: What, timeout_s: float = TIMEOUT_S) -> Any:
    """Poll `check` until it returns something truthy, and return that; on timeout
    raise AssertionError naming `what` and the last value or exception."""
    poll = _Poll(check, what, timeout_s)
    while not (value := poll.attempt()):
        time.sleep(poll.next_pause_s())
    return value


async def wait_until_async(
    check: Callable[[], Any], what: What, timeout_s: float = TIMEOUT_S
) -> Any:
    """`wait_until` for a test on an event loop: sleeps on the loop between polls."""
    poll = _Poll(check, what, timeout_s)
    while not (value := poll.attempt()):
        await asyncio.sleep(poll.next_pause_s())
    return value
