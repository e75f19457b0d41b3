"""The seeded group simulation over many seeds (the `soak` marker runs more).

LAMINAR_GROUPS_SEEDS sets how many seeds the default run takes (80 of the
mixed plan, a quarter as many of the pauses plan: about 6 s of one core); a
failure prints `reproduce with: ... --seed N --plan P`."""

from __future__ import annotations

import os

import pytest

from .sim.simulation import Params, Simulation, run_seed

SEEDS = int(os.environ.get("LAMINAR_GROUPS_SEEDS", "80"))
PAUSE_SEEDS = SEEDS // 4
SOAK_SEEDS = 3000
CHUNK = 25


@pytest.mark.parametrize("first", range(0, SEEDS, CHUNK))
def test_simulated_groups_keep_every_safety_property_and_converge(first: int) -> None:
    for seed in range(first, min(first + CHUNK, SEEDS)):
        run_seed(seed)


@pytest.mark.parametrize("first", range(0, PAUSE_SEEDS, CHUNK))
def test_members_paused_while_answers_are_slow_never_overlap_the_new_owner(first: int) -> None:
    for seed in range(first, min(first + CHUNK, PAUSE_SEEDS)):
        run_seed(seed, plan="pauses")


@pytest.mark.soak
@pytest.mark.parametrize("first", range(SEEDS, SEEDS + SOAK_SEEDS, 250))
def test_simulated_groups_soak(first: int) -> None:
    for seed in range(first, first + 250):
        run_seed(seed)
        run_seed(seed, plan="pauses")


def test_a_seed_replays_exactly() -> None:
    """Same seed, same run: the basis of `reproduce with --seed`."""

    def trace(seed: int) -> list[object]:
        sim = run_seed(seed)
        return [sim.clock.now, sim.node.core.state_records(), sim.history.positions]

    assert trace(7) == trace(7)


def test_the_faults_happen() -> None:
    """The checks mean something only if the runs fence, fail over and move
    partitions: count it over the default seeds."""
    failovers = fenced = members = 0
    for seed in range(10):
        sim = run_seed(seed)
        failovers += sim.node.failovers
        fenced += sim.history.commits_fenced
        members += len(sim.members)
    assert failovers > 10 and fenced > 50 and members > 40


REBALANCE_S_MAX = 0.35
"""After a graceful leave, with 10 ms between the nodes: the leave, its
commit, the held answers and the members acting on them take about seven
50 ms steps of the simulation (a heartbeat interval is 0.5 s in it)."""
QUIET = Params(
    members_initial=4,
    members_max=4,
    counts=(("a", 8), ("b", 4)),
    session_timeout_s=3.0,
    poll_timeout_s=60.0,
    drop=0.0,
    delay_max_s=0.01,
    commit_probability=1.0,
    checkpoint_floor=1000,
    schedule_s=0.0,
    liveness_s=10.0,
    fault_rate=0.0,
)


def _orphans(sim: Simulation) -> set[tuple[str, int]]:
    """Subscribed partitions no live member delivers or is still releasing."""
    alive = [m for m in sim.members if m.state == "alive"]
    wanted = {(t, p) for m in alive for t in m.core.topics for p in range(sim.counts[t])}
    view = sim._view()
    releasing = {tp for m in view.members for tp in m.revoking}
    delivered = {tp for m in alive for tp in m.core.assignment}
    return wanted - delivered - releasing


def test_after_a_graceful_leave_every_partition_is_owned_again_within_round_trips() -> None:
    """The members left learn of a leave from their held heartbeats, answered
    again when the group's epoch moves (`GroupCoordinator.hold_s`), not at
    their next heartbeat an interval later: the time from the leave until a
    live member delivers each of the leaver's partitions stays within a
    bound, in simulated time, over 20 seeds at any phase of the heartbeats."""
    times = []
    for seed in range(20):
        sim = Simulation(seed, QUIET)
        sim.run()  # stable
        for _ in range(round(sim.rng.uniform(1.0, 2.0) / 0.05)):
            sim._step()
        dynamic = [m for m in sim.members if m.core.instance_id is None]
        # (a static member's leave keeps its partitions until its session ends)
        sim._close(dynamic[seed % len(dynamic)])
        left_at = sim.clock.now
        sim._step()
        while _orphans(sim):
            assert sim.clock.now - left_at < 5.0, f"seed {seed}: no rebalance"
            sim._step()
        times.append(sim.clock.now - left_at)
    assert max(times) <= REBALANCE_S_MAX, sorted(times)
