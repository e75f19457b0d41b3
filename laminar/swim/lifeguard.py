"""Lifeguard's two timers (Dadgar, Phillips, Currey, "Lifeguard: Local Health
Awareness for More Accurate Failure Detection", 2018; hashicorp/memberlist).

SWIM assumes the member running a probe is healthy. When it is not (CPU
starved, its own packets late or lost), it blames others: it suspects healthy
members, and its suspicions time out before their refutations reach it.
Lifeguard answers with:

- `Awareness` (LHA-Probe): a score from 0 to `max_multiplier - 1` that rises
  when this member shows signs of its own trouble (a probe failed although the
  helpers asked to probe indirectly did not answer with nacks; it had to refute
  a suspicion of itself; its own timer fired late) and falls with every probe
  that succeeds. Probe interval and probe timeout are multiplied by
  `score + 1`: an unhealthy member probes less and waits longer.
- `Suspicion` (LHA-Suspicion): a suspicion starts at the maximum timeout and
  shrinks towards the minimum, logarithmically, as independent members confirm
  it. A lone, possibly unhealthy accuser waits long (giving the suspect time to
  refute); a failure many members see is declared quickly.

The third part, the buddy system (a probe of a suspect member carries the
suspicion so that it can refute at once), lives in the core's probe.
"""

from __future__ import annotations

import math


class Awareness:
    """This member's health score; with `enabled` False it stays 0 (plain SWIM)."""

    __slots__ = ("enabled", "max_multiplier", "score")

    def __init__(self, max_multiplier: int, enabled: bool = True) -> None:
        self.max_multiplier = max_multiplier
        self.enabled = enabled
        self.score = 0

    def apply(self, delta: int) -> None:
        """Add `delta` to the score, held inside `0..max_multiplier - 1`."""
        if self.enabled:
            self.score = min(max(self.score + delta, 0), self.max_multiplier - 1)

    def scale(self, timeout_ms: int) -> int:
        """`timeout_ms` stretched by this member's ill health."""
        return timeout_ms * (self.score + 1)


def suspicion_timeout_for(confirmations: int, expected: int, min_ms: int, max_ms: int) -> int:
    """Total suspicion timeout after `confirmations` of `expected` independent
    confirmations: `max - log(c + 1) / log(k + 1) * (max - min)`, never below `min`
    (memberlist's `remainingSuspicionTime`, before subtracting the elapsed time)."""
    if expected < 1:
        return min_ms
    fraction = math.log(confirmations + 1) / math.log(expected + 1)
    return max(min_ms, math.floor(max_ms - fraction * (max_ms - min_ms)))


class Suspicion:
    """The timer of one suspected member: when it runs out, the member is dead.

    With `dynamic` False the timeout is fixed at `min_ms` (SWIM as before Lifeguard).
    """

    __slots__ = (
        "_confirmed_by",
        "confirmations",
        "deadline_ms",
        "expected",
        "max_ms",
        "min_ms",
        "start_ms",
    )

    def __init__(
        self,
        accuser: str,
        expected: int,
        min_ms: int,
        max_ms: int,
        start_ms: int,
        dynamic: bool = True,
    ) -> None:
        self.expected = expected if dynamic else 0
        self.min_ms = min_ms
        self.max_ms = max_ms
        self.confirmations = 0
        # The first accuser never counts as a confirmation: our own suspicion
        # may come back to us through gossip.
        self._confirmed_by = {accuser}
        self.start_ms = start_ms
        self.deadline_ms = start_ms + suspicion_timeout_for(0, self.expected, min_ms, max_ms)

    def confirm(self, accuser: str) -> bool:
        """Count `accuser`'s independent suspicion; True when it was news (and the
        suspicion should be gossiped on)."""
        if self.confirmations >= self.expected or accuser in self._confirmed_by:
            return False
        self._confirmed_by.add(accuser)
        self.confirmations += 1
        timeout = suspicion_timeout_for(self.confirmations, self.expected, self.min_ms, self.max_ms)
        self.deadline_ms = self.start_ms + timeout
        return True
