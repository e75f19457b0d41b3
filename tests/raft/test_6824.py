"""The MIT 6.824 Raft tests (labs 2A-2C), on the scenario harness; the
unreliable ones reuse the simulator with a named fault plan."""

from __future__ import annotations

import dataclasses
import random

import pytest

from laminar.raft import NotLeader

from .harness import Cluster
from .sim.params import Params
from .sim.simulation import Simulation


def one_leader(cluster: Cluster) -> str:
    """Tick until exactly one node leads the highest term; return it."""
    leader = cluster.wait_for_leader()
    cluster.tick(3)
    top = max(c.term for c in cluster.cores.values())
    leaders = [n for n, c in cluster.cores.items() if c.role == "leader" and c.term == top]
    assert len(leaders) <= 1
    return leaders[0] if leaders else leader


def agree(cluster: Cluster, data: bytes, nodes: tuple[str, ...] | None = None) -> int:
    """Propose through whoever leads and wait until `nodes` applied it."""
    for _ in range(50):
        leader = one_leader(cluster)
        try:
            index = cluster.propose(leader, data)
        except NotLeader:
            continue
        cluster.tick(3)
        targets = nodes or tuple(cluster.cores)
        if all(data in cluster.data(n) for n in targets):
            return index
    raise AssertionError(f"{data!r} never committed on {nodes}")


# -- 2A: elections -----------------------------------------------------------


def test_initial_election() -> None:
    cluster = Cluster(3, seed=1)
    leader = one_leader(cluster)
    term = cluster.cores[leader].term
    cluster.tick(50)
    assert cluster.leader() == leader and cluster.cores[leader].term == term  # no churn


def test_re_election() -> None:
    cluster = Cluster(3, seed=2)
    first = one_leader(cluster)
    cluster.isolate(first)
    cluster.tick(40)
    second = cluster.leader()
    assert second is not None and second != first
    cluster.heal()  # the old leader rejoins and does not disturb the new one
    cluster.tick(20)
    assert cluster.leader() == second
    others = [n for n in cluster.cores if n != second]
    cluster.isolate(second)
    cluster.isolate(others[0])
    cluster.tick(60)
    assert cluster.cores[others[1]].role != "leader"  # no quorum, no leader
    cluster.heal()
    one_leader(cluster)


def test_many_elections() -> None:
    cluster = Cluster(7, seed=3)
    rng = random.Random(3)
    one_leader(cluster)
    for _ in range(10):
        cluster.heal()
        for node in rng.sample(sorted(cluster.cores), 3):
            cluster.isolate(node)
        cluster.tick(60)
        cluster.heal()
        one_leader(cluster)


# -- 2B: agreement -------------------------------------------------------------


def test_basic_agree() -> None:
    cluster = Cluster(3, seed=4)
    for i in range(1, 4):
        assert agree(cluster, f"v{i}".encode()) == i + 1  # after the no-op at 1


def test_fail_agree() -> None:
    cluster = Cluster(3, seed=5)
    leader = one_leader(cluster)
    follower = next(n for n in cluster.cores if n != leader)
    cluster.isolate(follower)
    agree(cluster, b"a", tuple(n for n in cluster.cores if n != follower))
    cluster.heal()
    agree(cluster, b"b")
    assert cluster.data(follower) == [b"a", b"b"]


def test_fail_no_agree() -> None:
    cluster = Cluster(5, seed=6)
    leader = one_leader(cluster)
    for node in [n for n in cluster.cores if n != leader][:3]:
        cluster.isolate(node)  # the leader keeps one follower: 2 of 5
    index = cluster.propose(leader, b"lonely")
    cluster.tick(5)
    assert cluster.cores[leader].status().commit < index
    cluster.heal()
    agree(cluster, b"after")


def test_concurrent_starts() -> None:
    cluster = Cluster(3, seed=7)
    leader = one_leader(cluster)
    payloads = [f"c{i}".encode() for i in range(5)]
    for data in payloads:
        cluster.cores[leader].propose(data)
    cluster.drain()
    cluster.tick(3)
    for node in cluster.cores:
        assert sorted(cluster.data(node)) == sorted(payloads)


def test_rejoin() -> None:
    """A partitioned leader's uncommitted entries are thrown away when it rejoins."""
    cluster = Cluster(3, seed=8)
    agree(cluster, b"101")
    old = one_leader(cluster)
    cluster.isolate(old)
    for data in (b"102", b"103", b"104"):
        cluster.cores[old].propose(data)
    cluster.drain()
    agree(cluster, b"103b", tuple(n for n in cluster.cores if n != old))
    cluster.heal()
    agree(cluster, b"104b")
    for node in cluster.cores:
        assert cluster.data(node) == [b"101", b"103b", b"104b"]


