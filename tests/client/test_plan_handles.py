"""A plan's `Start`/`Join`/`Drop` on both shells (what a group consumer's
prefetch uses): a started call runs while the plan goes on, `Join` is its
answer, `Drop` abandons it at once, answer or not."""

from __future__ import annotations

import asyncio
from typing import Any

from laminar.client import AsyncClient, Client, calls
from laminar.client.core import Drop, Join, Plan, Start
from laminar.wire import Op

from .conftest import Runner
from .fakenode import FakeNode, Fault


def _start_join_and_drop() -> Plan[tuple[Any, Any]]:
    """Start two fetches; join the first; drop the second (its node never answers)."""
    joined = yield Start(calls.fetch("events", 0, 0, 1 << 20, 10, 0))
    dropped = yield Start(calls.fetch("events", 1, 0, 1 << 20, 10, 0))
    records = yield Join(joined)
    yield Drop(dropped)
    return records, dropped


def test_the_blocking_client_joins_a_started_call_and_drops_one_without_waiting(
    node: FakeNode,
) -> None:
    with Client(node.bootstrap) as c:
        c.create_topic("events", partitions=2)
        c.produce("events", 0, [b"a", b"b"])
        node.inject(Fault("ignore", op=Op.FETCH, shard=c.cluster.route("events", 1).shard_id))
        records, dropped = c._run(_start_join_and_drop())
        assert [r.value for r in records] == [b"a", b"b"]
        assert dropped.done, "abandoned: result() would not wait"
        assert all(not conn._proto.in_flight for conn in c._conns.values())


def test_the_async_client_joins_a_started_call_and_drops_one_by_cancelling_it(
    node: FakeNode, run: Runner
) -> None:
    async def main() -> None:
        async with AsyncClient(node.bootstrap) as c:
            await c.create_topic("events", partitions=2)
            await c.produce("events", 0, [b"a", b"b"])
            view = c.cluster
            assert view is not None
            shard = view.route("events", 1).shard_id
            node.inject(Fault("ignore", op=Op.FETCH, shard=shard))
            records, dropped = await c._run(_start_join_and_drop())
            assert [r.value for r in records] == [b"a", b"b"]
            await asyncio.sleep(0)
            assert dropped.cancelled()

    run(main())
