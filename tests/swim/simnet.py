"""The simulated network: loss, delay, partitions. One job: decide each packet's fate.

Every decision draws from the network's own `random.Random`, so a seed replays
the same losses and delays exactly.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NetworkProfile:
    """Loss probability and one-way delay (uniform in [delay_min_ms, delay_max_ms])."""

    loss: float = 0.0
    delay_min_ms: int = 1
    delay_max_ms: int = 5


class SimNetwork:
    """Decides, for each packet, whether it arrives and after how long."""

    def __init__(self, rng: random.Random, profile: NetworkProfile | None = None) -> None:
        self._rng = rng
        self.profile = profile if profile is not None else NetworkProfile()
        self._group_of: dict[int, int] | None = None
        self.sent = 0
        self.lost = 0
        self.cut = 0

    def partition(self, groups: Iterable[Iterable[int]]) -> None:
        """Only members of the same group can talk until `heal`."""
        self._group_of = {member: g for g, group in enumerate(groups) for member in group}

    def heal(self) -> None:
        self._group_of = None

    def set_profile(self, profile: NetworkProfile) -> None:
        self.profile = profile

    def delay_ms(self, source: int, destination: int) -> int | None:
        """The packet's delay, or None when it is lost or cut off."""
        self.sent += 1
        groups = self._group_of
        if groups is not None and groups.get(source, -1) != groups.get(destination, -2):
            self.cut += 1
            return None
        profile = self.profile
        if profile.loss and self._rng.random() < profile.loss:
            self.lost += 1
            return None
        return self._rng.randint(profile.delay_min_ms, profile.delay_max_ms)
