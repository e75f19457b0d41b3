"""Fault plans: a seed picks which faults hit a simulated cluster, and when.

A plan is a list of timed actions inside a fault window (crashes, leaves,
weight changes, slowed members, a network partition, a lossy network), after
which everything heals: the partition closes, slowed members recover, the
network is clean again. Only crashes and leaves are permanent.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from tests.swim.simcluster import SimCluster
from tests.swim.simnet import NetworkProfile


@dataclass(frozen=True, slots=True)
class Action:
    time_ms: int
    describe: str
    apply: Callable[[SimCluster], None]


@dataclass(frozen=True, slots=True)
class FaultPlan:
    actions: tuple[Action, ...]
    heal_ms: int

    def summary(self) -> str:
        return "; ".join(f"{a.time_ms} ms {a.describe}" for a in self.actions)


def plan_faults(seed: int, size: int, window_ms: int = 120_000) -> FaultPlan:
    """The faults seed `seed` picks for a cluster of `size` members."""
    rng = random.Random(f"{seed}/faults")
    actions: list[Action] = []
    doomed = rng.sample(range(size), k=min(size - 2, rng.randint(0, 3) + rng.randint(0, 2)))
    crashes = doomed[: len(doomed) * 2 // 3 + 1] if doomed else []
    leavers = [i for i in doomed if i not in crashes]
    for index in crashes:
        actions.append(_at(rng, window_ms, f"crash n{index}", lambda c, i=index: c.crash(i)))
    for index in leavers:
        actions.append(_at(rng, window_ms, f"n{index} leaves", lambda c, i=index: c.leave(i)))
    survivors = [i for i in range(size) if i not in doomed]
    for index in rng.sample(survivors, k=rng.randint(0, 3)):
        weight = float(rng.randint(1, 4))
        actions.append(
            _at(
                rng,
                window_ms,
                f"n{index} weight {weight}",
                lambda c, i=index, w=weight: c.set_weight(i, w),
            )
        )
    loss = rng.choice([0.0, 0.01, 0.05, 0.1, 0.2])
    delay_max = rng.choice([5, 20, 100, 300])
    profile = NetworkProfile(loss=loss, delay_min_ms=1, delay_max_ms=delay_max)
    actions.append(
        Action(
            0, f"network loss {loss:.0%}, delay 1-{delay_max} ms", lambda c: c.set_profile(profile)
        )
    )
    for index in rng.sample(survivors, k=rng.randint(0, max(1, size // 10))):
        slow_ms = rng.choice([300, 1000, 3000])
        actions.append(
            _at(
                rng,
                window_ms,
                f"slow n{index} by up to {slow_ms} ms",
                lambda c, i=index, s=slow_ms: c.slow(i, s),
            )
        )
    if rng.random() < 0.5:
        members = list(range(size))
        rng.shuffle(members)
        cut = rng.randint(1, size - 1)
        groups = (members[:cut], members[cut:])
        start = rng.randrange(window_ms // 2)
        actions.append(
            Action(
                start, f"partition {cut}/{size - cut}", lambda c, g=groups: c.network.partition(g)
            )
        )
    actions.sort(key=lambda a: a.time_ms)
    return FaultPlan(tuple(actions), heal_ms=window_ms)


def heal(cluster: SimCluster) -> None:
    """End every temporary fault."""
    cluster.network.heal()
    cluster.set_profile(NetworkProfile())
    for member in cluster.members:
        cluster.slow(member.index, 0)


def run_plan(cluster: SimCluster, plan: FaultPlan) -> None:
    """Play the plan's actions at their times, then heal at `heal_ms`."""
    for action in plan.actions:
        cluster.run_until(action.time_ms)
        action.apply(cluster)
    cluster.run_until(plan.heal_ms)
    heal(cluster)


def _at(
    rng: random.Random, window_ms: int, describe: str, apply: Callable[[SimCluster], None]
) -> Action:
    return Action(rng.randrange(window_ms), describe, apply)
