"""A simulated node: one RaftCore over storage that survives crashes.

What the application keeps durably (its applied index and the memberships it
applied) lives here too, so a restart can pass `RaftConfig(applied=N)` with
the membership in effect at N, as a real shell would.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from laminar.raft import Entry, Membership, MemoryStorage, RaftConfig, RaftCore

from .params import Params


class SimStorage(MemoryStorage):
    """MemoryStorage that reports every append (the log-matching checker
    keeps digests of each node's persisted log)."""

    def __init__(self, on_append: Callable[[SimStorage, Sequence[Entry]], None]) -> None:
        super().__init__()
        self._on_append = on_append

    def append(self, entries: Sequence[Entry]) -> None:
        super().append(entries)
        if entries:
            self._on_append(self, entries)


class SimNode:
    def __init__(
        self,
        node_id: str,
        membership: Membership,
        tick_rate: float,
        on_append: Callable[[str, SimStorage, Sequence[Entry]], None],
    ) -> None:
        self.id = node_id
        self.storage = SimStorage(lambda storage, entries: on_append(node_id, storage, entries))
        self.core: RaftCore | None = None
        self.incarnation = 0
        self.tick_rate = tick_rate
        self.tick_credit = 0.0
        self.applied = 0  # the application's durable applied index
        self.memberships: list[tuple[int, Membership]] = [(0, membership)]

    @property
    def alive(self) -> bool:
        return self.core is not None

    def membership_at(self, index: int) -> Membership:
        return [m for at, m in self.memberships if at <= index][-1]

    def start(self, params: Params, rng: random.Random, *, use_applied: bool) -> None:
        """Build a core over what this node persisted (a restart if it ran before)."""
        first = self.storage.first_index()
        applied = max(self.applied, first - 1) if use_applied else first - 1
        self.applied = applied
        # Membership changes after `applied` will be applied again.
        self.memberships = [(at, m) for at, m in self.memberships if at <= applied] or [
            self.memberships[0]
        ]
        membership = self.membership_at(applied)
        config = RaftConfig(
            node_id=self.id,
            voters=membership.voters,
            learners=membership.learners,
            election_ticks=params.election_ticks,
            heartbeat_ticks=params.heartbeat_ticks,
            pre_vote=params.pre_vote,
            check_quorum=params.check_quorum,
            applied=applied if use_applied else None,
            max_inflight=params.max_inflight,
            max_append_bytes=params.max_append_bytes,
            term_jump_max=params.term_jump_max,
        )
        self.core = RaftCore(config, self.storage, random.Random(rng.random()))
        self.incarnation += 1
        self.tick_credit = 0.0

    def crash(self) -> None:
        self.core = None
