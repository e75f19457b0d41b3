"""The placement controller's shell on one shard: moves the groups this shard leads.

Once a second (and when a new membership view arrives) it reads the latest
SWIM view through `Downtime` (when each member went down: the dead grace
runs from it) and the nodes the metadata says are decommissioned, takes the
Raft cores this shard leads, and runs one round of
`laminar.replication.moves.drive` per replication factor (the policy carries
one); the groups in `observed` (the metadata group) keep every other member
as a learner (`PlacementPolicy.observers`). Every decision is the pure
controller's (`laminar.replication.controller`); this only feeds it and keeps
what it said for `/status` and `/metrics`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Final

from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.raft import LEADER, RaftCore
from laminar.replication.controller import NodeStatus, NodeTable, PlacementPolicy, Step
from laminar.replication.downtime import Downtime
from laminar.replication.moves import drive
from laminar.swim import MembershipView

logger = logging.getLogger("laminar.placement")

ROUND_S: Final = 1.0

ReplicationFactorOf = Callable[[int], int | None]
"""A partition id -> its replication factor (None: unknown, left alone)."""


@dataclass
class PlacerState:
    """What the last round said (for status and metrics)."""

    steps_started: int = 0
    steps_refused: int = 0
    moving: dict[int, str] = field(default_factory=dict)
    """Partitions not at their target, and why they wait or what they do now."""
    observing: dict[int, frozenset[str]] = field(default_factory=dict)
    """Observed groups' learners that are there to stay (not moves)."""
    decommissioning: dict[str, int] = field(default_factory=dict)
    """Each decommissioned node: the led groups it is still in (as a voter, or
    a learner that is not an observer): what is left to move off it from here."""


class Placer:
    """Runs the controller over this shard's led groups (see the module docstring)."""

    def __init__(
        self,
        cores: Callable[[], Iterable[tuple[int, RaftCore]]],
        replication_factor_of: ReplicationFactorOf,
        dead_grace_ms: int,
        observed: frozenset[int] = frozenset(),
        decommissioned: Callable[[], frozenset[str]] = frozenset,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._cores = cores
        self._clock = clock
        self._rf_of = replication_factor_of
        self._dead_grace_ms = dead_grace_ms
        self._observed = observed
        self._decommissioned = decommissioned
        self._downtime = Downtime()
        self._view: MembershipView | None = None
        self._wake = asyncio.Event()
        self.state = PlacerState()

    def observe(self, view: MembershipView) -> None:
        """A new membership view: plan again now."""
        self._view = view
        self._wake.set()

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), ROUND_S)
            self._wake.clear()
            try:
                self.round(self._now_ms())
            except Exception:
                logger.exception("placement round failed")

    def _now_ms(self) -> int:
        return int(self._clock.monotonic() * 1000)

    def members_known(self) -> frozenset[str]:
        """Every member of the latest view, down ones too."""
        view = self._view
        return frozenset(m.node_id for m in view.members) if view is not None else frozenset()

    def placed(self, now_ms: int | None = None) -> dict[str, float] | None:
        """The members placement puts replicas on now, with their weights
        (`NodeTable.placed`); None before the first view."""
        now = self._now_ms() if now_ms is None else now_ms
        nodes = self._statuses(now)
        if nodes is None:
            return None
        return NodeTable(nodes, now, self._dead_grace_ms).placed

    def _statuses(self, now_ms: int) -> tuple[NodeStatus, ...] | None:
        view = self._view
        if view is None:
            return None
        decommissioned = self._decommissioned()
        return tuple(
            replace(node, decommissioned=True) if node.node_id in decommissioned else node
            for node in self._downtime.observe(view, now_ms)
        )

    def round(self, now_ms: int) -> list[Step]:
        """One round over the led groups; the steps started."""
        nodes = self._statuses(now_ms)
        if nodes is None:
            return []
        by_policy: dict[tuple[int, bool], dict[int, RaftCore]] = {}
        for pid, core in self._cores():
            if core.role != LEADER:
                continue
            rf = self._rf_of(pid)
            if rf is not None:
                by_policy.setdefault((rf, pid in self._observed), {})[pid] = core
        started: list[Step] = []
        moving: dict[int, str] = {}
        observing: dict[int, frozenset[str]] = {}
        for (rf, observers), cores in by_policy.items():
            policy = PlacementPolicy(rf, dead_grace_ms=self._dead_grace_ms, observers=observers)
            plan, refused = drive(cores, nodes, policy, now_ms)
            if observers:
                for pid, core in cores.items():
                    learners = core.membership.learners
                    observing[pid] = frozenset(learners) - set(plan.targets.get(pid, ()))
            refusals = {(step.pid, step.node) for step, _ in refused}
            for step in plan.steps:
                if (step.pid, step.node) in refusals:
                    continue
                started.append(step)
                moving[step.pid] = f"{step.action.value} {step.node}: {step.reason}"
                logger.info(
                    "partition %d: %s %s (%s)", step.pid, step.action.value, step.node, step.reason
                )
            moving.update(plan.waiting)
            self.state.steps_refused += len(refused)
        self.state.steps_started += len(started)
        self.state.moving = moving
        self.state.observing = observing
        self.state.decommissioning = self._left_to_move(
            [n.node_id for n in nodes if n.decommissioned], by_policy, observing
        )
        return started

    @staticmethod
    def _left_to_move(
        leaving: list[str],
        by_policy: dict[tuple[int, bool], dict[int, RaftCore]],
        observing: dict[int, frozenset[str]],
    ) -> dict[str, int]:
        left = dict.fromkeys(leaving, 0)
        for cores in by_policy.values():
            for pid, core in cores.items():
                staying = observing.get(pid, frozenset())
                for node in core.membership.members:
                    if node in left and node not in staying:
                        left[node] += 1
        return left