def test_backup_skips_a_long_divergent_suffix_quickly() -> None:
    """The leader backs up over a follower's many conflicting entries in a few
    round trips (fast backtracking), not one per entry."""
    cluster = Cluster(5, seed=9, check_quorum=False)
    agree(cluster, b"base")
    old = one_leader(cluster)
    minority = [old, next(n for n in cluster.cores if n != old)]
    majority = [n for n in cluster.cores if n not in minority]
    for node in minority:
        for other in majority:
            cluster.cut.update({(node, other), (other, node)})
    for i in range(50):
        cluster.cores[old].propose(f"lost{i}".encode())  # reach only the minority
    cluster.drain()
    for i in range(50):
        agree(cluster, f"kept{i}".encode(), tuple(majority))
    cluster.heal()
    rejections_before = sum(1 for m in cluster.sent if m.kind == "append_resp" and m.reject)
    agree(cluster, b"final")
    rejections = sum(1 for m in cluster.sent if m.kind == "append_resp" and m.reject)
    assert rejections - rejections_before <= 6
    for node in cluster.cores:
        assert not [d for d in cluster.data(node) if d.startswith(b"lost")]


# -- 2C: persistence -----------------------------------------------------------


def test_persist_1_every_node_restarts_with_its_state() -> None:
    cluster = Cluster(3, seed=10)
    agree(cluster, b"11")
    for node in list(cluster.cores):
        cluster.crash(node)
    for node in list(cluster.storages):
        cluster.restart(node)
    agree(cluster, b"12")
    leader = one_leader(cluster)
    cluster.crash(leader)
    cluster.restart(leader)
    agree(cluster, b"13")
    for node in cluster.cores:
        assert cluster.data(node)[-3:] == [b"11", b"12", b"13"]


def test_persist_2_crashes_during_agreement() -> None:
    cluster = Cluster(5, seed=11)
    rng = random.Random(11)
    for round_ in range(5):
        agree(cluster, f"r{round_}a".encode())
        leader = one_leader(cluster)
        down = [n for n in cluster.cores if n != leader][: rng.randint(1, 2)]
        for node in down:
            cluster.crash(node)
        agree(cluster, f"r{round_}b".encode())
        for node in down:
            cluster.restart(node)
    agree(cluster, b"end")


def test_persist_3_a_leader_crashes_right_after_proposing() -> None:
    cluster = Cluster(3, seed=12)
    agree(cluster, b"101")
    leader = one_leader(cluster)
    cluster.cores[leader].propose(b"102")  # never persisted: the Ready is not handled
    cluster.crash(leader)
    agree(cluster, b"103", tuple(cluster.cores))
    cluster.restart(leader)
    agree(cluster, b"104")
    assert cluster.data(leader)[-3:] == [b"101", b"103", b"104"]


# -- 2C: unreliable networks, through the simulator ----------------------------


def _plan(seed: int, **changes: object) -> Simulation:
    params = Params.draw(random.Random(seed), safety_steps=600)
    return Simulation(seed, dataclasses.replace(params, **changes))  # type: ignore[arg-type]


UNRELIABLE = dict(drop=0.1, duplicate=0.05, delay_steps_max=4, election_ticks=16)


@pytest.mark.parametrize("seed", range(4))
def test_figure_8(seed: int) -> None:
    _plan(seed, nodes=5, leader_crash_rate=0.05, restart_rate=0.3, drop=0.0).run()


@pytest.mark.parametrize("seed", range(4))
def test_figure_8_unreliable(seed: int) -> None:
    _plan(seed, nodes=5, leader_crash_rate=0.05, restart_rate=0.3, **UNRELIABLE).run()


@pytest.mark.parametrize("seed", range(3))
def test_unreliable_agree(seed: int) -> None:
    sim = _plan(
        seed,
        crash_rate=0.0,
        leader_crash_rate=0.0,
        partition_rate=0.0,
        propose_rate=0.5,
        **UNRELIABLE,
    )
    sim.run()
    assert len(sim.history.acked) > 50


@pytest.mark.parametrize("seed", range(3))
def test_reliable_churn(seed: int) -> None:
    _plan(
        seed, drop=0.0, duplicate=0.0, crash_rate=0.03, restart_rate=0.2, partition_rate=0.02
    ).run()


@pytest.mark.parametrize("seed", range(3))
def test_unreliable_churn(seed: int) -> None:
    _plan(seed, crash_rate=0.03, restart_rate=0.2, partition_rate=0.02, **UNRELIABLE).run()
