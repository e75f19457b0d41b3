"""The deterministic simulator over many seeds (make soak runs 10,000).

LAMINAR_RAFT_SEEDS sets how many seeds `make test` runs (default 300); a
failure names its seed: `run_seed(seed)` replays it exactly."""

from __future__ import annotations

import os

import pytest

from .sim.simulation import Simulation, run_seed

SEEDS = int(os.environ.get("LAMINAR_RAFT_SEEDS", "300"))
CHUNK = 25


@pytest.mark.parametrize("first", range(0, SEEDS, CHUNK))
def test_simulated_cluster_keeps_every_safety_and_liveness_property(first: int) -> None:
    for seed in range(first, min(first + CHUNK, SEEDS)):
        run_seed(seed)


def test_a_seed_replays_exactly() -> None:
    """Same seed, same run: the basis of `reproduce with seed=...`."""

    def trace(seed: int) -> list[tuple[str, str, int, int]]:
        sim = Simulation(seed)
        sim.run()
        return [
            (n.id, n.core.role if n.core else "down", n.applied, n.storage.last_index())
            for n in sim.nodes.values()
        ] + [(d.decode(), "", e.index, e.term) for d, e in sorted(sim.history.acked.items())]

    assert trace(7) == trace(7)
