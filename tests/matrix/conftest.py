"""One running topology per name for the whole session, shared by every check.

pytest groups the checks by the session-scoped `topology` parameter, so one
topology runs at a time: all checks on `single`, then on `static3`, then on
`gossip4`. Each check heals its topology (restarts what it killed) when it ends.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.matrix.topologies import NAMES, Topology, start


@pytest.fixture(scope="session", params=NAMES)
def topology(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Topology]:
    running = start(request.param, tmp_path_factory.mktemp(f"matrix-{request.param}"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def healed(topology: Topology) -> Iterator[Topology]:
    """The topology, with what the check killed restarted when it ends."""
    try:
        yield topology
    finally:
        topology.heal()
