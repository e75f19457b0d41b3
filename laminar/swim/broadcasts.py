"""The piggyback queue: which updates ride on the next packet, and for how long.

Infection-style dissemination (SWIM section 4.1) with memberlist's bounds
(`TransmitLimitedQueue`):

- One pending update per member: news about a member replaces older news about
  it (a refutation replaces the suspicion it refutes), so the queue never holds
  more entries than there are members.
- Each update is sent at most `retransmit_mult * ceil(log10(n + 1))` times,
  then dropped: enough for an epidemic to reach every member with high
  probability, and bounded so the queue drains.
- The least-sent updates go first (new news spreads first), the newest first
  among equals; an update too large for what is left of the packet is skipped
  for a smaller one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from laminar.swim.messages import Update

SKIPS_MAX = 32


@dataclass(slots=True)
class _Pending:
    update: Update
    size: int
    transmits: int


class BroadcastQueue:
    """Pending updates, bucketed by how often each has been sent."""

    __slots__ = ("_buckets", "_by_node", "_size_of")

    def __init__(self, size_of: Callable[[Update], int]) -> None:
        self._size_of = size_of
        self._by_node: dict[str, _Pending] = {}
        # transmits -> node id -> pending, in insertion order (newest last).
        self._buckets: dict[int, dict[str, _Pending]] = {}

    def __len__(self) -> int:
        return len(self._by_node)

    def queue(self, update: Update) -> None:
        """Send `update` on the next packets, replacing any pending news of its member."""
        self.drop(update.node_id)
        pending = _Pending(update, self._size_of(update), 0)
        self._by_node[update.node_id] = pending
        self._buckets.setdefault(0, {})[update.node_id] = pending

    def drop(self, node_id: str) -> None:
        """Forget pending news about `node_id`."""
        old = self._by_node.pop(node_id, None)
        if old is not None:
            self._unbucket(node_id, old.transmits)

    def pending(self, node_id: str) -> Update | None:
        """The update waiting to be sent about `node_id`, if any."""
        entry = self._by_node.get(node_id)
        return entry.update if entry is not None else None

    def take(self, budget_bytes: int, transmit_limit: int) -> list[tuple[Update, int]]:
        """Updates (with their sizes) whose sizes add up to at most `budget_bytes`,
        least sent first; each counts one more transmission and is dropped at
        `transmit_limit`."""
        chosen: list[_Pending] = []
        skips = 0
        for transmits in sorted(self._buckets):
            for pending in reversed(self._buckets[transmits].values()):
                if pending.size <= budget_bytes:
                    chosen.append(pending)
                    budget_bytes -= pending.size
                else:
                    skips += 1
                    if skips > SKIPS_MAX:
                        break
            if skips > SKIPS_MAX:
                break
        for pending in chosen:
            node_id = pending.update.node_id
            self._unbucket(node_id, pending.transmits)
            pending.transmits += 1
            if pending.transmits >= transmit_limit:
                del self._by_node[node_id]
            else:
                self._buckets.setdefault(pending.transmits, {})[node_id] = pending
        return [(p.update, p.size) for p in chosen]

    def _unbucket(self, node_id: str, transmits: int) -> None:
        bucket = self._buckets[transmits]
        del bucket[node_id]
        if not bucket:
            del self._buckets[transmits]
