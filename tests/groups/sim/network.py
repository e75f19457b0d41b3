"""The simulated network: each message is delayed (so reordered) or dropped."""

from __future__ import annotations

import heapq
import random
from typing import Any


class SimNetwork:
    def __init__(self, rng: random.Random, drop: float, delay_max_s: float) -> None:
        self._rng = rng
        self.drop = drop
        self.delay_max_s = delay_max_s
        self._queue: list[tuple[float, int, str, Any]] = []
        self._seq = 0

    def send(self, destination: str, message: Any, now: float) -> None:
        if self.drop and self._rng.random() < self.drop:
            return
        self._seq += 1
        arrival = now + self._rng.uniform(0.0, self.delay_max_s)
        heapq.heappush(self._queue, (arrival, self._seq, destination, message))

    def due(self, now: float) -> list[tuple[str, Any]]:
        """(destination, message) of the messages arriving by `now`, in order."""
        out = []
        while self._queue and self._queue[0][0] <= now:
            _, _, destination, message = heapq.heappop(self._queue)
            out.append((destination, message))
        return out

    def calm(self) -> None:
        """No more drops, short delays: the liveness phase."""
        self.drop = 0.0
        self.delay_max_s = min(self.delay_max_s, 0.05)
