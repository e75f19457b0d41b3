"""System tests: real `laminar-node` processes on ephemeral ports (see nodes.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.system.nodes import RunningNode, start_node


@pytest.fixture
def node(tmp_path: Path) -> Iterator[RunningNode]:
    """A two-shard node on the default runtime, stopped after the test."""
    with start_node(tmp_path, cores=2) as running:
        yield running
