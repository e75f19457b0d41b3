"""The simulated network: every message is delayed, may be dropped or
duplicated, and arrives in delay order (so reordered). Partitions block
directed links, so a cut may be one-way."""

from __future__ import annotations

import heapq
import random

from laminar.raft import Message


class SimNetwork:
    def __init__(self, rng: random.Random, drop: float, duplicate: float, delay_max: int) -> None:
        self._rng = rng
        self.drop = drop
        self.duplicate = duplicate
        self.delay_max = delay_max
        self._queue: list[tuple[int, int, Message]] = []
        self._seq = 0
        self.blocked: set[tuple[str, str]] = set()

    def send(self, message: Message, now: int) -> None:
        rng = self._rng
        if (message.src, message.dst) in self.blocked:
            return
        if self.drop and rng.random() < self.drop:
            return
        copies = 2 if self.duplicate and rng.random() < self.duplicate else 1
        for _ in range(copies):
            self._seq += 1
            arrival = now + 1 + rng.randrange(self.delay_max)
            heapq.heappush(self._queue, (arrival, self._seq, message))

    def due(self, now: int) -> list[Message]:
        """Messages arriving by `now`, in arrival order (cut links drop them)."""
        queue = self._queue
        out = []
        while queue and queue[0][0] <= now:
            message = heapq.heappop(queue)[2]
            if (message.src, message.dst) not in self.blocked:
                out.append(message)
        return out

    def partition(self, nodes: list[str]) -> None:
        """Split `nodes` into two random sides that cannot talk."""
        rng = self._rng
        side = set(rng.sample(nodes, rng.randint(1, len(nodes) // 2)))
        for a in nodes:
            for b in nodes:
                if (a in side) != (b in side):
                    self.blocked.add((a, b))

    def cut_one_way(self, src: str, dst: str) -> None:
        self.blocked.add((src, dst))

    def heal(self) -> None:
        self.blocked.clear()

    def calm(self) -> None:
        """No more loss or duplication (the liveness phase); delays stay."""
        self.drop = 0.0
        self.duplicate = 0.0
