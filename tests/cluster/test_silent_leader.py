"""A leader that stops (SIGSTOP: the process is there, its kernel still accepts
connections and requests, nothing answers) must not stall the client that was
writing to it: the same `Client` finds the new leader (`tests.cluster.failover`).
The cable-pull variant runs in `tests/cluster/test_partitions.py`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.failover import same_client_fails_over, sigstop
from tests.cluster.nodes import Cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster.start(tmp_path_factory.mktemp("silent"), 3) as running:
        yield running


def test_the_same_client_writes_on_past_a_stopped_leader(cluster: Cluster) -> None:
    same_client_fails_over(cluster, "stopped", sigstop(cluster))
