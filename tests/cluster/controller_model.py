"""A small model of Raft groups for driving the placement controller.

Each group is its membership, leader and the leader's view of matches; a
step from the controller is checked against the rules a real group would
enforce (one change at a time, `Membership.single_step_to`, a transfer only
to a live voter) and against the controller's own promises (a voter leaves
only once every target is a voter, the leader is never removed, a live
majority of voters is never lost). `settle` is what happens between two
plans: pending changes apply, live learners catch up, a group whose leader
is down elects the lowest live voter if its live voters are a majority.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from laminar.raft.config import Membership
from laminar.replication.controller import (
    Action,
    GroupStatus,
    NodeStatus,
    NodeTable,
    PlacementPolicy,
    Plan,
    Step,
    plan,
)
from laminar.swim.messages import MemberState


class Violation(AssertionError):
    """A step broke a rule; the message says which, on which group."""


@dataclass
class GroupModel:
    pid: int
    voters: set[str]
    learners: set[str] = field(default_factory=set)
    leader: str | None = None
    last_index: int = 100
    match: dict[str, int] = field(default_factory=dict)
    pending: bool = False

    def status(self) -> GroupStatus:
        return GroupStatus(
            self.pid,
            tuple(sorted(self.voters)),
            tuple(sorted(self.learners)),
            self.leader,
            self.last_index,
            dict(self.match),
            self.pending,
        )

    def has_live_majority(self, live: Iterable[str]) -> bool:
        return len(self.voters & set(live)) * 2 > len(self.voters)

    def apply(
        self, step: Step, live: frozenset[str], target: tuple[str, ...], lag_max: int = 0
    ) -> None:
        """Apply `step` as the group's leader would, after checking every rule."""
        where = f"partition {self.pid} {sorted(self.voters)}+{sorted(self.learners)}: {step}"
        if self.leader is None or self.pending:
            raise Violation(f"{where}: a step with no leader or a change pending")
        if step.action is Action.TRANSFER_LEADERSHIP:
            if step.node not in self.voters or step.node not in live:
                raise Violation(f"{where}: transfer to a node that is not a live voter")
            self.leader = step.node
            self.pending = True
            return
        voters, learners = set(self.voters), set(self.learners)
        if step.action is Action.ADD_LEARNER:
            learners.add(step.node)
        elif step.action is Action.PROMOTE_LEARNER:
            if self.last_index - self.match.get(step.node, -(10**9)) > lag_max:
                raise Violation(f"{where}: promoted a learner that has not caught up")
            learners.discard(step.node)
            voters.add(step.node)
        else:
            if step.node == self.leader:
                raise Violation(f"{where}: removed the leader")
            if step.node in voters and not set(target) <= voters:
                raise Violation(f"{where}: removed a voter before every target was a voter")
            voters.discard(step.node)
            learners.discard(step.node)
        why = Membership(tuple(self.voters), tuple(self.learners)).single_step_to(
            Membership(tuple(voters), tuple(learners))
        )
        if why is not None:
            raise Violation(f"{where}: not a single step: {why}")
        had_majority = self.has_live_majority(live)
        self.voters, self.learners = voters, learners
        if had_majority and not self.has_live_majority(live):
            raise Violation(f"{where}: the live voters are no longer a majority")
        self.pending = True

    def settle(self, live: frozenset[str]) -> None:
        self.pending = False
        self.match = {n: m for n, m in self.match.items() if n in self.voters | self.learners}
        for node in self.voters | self.learners:
            if node in live:
                self.match[node] = self.last_index
        if self.leader not in live or self.leader not in self.voters:
            alive = sorted(self.voters & live)
            self.leader = alive[0] if alive and self.has_live_majority(live) else None


class ClusterModel:
    """Members over time plus groups; `run` plans and applies until nothing moves."""

    def __init__(self, nodes: dict[str, float], pids: Iterable[int], policy: PlacementPolicy):
        self.policy = policy
        self.now_ms = 0
        self.nodes = {n: NodeStatus(n, w) for n, w in nodes.items()}
        table = self.table()
        self.groups = {}
        for pid in pids:
            target = table.targets(pid, policy.replication_factor)
            self.groups[pid] = GroupModel(pid, set(target), leader=target[0])
        self.settle()

    def table(self) -> NodeTable:
        return NodeTable(self.nodes.values(), self.now_ms, self.policy.dead_grace_ms)

    def live(self) -> frozenset[str]:
        return self.table().live

    def kill(self, node: str) -> None:
        self.nodes[node] = NodeStatus(
            node, self.nodes[node].weight, MemberState.DEAD, down_since_ms=self.now_ms
        )

    def leave(self, node: str) -> None:
        self.nodes[node] = NodeStatus(
            node, self.nodes[node].weight, MemberState.LEFT, down_since_ms=self.now_ms
        )

    def join(self, node: str, weight: float = 1.0) -> None:
        self.nodes[node] = NodeStatus(node, weight)

    def decommission(self, node: str) -> None:
        """The cluster decides `node` leaves for good (whatever its state now)."""
        self.nodes[node] = replace(self.nodes[node], decommissioned=True)

    def survives_without(self, node: str) -> bool:
        """Every group keeps a live majority of its voters if `node` goes down."""
        live = self.live() - {node}
        return all(g.has_live_majority(live) for g in self.groups.values())

    def plan(self) -> Plan:
        statuses = [g.status() for g in self.groups.values()]
        return plan(self.nodes.values(), statuses, self.policy, self.now_ms)

    def settle(self) -> None:
        live = self.live()
        for group in self.groups.values():
            group.settle(live)

    def round(self) -> Plan:
        """One plan, every step applied, then one settle."""
        result = self.plan()
        live = self.live()
        touched: set[int] = set()
        for step in result.steps:
            if step.pid in touched:
                raise Violation(f"two steps for partition {step.pid} in one plan")
            touched.add(step.pid)
            self.groups[step.pid].apply(
                step, live, result.targets[step.pid], self.policy.catch_up_lag_max
            )
        self.settle()
        return result

    def run(self, rounds_max: int = 5000, tick_ms: int = 1000) -> int:
        """Rounds until a plan has no steps and no grace is running; the count."""
        for rounds in range(rounds_max):
            result = self.round()
            if not result.steps and result.recheck_at_ms is None:
                return rounds
            self.now_ms += tick_ms
        raise AssertionError(f"no fixpoint after {rounds_max} rounds")

    def off_target(self) -> list[int]:
        """Partitions not at their target: voters == targets, no learners."""
        table = self.table()
        return [
            pid
            for pid, g in self.groups.items()
            if g.learners or g.voters != set(table.targets(pid, self.policy.replication_factor))
        ]
