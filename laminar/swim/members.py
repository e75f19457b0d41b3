"""The member table: every member this member knows, and the order it probes them in.

Probe targets come by shuffled round robin (SWIM section 4.3): the table keeps
a probe order, walks it one live member per protocol period, and reshuffles it
at each wrap. A member learned mid-round is inserted at a random position
(swapped with the member there), so every live member is probed within a
bounded time, at most twice the member count in periods, unlike a purely
random choice. Dead and left members are skipped, kept for
`dead_retention_ms` (status shows them; their news keeps circulating), then
forgotten at a wrap.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from laminar.swim.messages import Member, MemberState


@dataclass(slots=True)
class MemberRecord:
    """One member's mutable entry in the table (only the core changes it)."""

    node_id: str
    address: str
    state: MemberState
    incarnation: int
    weight: float
    state_change_ms: int

    def snapshot(self) -> Member:
        return Member(self.node_id, self.address, self.state, self.incarnation, self.weight)


class MemberTable:
    """Records by node id, the probe order, and the count of live members."""

    __slots__ = ("_order", "_probe_index", "_records", "_rng", "live_count", "self_id")

    def __init__(self, me: MemberRecord, rng: random.Random) -> None:
        self.self_id = me.node_id
        self._rng = rng
        self._records: dict[str, MemberRecord] = {me.node_id: me}
        self._order: list[str] = [me.node_id]
        self._probe_index = 0
        self.live_count = 1 if me.state.is_live else 0
        """Alive and suspect members, this one included: the `n` of every formula."""

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[MemberRecord]:
        return iter(self._records.values())

    def get(self, node_id: str) -> MemberRecord | None:
        return self._records.get(node_id)

    def add(self, record: MemberRecord) -> None:
        """A member not known before, at a random place in the probe order."""
        if record.node_id in self._records:
            raise KeyError(f"member {record.node_id} is already in the table")
        self._records[record.node_id] = record
        self._order.append(record.node_id)
        last = len(self._order) - 1
        offset = self._rng.randrange(last + 1)
        self._order[offset], self._order[last] = self._order[last], self._order[offset]
        if record.state.is_live:
            self.live_count += 1

    def set_state(self, record: MemberRecord, state: MemberState, now_ms: int) -> None:
        """Move `record` to `state`, keeping `live_count` true."""
        if record.state.is_live != state.is_live:
            self.live_count += 1 if state.is_live else -1
        record.state = state
        record.state_change_ms = now_ms

    def next_probe_target(self, now_ms: int, retention_ms: int) -> MemberRecord | None:
        """The next live member other than this one, or None when there is none."""
        for _ in range(len(self._order) + 1):
            if self._probe_index >= len(self._order):
                self._reset(now_ms, retention_ms)
            record = self._records[self._order[self._probe_index]]
            self._probe_index += 1
            if record.node_id != self.self_id and record.state.is_live:
                return record
        return None

    def random_members(
        self, count: int, keep: Callable[[MemberRecord], bool]
    ) -> list[MemberRecord]:
        """Up to `count` distinct members chosen at random among those `keep` accepts
        (memberlist's kRandomNodes: exhaustive for small tables, sampled for large)."""
        order = self._order
        size = len(order)
        chosen: list[MemberRecord] = []
        if size < 3 * count:
            candidates = list(order)
            self._rng.shuffle(candidates)
            for node_id in candidates:
                record = self._records[node_id]
                if keep(record):
                    chosen.append(record)
                    if len(chosen) == count:
                        break
            return chosen
        seen: set[str] = set()
        for _ in range(3 * size):
            if len(chosen) == count:
                break
            node_id = order[self._rng.randrange(size)]
            if node_id in seen:
                continue
            seen.add(node_id)
            record = self._records[node_id]
            if keep(record):
                chosen.append(record)
        return chosen

    def _reset(self, now_ms: int, retention_ms: int) -> None:
        """At the end of a round: forget long-dead members, reshuffle the order."""
        expired = [
            r.node_id
            for r in self._records.values()
            if not r.state.is_live
            and r.node_id != self.self_id
            and now_ms - r.state_change_ms > retention_ms
        ]
        for node_id in expired:
            del self._records[node_id]
        if expired:
            self._order = list(self._records)
        self._rng.shuffle(self._order)
        self._probe_index = 0
