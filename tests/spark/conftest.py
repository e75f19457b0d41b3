"""One laminar node for every Spark test (the SparkSession, `spark`, is
tests/conftest.py's, shared with the composition matrix)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from laminar.client import Client
from tests.system.nodes import RunningNode, start_node


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningNode]:
    with start_node(tmp_path_factory.mktemp("spark-node"), cores=2) as running:
        yield running


@pytest.fixture(scope="session")
def client(node: RunningNode) -> Iterator[Client]:
    with Client(node.bootstrap) as c:
        yield c
