"""The simulation checks over many seeds and large clusters: minutes, not seconds.

Deselected unless LAMINAR_SOAK=1 (`make soak` sets it; tests/conftest.py).
`SWIM_SOAK_SEEDS` sets how many seeds per size (default 100); a failure prints
its seed, and `check_seed(seed, size)` in `test_sim.py` replays it.
"""

from __future__ import annotations

import os

import pytest

from laminar.swim import SwimConfig
from tests.swim.test_sim import check_seed

pytestmark = pytest.mark.soak
SEEDS = int(os.environ.get("SWIM_SOAK_SEEDS", "100"))


@pytest.mark.parametrize("seed", range(10_000, 10_000 + SEEDS))
def test_soak_small_clusters(seed: int) -> None:
    check_seed(seed, size=5 + seed % 60)


@pytest.mark.parametrize("seed", range(20_000, 20_000 + max(1, SEEDS // 10)))
def test_soak_without_lifeguard(seed: int) -> None:
    check_seed(seed, size=50, config=SwimConfig().without_lifeguard(), check_codec=False)


@pytest.mark.timeout(3600)  # a lossy 1,000-member plan runs for many minutes
@pytest.mark.parametrize("seed", range(30_000, 30_000 + max(1, SEEDS // 50)))
def test_soak_a_thousand_members(seed: int) -> None:
    check_seed(seed, size=1000, check_codec=False)
