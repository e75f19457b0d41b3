"""The partition placement controller: the next safe membership step of each partition.

A partition's replicas belong on the top `replication_factor` members by
weighted rendezvous (`laminar.placement.replica_nodes`). When members join,
leave, die or change weight, some partitions' top sets change; this module
says, for each such partition, the one Raft membership change to make next.
It is a pure function of its inputs (members, groups, policy, the time): no
clock, no socket, no Raft core. The shell feeds it what it knows, applies the
steps through `RaftCore.add_learner` / `promote_learner` /
`transfer_leadership` / `remove_node`, and asks again when something changed.

A move is a sequence of single steps, each one safe on its own:

1. add the new replica as a learner (it receives the log, does not vote);
2. promote it once its match is within `catch_up_lag_max` of the leader's
   last index (a lagging voter would slow every commit);
3. if the leader itself must go, transfer leadership to a target voter;
4. remove a voter that left the top set, but only once every target is a
   voter, and only if the voters left still have a live majority.

Learners that are no longer targets are removed first (they do not vote, so
that is always safe).

*Observers* (`PlacementPolicy.observers`, the metadata group's policy): every
live member outside the voter targets is kept as a learner for good, so every
node of a cluster of any size receives the log without voting on it (Kafka's
KRaft brokers observe the metadata log the same way). An observer that joins
the top set is promoted; a voter that drops out is removed and added back as
an observer (Raft changes one member at a time and has no demotion). Observers
are added last, once the voters are at their target, and are not moves.

A group changes one thing at a time: nothing is proposed while a change or
a leader transfer is under way (`change_pending`).

Who counts as what:

- *live* (for quorum checks): alive or suspect in the view;
- *placed* (the rendezvous candidates): live members, plus members that
  stopped (dead, or left: SIGTERM announces that) within `dead_grace_ms`, so
  a node that restarts within the grace period keeps its partitions and
  catches up instead of triggering a full copy. Restart is not departure:
  a member leaves for good only when the grace runs out or when the cluster
  decommissions it (`NodeStatus.decommissioned`, a decision recorded in the
  metadata log): it is then nobody's target, so its replicas move away
  first, one safe step at a time, like any other move; while it is live it
  still counts for quorums and still observes the groups that keep
  observers.

Moves are rate-limited: a move is in flight while its group has a learner
(the copying phase); at most `moves_in_flight_max` of them, and at most
`moves_per_node_max` per node (counting the learner's node and the leader's,
the two ends of the copy). The limits apply to the groups one controller sees,
and to starting moves: an election during a move can put its leader's node
over the per-node limit until the move ends.
When new moves must wait, partitions with the fewest live voters go first.
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from laminar.placement import replica_nodes
from laminar.raft.config import Membership
from laminar.swim.messages import MemberState

DEAD_GRACE_MS_DEFAULT: Final = 30_000


class Action(enum.Enum):
    """One Raft membership step (the names of `RaftCore`'s methods)."""

    ADD_LEARNER = "add_learner"
    PROMOTE_LEARNER = "promote_learner"
    TRANSFER_LEADERSHIP = "transfer_leadership"
    REMOVE_NODE = "remove_node"


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """One member as the controller needs it; `down_since_ms` is when it was
    first seen dead or left (required for those: the grace runs from it);
    `decommissioned`: the cluster decided it leaves for good."""

    node_id: str
    weight: float = 1.0
    state: MemberState = MemberState.ALIVE
    down_since_ms: int | None = None
    decommissioned: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise ValueError(f"node {self.node_id!r}: weight must be finite and > 0")
        if not self.state.is_live and self.down_since_ms is None:
            raise ValueError(
                f"node {self.node_id!r} is {self.state.label}: down_since_ms is required"
            )


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """One partition's Raft group as its leader sees it.

    `match` is the leader's last known match index of members (learners at
    least); a learner without one has not caught up as far as anyone knows.
    `change_pending`: a membership change is proposed but not applied yet, or
    a leadership transfer is under way."""

    pid: int
    voters: tuple[str, ...]
    learners: tuple[str, ...] = ()
    leader: str | None = None
    last_index: int = 0
    match: Mapping[str, int] = field(default_factory=dict)
    change_pending: bool = False

    def __post_init__(self) -> None:
        Membership(self.voters, self.learners)  # ValueError on an impossible membership
        if self.leader is not None and self.leader not in self.voters:
            raise ValueError(f"partition {self.pid}: leader {self.leader!r} is not a voter")


@dataclass(frozen=True, slots=True)
class PlacementPolicy:
    replication_factor: int
    dead_grace_ms: int = DEAD_GRACE_MS_DEFAULT
    moves_in_flight_max: int = 8
    moves_per_node_max: int = 2
    catch_up_lag_max: int = 64
    """A learner within this many entries of the leader's last index has caught up."""
    observers: bool = False
    """Keep every other placed member as a learner (see the module docstring)."""

    def __post_init__(self) -> None:
        if self.replication_factor < 1:
            raise ValueError("replication_factor must be >= 1")
        for name in ("dead_grace_ms", "catch_up_lag_max"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        for name in ("moves_in_flight_max", "moves_per_node_max"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")


@dataclass(frozen=True, slots=True)
class Step:
    """Apply `action(node)` on `pid`'s leader; `reason` is for logs and status."""

    pid: int
    action: Action
    node: str
    reason: str


@dataclass(frozen=True, slots=True)
class Plan:
    """The steps to take now, why the other misplaced partitions wait, each
    partition's target replicas (best first), and when to plan again at the
    latest (a dead member's grace ends; None: only when something changes)."""

    steps: tuple[Step, ...]
    waiting: Mapping[int, str]
    targets: Mapping[int, tuple[str, ...]]
    recheck_at_ms: int | None


@dataclass(frozen=True, slots=True)
class Wait:
    """No step for this group now, and why (shown in status)."""

    reason: str


class NodeTable:
    """Who is live, who is placed and who is leaving at one moment (see the
    module docstring)."""

    def __init__(self, nodes: Iterable[NodeStatus], now_ms: int, dead_grace_ms: int) -> None:
        self.placed: dict[str, float] = {}
        live: set[str] = set()
        leaving: set[str] = set()
        ends: list[int] = []
        seen: set[str] = set()
        for node in nodes:
            if node.node_id in seen:
                raise ValueError(f"node {node.node_id!r} is listed twice")
            seen.add(node.node_id)
            if node.state.is_live:
                live.add(node.node_id)
                if node.decommissioned:
                    leaving.add(node.node_id)
                else:
                    self.placed[node.node_id] = node.weight
            elif not node.decommissioned:  # stopped (dead or left): placed within the grace
                assert node.down_since_ms is not None  # checked by NodeStatus
                grace_end = node.down_since_ms + dead_grace_ms
                if now_ms < grace_end:
                    self.placed[node.node_id] = node.weight
                    ends.append(grace_end)
        self.live = frozenset(live)
        self.leaving = frozenset(leaving)
        """Decommissioned members still live: nobody's target, still observers."""
        self.grace_ends_ms = min(ends) if ends else None

    def targets(self, pid: int, replication_factor: int) -> tuple[str, ...]:
        return tuple(replica_nodes(pid, self.placed, replication_factor))


def plan(
    nodes: Iterable[NodeStatus],
    groups: Iterable[GroupStatus],
    policy: PlacementPolicy,
    now_ms: int,
) -> Plan:
    """The next safe step of every group that is not at its target (see the module docstring)."""
    table = NodeTable(nodes, now_ms, policy.dead_grace_ms)
    groups = sorted(groups, key=lambda g: g.pid)
    if len({g.pid for g in groups}) != len(groups):
        raise ValueError("a partition is listed twice")
    targets: dict[int, tuple[str, ...]] = {}
    waiting: dict[int, str] = {}
    steps: list[Step] = []
    additions: list[tuple[GroupStatus, Step]] = []
    for group in groups:
        target = targets[group.pid] = table.targets(group.pid, policy.replication_factor)
        observers = (
            (frozenset(table.placed) | table.leaving) - set(target)
            if policy.observers
            else frozenset()
        )
        decision = next_step(group, target, table.live, policy.catch_up_lag_max, observers)
        if isinstance(decision, Wait):
            waiting[group.pid] = decision.reason
        elif decision is None:
            pass
        elif decision.action is Action.ADD_LEARNER:
            additions.append((group, decision))
        else:
            steps.append(decision)
    admitted, refused = _rate_limit(groups, targets, additions, table.live, policy)
    waiting.update(refused)
    steps.extend(admitted)
    steps.sort(key=lambda s: s.pid)
    return Plan(tuple(steps), waiting, targets, table.grace_ends_ms)


def next_step(
    group: GroupStatus,
    target: Sequence[str],
    live: frozenset[str],
    catch_up_lag_max: int,
    observers: frozenset[str] = frozenset(),
) -> Step | Wait | None:
    """The one step `group` should take towards `target` (None: it is there);
    `observers`: members to keep as learners (each live one added last)."""
    voters, learners = set(group.voters), set(group.learners)
    wanted = set(target)
    unobserved = sorted((observers & live) - learners - voters)
    if voters == wanted and learners <= observers and not unobserved:
        return None
    pid = group.pid
    if group.leader is None:
        return Wait("no leader")
    if group.change_pending:
        return Wait("a membership change or leader transfer is under way")
    stale = sorted(learners - wanted - observers)
    if stale:
        return Step(pid, Action.REMOVE_NODE, stale[0], f"learner {stale[0]} is no longer a target")
    if learners & wanted:
        return _promote(group, min(learners & wanted), live, catch_up_lag_max)
    missing = [node for node in target if node not in voters]
    if missing:
        node = missing[0]
        return Step(pid, Action.ADD_LEARNER, node, f"{node} is a target and holds no replica")
    if group.leader not in wanted:
        return _transfer(group, target, live)
    if voters - wanted:
        # Dead voters go first: if removing one would lose the live majority,
        # removing a live one would too.
        node = min(voters - wanted, key=lambda n: (n in live, n))
        rest = voters - {node}
        if len(rest & live) * 2 <= len(rest):
            return Wait(f"removing {node} would leave no live majority of {sorted(rest)}")
        return Step(pid, Action.REMOVE_NODE, node, f"{node} is no longer a target")
    node = unobserved[0]
    return Step(pid, Action.ADD_LEARNER, node, f"{node} observes the group")


def _promote(group: GroupStatus, node: str, live: frozenset[str], lag_max: int) -> Step | Wait:
    if node not in live:
        return Wait(f"learner {node} is down")
    match = group.match.get(node)
    if match is None:
        return Wait(f"learner {node} is catching up (its match is not known yet)")
    lag = group.last_index - match
    if lag > lag_max:
        return Wait(f"learner {node} is catching up ({lag} entries behind)")
    return Step(group.pid, Action.PROMOTE_LEARNER, node, f"learner {node} caught up")


def _transfer(group: GroupStatus, target: Sequence[str], live: frozenset[str]) -> Step | Wait:
    """Leadership to the best-matched live target voter (target order breaks ties)."""
    candidates = [n for n in target if n in live and n in group.voters]
    if not candidates:
        return Wait(f"leader {group.leader} must leave but no target voter is live")
    rank = {n: i for i, n in enumerate(target)}
    best = max(candidates, key=lambda n: (group.match.get(n, -1), -rank[n]))
    return Step(
        group.pid,
        Action.TRANSFER_LEADERSHIP,
        best,
        f"leader {group.leader} is no longer a target",
    )


def _rate_limit(
    groups: Sequence[GroupStatus],
    targets: Mapping[int, tuple[str, ...]],
    additions: Sequence[tuple[GroupStatus, Step]],
    live: frozenset[str],
    policy: PlacementPolicy,
) -> tuple[list[Step], dict[int, str]]:
    """Admit new moves within the limits, the least-replicated partitions first
    (an observer is not a move: it is admitted as it comes)."""
    in_flight = 0
    per_node: Counter[str] = Counter()
    for group in groups:
        moving = moving_learners(group, targets[group.pid], policy)
        if moving:
            in_flight += 1
            per_node.update(_move_ends(group, moving))
    admitted: list[Step] = []
    refused: dict[int, str] = {}
    ordered = sorted(additions, key=lambda a: (len(set(a[0].voters) & live), a[0].pid))
    for group, step in ordered:
        if policy.observers and step.node not in targets[group.pid]:
            admitted.append(step)
            continue
        ends = _move_ends(group, (step.node,))
        if in_flight >= policy.moves_in_flight_max:
            refused[group.pid] = f"waiting to add {step.node}: {in_flight} moves in flight"
            continue
        busy = sorted(n for n in ends if per_node[n] >= policy.moves_per_node_max)
        if busy:
            refused[group.pid] = f"waiting to add {step.node}: {busy} at the per-node move limit"
            continue
        in_flight += 1
        per_node.update(ends)
        admitted.append(step)
    return admitted, refused


def moving_learners(
    group: GroupStatus, target: Sequence[str], policy: PlacementPolicy
) -> tuple[str, ...]:
    """The learners that are moves (all of them, unless observers are kept)."""
    if not policy.observers:
        return group.learners
    return tuple(n for n in group.learners if n in target)


def _move_ends(group: GroupStatus, learners: Iterable[str]) -> set[str]:
    ends = set(learners)
    if group.leader is not None:
        ends.add(group.leader)
    return ends
