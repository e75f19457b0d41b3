"""The placement controller: single steps, rendezvous movement, convergence,
grace, rate limits, and an exhaustive check that no step loses a quorum."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from laminar.placement import partition_id
from laminar.replication.controller import (
    Action,
    GroupStatus,
    NodeStatus,
    NodeTable,
    PlacementPolicy,
    Step,
    Wait,
    next_step,
    plan,
)
from laminar.swim.messages import MemberState

from .controller_model import ClusterModel, GroupModel

PIDS = [partition_id(t, i) for t in range(1, 11) for i in range(100)]  # 1,000 partitions
NOW = 1_000_000
GRACE = 30_000
LIVE = frozenset("abcdxyz")


def short(decision: Step | Wait | None) -> object:
    return (decision.action, decision.node) if isinstance(decision, Step) else decision


def group(voters: str, learners: str = "", leader: str | None = "a", **kw: object) -> GroupStatus:
    return GroupStatus(1, tuple(voters), tuple(learners), leader, **kw)  # type: ignore[arg-type]


# --- one group, one step ------------------------------------------------------------


def test_a_group_at_its_target_gets_no_step() -> None:
    assert next_step(group("abc"), "cab", LIVE, 0) is None
    assert next_step(group("abc", leader=None), "abc", LIVE, 0) is None


def test_a_follower_moves_by_learner_catch_up_promote_then_remove() -> None:
    target = ("a", "b", "d")  # c leaves, d comes
    assert short(next_step(group("abc"), target, LIVE, 0)) == (Action.ADD_LEARNER, "d")
    # the learner waits until the leader knows it caught up
    waits = [
        group("abc", "d", last_index=500),
        group("abc", "d", last_index=500, match={"d": 435}),
    ]
    for g in waits:
        decision = next_step(g, target, LIVE, 64)
        assert isinstance(decision, Wait) and "catching up" in decision.reason
    caught_up = group("abc", "d", last_index=500, match={"d": 436})
    assert short(next_step(caught_up, target, LIVE, 64)) == (Action.PROMOTE_LEARNER, "d")
    assert short(next_step(group("abcd"), target, LIVE, 0)) == (Action.REMOVE_NODE, "c")
    assert next_step(group("abd"), target, LIVE, 0) is None


def test_a_leaving_leader_transfers_first_to_the_best_matched_target() -> None:
    target = ("b", "c", "d")  # the leader a leaves
    assert short(next_step(group("abc"), target, LIVE, 0)) == (Action.ADD_LEARNER, "d")
    g = group("abcd", last_index=90, match={"b": 80, "c": 90, "d": 85})
    assert short(next_step(g, target, LIVE, 0)) == (Action.TRANSFER_LEADERSHIP, "c")
    # ties (or no match known) go to the better rendezvous rank; dead voters never
    assert short(next_step(group("abcd"), target, LIVE, 0)) == (Action.TRANSFER_LEADERSHIP, "b")
    g = group("abcd", match={"b": 90, "c": 80})
    assert short(next_step(g, target, LIVE - {"b"}, 0)) == (Action.TRANSFER_LEADERSHIP, "c")
    decision = next_step(group("abcd"), target, frozenset("a"), 0)
    assert isinstance(decision, Wait) and "no target voter is live" in decision.reason
    # once another leads, the old leader is removed like any voter
    assert short(next_step(group("abcd", leader="c"), target, LIVE, 0)) == (
        Action.REMOVE_NODE,
        "a",
    )


def test_a_stale_learner_goes_before_anything_else() -> None:
    assert short(next_step(group("abc", "x"), "abd", LIVE, 0)) == (Action.REMOVE_NODE, "x")


def test_one_change_at_a_time_and_only_through_a_leader() -> None:
    for g in (group("abc", change_pending=True), group("abc", leader=None)):
        assert isinstance(next_step(g, "abd", LIVE, 0), Wait)


def test_a_down_learner_is_not_promoted() -> None:
    g = group("abc", "d", match={"d": 0})
    decision = next_step(g, "abd", LIVE - {"d"}, 0)
    assert isinstance(decision, Wait) and "down" in decision.reason


def test_observers_are_added_last_kept_and_promoted_when_they_win() -> None:
    """The metadata group's policy: members outside the voter targets are kept
    as learners; they are added once the voters are at their target, and an
    observer that becomes a target is promoted like a caught-up learner."""
    observers = frozenset("xy")
    assert short(next_step(group("abc"), "abc", LIVE, 0, observers)) == (Action.ADD_LEARNER, "x")
    assert short(next_step(group("abc", "x"), "abc", LIVE, 0, observers)) == (
        Action.ADD_LEARNER,
        "y",
    )
    assert next_step(group("abc", "xy"), "abc", LIVE, 0, observers) is None
    assert next_step(group("abc", "x"), "abc", LIVE - {"y"}, 0, observers) is None  # y is down
    # a voter is missing: the voters come first, the observers wait
    assert short(next_step(group("ab"), "abc", LIVE, 0, observers)) == (Action.ADD_LEARNER, "c")
    # x wins a place: promoted; then c (no longer a target) is removed, to observe again
    caught_up = group("abc", "xy", last_index=5, match={"x": 5})
    assert short(next_step(caught_up, "abx", LIVE, 64, frozenset("cy"))) == (
        Action.PROMOTE_LEARNER,
        "x",
    )
    assert short(next_step(group("abcx", "y"), "abx", LIVE, 0, frozenset("cy"))) == (
        Action.REMOVE_NODE,
        "c",
    )
    assert short(next_step(group("abx", "y"), "abx", LIVE, 0, frozenset("cy"))) == (
        Action.ADD_LEARNER,
        "c",
    )


def test_observers_are_not_moves() -> None:
    """Kept learners never count against the move limits (they are permanent)."""
    nodes = [NodeStatus(n) for n in "abcdefgh"]
    policy = PlacementPolicy(3, moves_in_flight_max=1, moves_per_node_max=1, observers=True)
    target = NodeTable(nodes, NOW, GRACE).targets(0, 3)
    others = sorted(set("abcdefgh") - set(target))
    observed = GroupStatus(0, target[:2], tuple(others), target[0])  # a voter is missing
    result = plan(nodes, [observed], policy, NOW)
    assert [short(s) for s in result.steps] == [(Action.ADD_LEARNER, target[2])]


def test_a_removal_that_would_lose_the_live_majority_waits() -> None:
    # voters a b c x; b and c are down (within grace, so still targets); x is live
    decision = next_step(group("abcx"), "abc", frozenset("ax"), 0)
    assert isinstance(decision, Wait) and "no live majority" in decision.reason
    # a dead excess voter goes before a live one
    assert short(next_step(group("abcxy"), "abc", frozenset("abcx"), 0)) == (
        Action.REMOVE_NODE,
        "y",
    )


# --- rendezvous: only partitions whose top set changed move -----------------------


def at_target(nodes: dict[str, float], rf: int) -> list[GroupStatus]:
    table = NodeTable([NodeStatus(n, w) for n, w in nodes.items()], NOW, GRACE)
    groups = []
    for pid in PIDS:
        top = table.targets(pid, rf)
        groups.append(GroupStatus(pid, top, (), top[0], 10, {n: 10 for n in top}))
    return groups


UNLIMITED = PlacementPolicy(3, GRACE, moves_in_flight_max=10**6, moves_per_node_max=10**6)
BEFORE = {"n1": 1.0, "n2": 1.0, "n3": 2.0, "n4": 1.0, "n5": 0.5, "n6": 1.0}


@pytest.mark.parametrize(
    ("change", "after", "mover"),
    [
        ("join", [NodeStatus(n, w) for n, w in {**BEFORE, "n7": 1.0}.items()], "+n7"),
        ("leave", [NodeStatus(n, w) for n, w in BEFORE.items() if n != "n3"]
         + [NodeStatus("n3", 2.0, MemberState.LEFT, NOW - GRACE)], "-n3"),
        ("decommission", [NodeStatus(n, w, decommissioned=n == "n4") for n, w in BEFORE.items()],
         "-n4"),
        ("death", [NodeStatus(n, w) for n, w in BEFORE.items() if n != "n2"]
         + [NodeStatus("n2", 1.0, MemberState.DEAD, NOW - GRACE)], "-n2"),
        ("weight up", [NodeStatus(n, 3.0 if n == "n5" else w) for n, w in BEFORE.items()], "+n5"),
        ("weight down", [NodeStatus(n, 0.5 if n == "n3" else w) for n, w in BEFORE.items()], "-n3"),
    ],
)  # fmt: skip
def test_only_partitions_whose_top_set_changed_get_a_step(
    change: str, after: list[NodeStatus], mover: str
) -> None:
    groups = at_target(BEFORE, 3)
    assert plan([NodeStatus(n, w) for n, w in BEFORE.items()], groups, UNLIMITED, NOW).steps == ()
    result = plan(after, groups, UNLIMITED, NOW)
    old = {g.pid: set(g.voters) for g in groups}
    changed = {pid for pid in PIDS if set(result.targets[pid]) != old[pid]}
    assert {s.pid for s in result.steps} | set(result.waiting) == changed
    assert not set(result.waiting)  # nothing blocks the first step here
    # the rendezvous property itself: each move swaps in or out the node that changed
    for pid in changed:
        added, removed = set(result.targets[pid]) - old[pid], old[pid] - set(result.targets[pid])
        assert len(added) == len(removed) == 1
        assert mover[1:] in (added if mover[0] == "+" else removed)
    # a best-first order that changed without the set changing moves nothing
    reordered = [
        g.pid for g in groups if g.pid not in changed and result.targets[g.pid] != g.voters
    ]
    if change.startswith("weight"):
        assert reordered
    fraction = len(changed) / len(PIDS)
    print(f"{change}: {len(changed)} of {len(PIDS)} partitions move ({fraction:.1%})")


# --- convergence ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_random_joins_leaves_deaths_and_weights_converge_to_rf_at_the_targets(
    seed: int,
) -> None:
    rng = random.Random(seed)
    rf = rng.choice((1, 2, 3))
    nodes = {f"n{i}": rng.choice((0.5, 1.0, 2.0)) for i in range(rng.randint(rf + 1, 7))}
    policy = PlacementPolicy(rf, GRACE, rng.randint(2, 20), rng.randint(1, 4))
    model = ClusterModel(nodes, PIDS[:: rng.choice((5, 10))], policy)
    fresh = itertools.count(100)
    for _ in range(rng.randint(1, 4)):
        live = sorted(model.live())
        event = rng.choice(("kill", "leave", "join", "weight", "bounce", "decommission"))
        victim = rng.choice(live)
        if event in ("kill", "leave", "bounce") and not model.survives_without(victim):
            event = "join"  # a failure no group could survive is not this test's subject
        if event == "kill":
            model.kill(victim)
        elif event == "leave":
            model.leave(victim)
        elif event == "decommission":
            model.decommission(victim)
        elif event == "join":
            model.join(f"n{next(fresh)}", rng.choice((0.5, 1.0, 2.0)))
        elif event == "weight":
            model.join(victim, rng.choice((0.25, 4.0)))
        else:  # dies and comes back within the grace period: nothing moves for it
            model.kill(victim)
            model.now_ms += GRACE // 2
            model.round()
            model.join(victim, model.nodes[victim].weight)
        model.round()  # events overlap with moves in flight
        model.now_ms += rng.randint(0, GRACE)
    model.run()
    assert model.off_target() == []
    placed = len(model.table().placed)
    assert all(len(g.voters) == min(rf, placed) for g in model.groups.values())


# --- grace ------------------------------------------------------------------------------


def test_a_dead_node_keeps_its_partitions_for_the_grace_period() -> None:
    model = ClusterModel(BEFORE, PIDS, UNLIMITED)
    held = {pid for pid, g in model.groups.items() if "n3" in g.voters}
    model.now_ms = NOW
    model.kill("n3")
    model.settle()  # the groups that n3 led elect another leader
    model.now_ms = NOW + GRACE - 1
    early = model.plan()
    assert early.steps == () and early.recheck_at_ms == NOW + GRACE
    model.now_ms = NOW + GRACE
    late = model.plan()
    assert {s.pid for s in late.steps} == held
    assert all(s.action is Action.ADD_LEARNER for s in late.steps)
    model.run()
    assert model.off_target() == []
    assert not any("n3" in g.voters for g in model.groups.values())


@pytest.mark.parametrize("stop", ["kill", "leave"])
def test_a_node_back_within_the_grace_period_moves_nothing(stop: str) -> None:
    """A restart, whether the node crashed (dead) or was stopped with SIGTERM
    (left): it keeps its place and nothing is copied."""
    model = ClusterModel(BEFORE, PIDS, UNLIMITED)
    getattr(model, stop)("n3")
    model.settle()  # n3's groups elect other leaders
    model.now_ms = GRACE - 1
    assert model.round().steps == ()
    model.join("n3", BEFORE["n3"])
    assert model.run() == 0


def test_a_decommissioned_node_hands_over_every_replica_at_once() -> None:
    """No grace: each group it is in moves, one safe step at a time (the model
    checks every step keeps a live majority), until it holds none; a dead one
    decommissioned is replaced at once too."""
    for down in (False, True):
        model = ClusterModel(BEFORE, PIDS[:300], UNLIMITED)
        held = {pid for pid, g in model.groups.items() if "n3" in g.voters}
        if down:
            model.kill("n3")
            model.settle()
        model.decommission("n3")
        assert {s.pid for s in model.plan().steps} == held
        model.run()
        assert model.off_target() == []
        assert not any("n3" in g.voters | g.learners for g in model.groups.values())
        assert all(len(g.voters) == 3 for g in model.groups.values())


def test_a_decommissioned_node_observes_while_live_and_is_removed_once_stopped() -> None:
    """The metadata group's policy: a decommissioned node loses its vote but
    keeps receiving the log while it runs (it still serves what it drains);
    stopped, its learner goes."""
    nodes = {n: NodeStatus(n) for n in "abcd"}
    nodes["a"] = NodeStatus("a", decommissioned=True)
    policy = PlacementPolicy(3, GRACE, observers=True)
    voters = ("a", "b", "c")
    g = GroupModel(0, set(voters), {"d"}, "b", match={n: 100 for n in "abcd"})
    for _ in range(10):
        result = plan(nodes.values(), [g.status()], policy, NOW)
        for step in result.steps:
            g.apply(step, frozenset("abcd"), result.targets[0], 64)
        g.settle(frozenset("abcd"))
    assert (g.voters, g.learners) == (set("bcd"), {"a"})
    nodes["a"] = NodeStatus("a", state=MemberState.LEFT, down_since_ms=NOW, decommissioned=True)
    (step,) = plan(nodes.values(), [g.status()], policy, NOW).steps
    assert short(step) == (Action.REMOVE_NODE, "a")


# --- rate limits ------------------------------------------------------------------------


def in_flight(model: ClusterModel) -> tuple[int, Counter[str]]:
    per_node: Counter[str] = Counter()
    moving = [g for g in model.groups.values() if g.learners]
    for g in moving:
        per_node.update(g.learners | {g.leader} if g.leader else g.learners)
    return len(moving), per_node


@pytest.mark.parametrize(("moves_max", "per_node_max"), [(5, 100), (100, 2)])
def test_moves_stay_within_the_limits_while_a_node_is_replaced(
    moves_max: int, per_node_max: int
) -> None:
    policy = PlacementPolicy(3, GRACE, moves_max, per_node_max)
    model = ClusterModel(BEFORE, PIDS[:300], policy)
    model.leave("n3")
    model.decommission("n3")
    model.settle()  # n3's groups elect leaders (a leader change mid-move can pass the limit)
    peak, peak_per_node = 0, 0
    for _ in range(2000):
        result = model.round()
        moving, per_node = in_flight(model)
        peak, peak_per_node = max(peak, moving), max(peak_per_node, *per_node.values(), 0)
        assert moving <= moves_max and peak_per_node <= per_node_max
        if not result.steps:
            break
    assert (peak if moves_max < per_node_max else peak_per_node) == min(moves_max, per_node_max)
    assert model.off_target() == []


def test_under_replicated_partitions_move_before_rebalancing() -> None:
    policy = PlacementPolicy(3, GRACE, moves_in_flight_max=1, moves_per_node_max=10)
    model = ClusterModel(BEFORE, PIDS[:200], policy)
    model.join("n7")
    model.leave("n1")
    model.now_ms += GRACE  # stopped for longer than the grace: it loses its place
    result = model.plan()
    (first,) = [s for s in result.steps if s.action is Action.ADD_LEARNER]
    assert "n1" in model.groups[first.pid].voters
    rebalances = [pid for pid, g in model.groups.items() if "n1" not in g.voters]
    assert any(pid in result.waiting for pid in rebalances)


# --- exhaustive: no step ever loses a quorum, and small groups converge ------------------

NODES = "abcd"


def small_universe() -> list[tuple[int, dict[str, str], GroupModel]]:
    cases = []
    pids = itertools.cycle(range(1, 14))
    for rf in (1, 2, 3):
        for states in itertools.product(("live", "grace", "gone"), repeat=len(NODES)):
            health = dict(zip(NODES, states, strict=True))
            live = {n for n in NODES if health[n] == "live"}
            for voters in subsets(NODES, 1, 4):
                rest = [n for n in NODES if n not in voters]
                for learners in subsets(rest, 0, 2):
                    for leader in [None, *sorted(live & voters)]:
                        for caught_up in (True, False) if learners else (True,):
                            group = GroupModel(next(pids), voters, learners, leader)
                            group.match = {n: 100 for n in voters & live}
                            if caught_up:  # and perhaps died since
                                group.match.update({n: 100 for n in learners})
                            cases.append((rf, health, group))
    return cases


def subsets(items: str | list[str], low: int, high: int) -> list[set[str]]:
    return [set(c) for k in range(low, high + 1) for c in itertools.combinations(items, k)]


def test_model_check_every_small_group_steps_safely_to_its_target() -> None:
    checked = converged = 0
    cases = small_universe()
    for rf, health, group in cases:
        nodes = [
            NodeStatus(n, 1.0)
            if state == "live"
            else NodeStatus(n, 1.0, MemberState.DEAD, NOW - (1 if state == "grace" else GRACE))
            for n, state in health.items()
        ]
        policy = PlacementPolicy(rf, GRACE)
        live = NodeTable(nodes, NOW, GRACE).live
        can_commit = group.leader is not None and group.has_live_majority(live)
        idle = 0
        for _ in range(12):
            result = plan(nodes, [group.status()], policy, NOW)
            if result.steps:
                (one,) = result.steps
                group.apply(one, live, result.targets[group.pid])
                checked += 1
                idle = 0
            elif (idle := idle + 1) == 2:  # nothing to do, even after the learners caught up
                break
            group.settle(live)
        else:
            raise AssertionError(f"no fixpoint for {group} with {health}")
        target = set(result.targets[group.pid])
        if can_commit and all(health[n] == "live" for n in target):
            assert (group.voters, group.learners) == (target, set()), (health, group)
            converged += 1
    assert len(cases) > 40_000 and checked > 40_000 and converged > 4_000
    print(f"{len(cases)} groups, {checked} steps checked, {converged} groups converged")


# --- bad input ---------------------------------------------------------------------------


def test_bad_input_is_refused_with_a_reason() -> None:
    for stopped in (MemberState.DEAD, MemberState.LEFT):
        with pytest.raises(ValueError, match="down_since_ms is required"):
            NodeStatus("a", 1.0, stopped)
    with pytest.raises(ValueError, match="finite"):
        NodeStatus("a", float("nan"))
    with pytest.raises(ValueError, match="not a voter"):
        GroupStatus(1, ("a", "b"), ("c",), "c")
    with pytest.raises(ValueError, match="both voter and learner"):
        GroupStatus(1, ("a",), ("a",), "a")
    with pytest.raises(ValueError, match="listed twice"):
        plan([NodeStatus("a"), NodeStatus("a")], [], PlacementPolicy(1), 0)
    with pytest.raises(ValueError, match="listed twice"):
        plan([NodeStatus("a")], [group("a"), group("a")], PlacementPolicy(1), 0)
    with pytest.raises(ValueError, match="replication_factor"):
        PlacementPolicy(0)
