"""The seeded group simulation over many seeds (the `soak` marker runs more).

LAMINAR_GROUPS_SEEDS sets how many seeds the default run takes (80 of the
mixed plan, a quarter as many of the pauses plan: about 6 s of one core); a
failure prints `reproduce with: ... --seed N --plan P`."""

from __future__ import annotations

import os

import pytest

from .sim.simulation import run_seed

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
