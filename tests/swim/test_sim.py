"""Whole-cluster properties under simulated faults (each failure names its seed).

- After faults heal, every running member agrees on the view, and the view is
  the truth: crashed members dead, departed members left, the rest alive with
  one incarnation and weight each.
- A crashed member is declared dead by every running member.
- No running member stays marked dead once it can refute.
- Once nothing changes, gossip stops: every update leaves every queue.

`test_soak.py` runs the same checks over many more seeds and larger clusters
(`make soak`).
"""

from __future__ import annotations

import pytest

from laminar.swim import MemberState, SwimConfig
from tests.swim.checks import describe, quiesce, settle
from tests.swim.faults import plan_faults, run_plan
from tests.swim.simcluster import SimCluster
from tests.swim.simnet import NetworkProfile

SETTLE_MS = 600_000
QUIESCE_MS = 30_000


def check_seed(
    seed: int, size: int, config: SwimConfig | None = None, *, check_codec: bool = True
) -> None:
    cluster = SimCluster(size, seed, config, check_codec=check_codec)
    plan = plan_faults(seed, size)
    run_plan(cluster, plan)
    problems = settle(cluster, SETTLE_MS)
    assert not problems, describe(cluster, problems, f"views disagree ({plan.summary()})")
    problems = quiesce(cluster, QUIESCE_MS)
    assert not problems, describe(cluster, problems, "gossip did not stop")


@pytest.mark.parametrize("seed", range(4))  # tests/swim/test_soak.py runs more in make soak
def test_views_converge_after_random_faults_heal(seed: int) -> None:
    check_seed(seed, size=30 + 10 * (seed % 3))


@pytest.mark.soak
def test_views_converge_in_a_larger_cluster() -> None:
    check_seed(1000, size=120, check_codec=False)


def test_a_crashed_member_is_declared_dead_by_every_running_member() -> None:
    cluster = SimCluster(200, seed=11, profile=NetworkProfile(loss=0.05, delay_max_ms=20))
    cluster.run_until(5_000)
    for index in (3, 77, 150):
        cluster.crash(index)
    cluster.run_until(cluster.now_ms + 60_000)
    not_dead = [
        (m.index, victim)
        for m in cluster.live()
        for victim in (3, 77, 150)
        if cluster.state_of(m.index, victim) is not MemberState.DEAD
    ]
    assert not not_dead, f"still not dead at {not_dead[:5]} (reproduce with seed=11)"


def test_a_member_wrongly_declared_dead_comes_back_when_it_can_refute() -> None:
    cluster = SimCluster(60, seed=12)
    cluster.run_until(2_000)
    cluster.network.partition([[7], [i for i in range(60) if i != 7]])
    cluster.run_until(cluster.now_ms + 60_000)
    assert all(cluster.state_of(observer, 7) is MemberState.DEAD for observer in range(8, 60))
    cluster.network.heal()
    problems = settle(cluster, SETTLE_MS)
    assert not problems, describe(cluster, problems, "n7 not back")


def test_a_cluster_forms_by_joining_through_one_seed() -> None:
    cluster = SimCluster(100, seed=13, formed=False, check_codec=True)
    for index in range(1, 100):
        cluster.run_until(index * 50)
        cluster.join(index, [0])
    problems = settle(cluster, SETTLE_MS)
    assert not problems, describe(cluster, problems, "join did not converge")


def test_a_partitioned_cluster_heals_without_lifeguard_too() -> None:
    check_seed(4, size=40, config=SwimConfig().without_lifeguard())
