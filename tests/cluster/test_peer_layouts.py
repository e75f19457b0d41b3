"""`PeerCalls.live_layout` against a real node, which is then killed: the
first ask is awaited, later ones run in the background once the last is
older than the max age (the last answer standing meanwhile), and a node that
no longer answers has no layout (what the Kafka door's broker list relies on
for nodes its shard never hears from)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from laminar.replication.auth import PeerAuth
from laminar.replication.calls import PeerCalls
from laminar.replication.nodes import Node, NodeView
from tests.support.clock import FakeClock
from tests.system.nodes import start_node


def test_a_node_s_live_layout_is_asked_again_in_the_background_and_goes_with_it(
    tmp_path: Path,
) -> None:
    node = start_node(tmp_path, cores=2)
    clock = FakeClock()
    view = NodeView(1, (Node("n1", node.host, node.port),))
    calls = PeerCalls(PeerAuth("n0", None), lambda: view, 1 << 20, clock)

    async def run() -> None:
        first = await calls.live_layout("n1", max_age_s=1.0)
        assert first is not None and list(first.shard_ports) == node.shard_ports
        node.kill()
        assert await calls.live_layout("n1", max_age_s=1.0) == first, "young enough: not asked"
        clock.advance(1.5)
        assert await calls.live_layout("n1", max_age_s=1.0) == first, "never waits on an ask"
        for _ in range(400):  # the background ask fails at once (connection refused)
            if await calls.live_layout("n1", max_age_s=1.0) is None:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the failed background ask did not take the layout away")
        calls.close()

    try:
        asyncio.run(run())
    finally:
        node.kill()
