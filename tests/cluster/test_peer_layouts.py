"""`PeerCalls.layout` against a real node: kept until asked with a max age it
outlived, then asked again, and a node that is gone fails that question (what
the Kafka door's broker list relies on for nodes its shard never hears from)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from laminar.replication.auth import PeerAuth
from laminar.replication.calls import PeerCalls
from laminar.replication.nodes import Node, NodeView
from tests.support.clock import FakeClock
from tests.system.nodes import start_node


def test_a_layout_older_than_its_max_age_is_asked_again_and_a_gone_node_fails(
    tmp_path: Path,
) -> None:
    node = start_node(tmp_path, cores=2)
    clock = FakeClock()
    view = NodeView(1, (Node("n1", node.host, node.port),))
    calls = PeerCalls(PeerAuth("n0", None), lambda: view, 1 << 20, clock)

    async def run() -> None:
        first = await calls.layout("n1")
        assert list(first.shard_ports) == node.shard_ports
        node.kill()
        assert await calls.layout("n1") == first, "kept without a max age"
        assert await calls.layout("n1", max_age_s=1.0) == first, "young enough"
        clock.advance(1.5)
        with pytest.raises(OSError):
            await calls.layout("n1", max_age_s=1.0)
        with pytest.raises(OSError):
            await calls.layout("n1")  # what failed is not kept

    try:
        asyncio.run(run())
    finally:
        node.kill()
