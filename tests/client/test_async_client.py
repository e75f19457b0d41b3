"""AsyncClient against the fake node, on UringEventLoop and the stock loop."""

from __future__ import annotations

import asyncio
import time

import pytest

from laminar.client import (
    AsyncClient,
    CannotConnectError,
    NotReadyError,
    OffsetOutOfRangeError,
    OutcomeUnknownError,
    RequestTimeoutError,
    RetryPolicy,
    UnknownTopicError,
)
from laminar.placement import partition_id, shard_for
from laminar.wire import ErrorCode, Op, producer_stamp

from .conftest import Runner
from .fakenode import FakeNode, Fault


def test_round_trip(node: FakeNode, run: Runner) -> None:
    async def main() -> None:
        async with AsyncClient(node.bootstrap) as c:
            await c.create_topic("events", partitions=8)
            first = await c.produce("events", 3, [b"a", b"b"], keys=[b"k", None])
            recs = await c.fetch("events", 3, first)
            assert [(r.value, r.key) for r in recs] == [(b"a", b"k"), (b"b", None)]
            assert await c.offsets("events", 3) == (0, 2)
            assert [t.name for t in await c.list_topics()] == ["events"]
            desc = await c.describe_topic("events")
            assert desc.partitions[3].records == 2
            assert (await c.metadata()).node_id == "fake-node"
            assert (await c.ping("events", 3)).shard_id == desc.partitions[3].shard_id
            await c.delete_topic("events")
            with pytest.raises(UnknownTopicError):
                await c.fetch("events", 3, 0)

    run(main())


def test_concurrent_requests_pipeline_and_route_shard_direct(node: FakeNode, run: Runner) -> None:
    node.reverse_pipelined = True

    async def main() -> None:
        async with AsyncClient(node.bootstrap) as c:
            info = await c.create_topic("t", partitions=8)
            firsts = await asyncio.gather(*(c.produce("t", p % 8, [b"v"] * 4) for p in range(128)))
            for p in range(8):
                assert sorted(firsts[p::8]) == list(range(0, 64, 4))
            counts = await asyncio.gather(*(c.offsets("t", p) for p in range(8)))
            assert counts == [(0, 64)] * 8
            assert len(c._conns) == 3  # the node port (bootstrap) and one per shard
            return info.topic_id

    run(main())
    requests = node.partition_requests()
    assert {r.listener for r in requests} == {0, 1}
    assert all(r.listener == shard_for(r.partition_id, 2) for r in requests)


def test_retry_after_lost_connection_and_restart(node: FakeNode, run: Runner) -> None:
    async def main() -> None:
        async with AsyncClient(node.bootstrap, retry=RetryPolicy(budget_s=5)) as c:
            await c.create_topic("t", partitions=4)
            await c.produce("t", 0, [b"x"])
            node.inject(Fault("close_before", op=Op.FETCH))
            assert [r.value for r in await c.fetch("t", 0, 0)] == [b"x"]
            shard = c.cluster.route("t", 0).shard_id if c.cluster else -1
            node.stop(shard)
            asyncio.get_running_loop().call_later(0.4, node.start, shard)
            assert await c.offsets("t", 0) == (0, 1)

    run(main())


def test_produce_outcome_unknown_and_not_repeated(node: FakeNode, run: Runner) -> None:
    async def main() -> int:
        async with AsyncClient(node.bootstrap, idempotent=False) as c:
            info = await c.create_topic("t", partitions=1)
            node.inject(Fault("close_after", op=Op.PRODUCE))
            with pytest.raises(OutcomeUnknownError, match="may or may not"):
                await c.produce("t", 0, [b"once"])
            assert await c.offsets("t", 0) == (0, 1)
            return info.topic_id

    topic_id = run(main())
    assert node.records(partition_id(topic_id, 0)) == [b"\x00once"]


def test_an_idempotent_produce_is_resent_after_a_lost_answer(node: FakeNode, run: Runner) -> None:
    async def main() -> int:
        async with AsyncClient(node.bootstrap) as c:  # idempotent by default
            info = await c.create_topic("t", partitions=1)
            node.inject(Fault("close_after", op=Op.PRODUCE))
            assert await c.produce("t", 0, [b"once"]) == 1  # the fake appends the resend too
            return info.topic_id

    first, resent = node.records(partition_id(run(main()), 0))
    assert first == resent and producer_stamp(first) is not None


def test_errors_and_timeouts(node: FakeNode, run: Runner) -> None:
    async def main() -> None:
        async with AsyncClient(node.bootstrap, timeout_s=0.3) as c:
            await c.create_topic("t", partitions=1)
            with pytest.raises(OffsetOutOfRangeError):
                await c.fetch("t", 0, 3)
            node.inject(Fault("ignore", op=Op.FETCH))
            with pytest.raises(RequestTimeoutError):
                await c.fetch("t", 0, 0)
            assert await c.produce("t", 0, [b"x"]) == 0  # same connection, still good

    run(main())


def test_long_poll_and_cancellation(node: FakeNode, run: Runner) -> None:
    async def main() -> None:
        async with AsyncClient(node.bootstrap) as c, AsyncClient(node.bootstrap) as w:
            await c.create_topic("t", partitions=2)
            poll = asyncio.ensure_future(c.fetch("t", 0, 0, max_wait_ms=10_000))
            await asyncio.sleep(0.1)
            start = time.monotonic()
            await w.produce("t", 0, [b"late"])
            assert [r.value for r in await poll] == [b"late"]
            assert time.monotonic() - start < 9
            # A cancelled long poll leaves its connection usable for others.
            other = c.cluster.route("t", 1) if c.cluster else None
            assert other is not None
            stuck = asyncio.ensure_future(c.fetch("t", 1, 0, max_wait_ms=10_000))
            await asyncio.sleep(0.05)
            stuck.cancel()
            with pytest.raises(asyncio.CancelledError):
                await stuck
            await w.produce("t", 1, [b"y"])
            assert [r.value for r in await c.fetch("t", 1, 0)] == [b"y"]

    run(main())


def test_metadata_from_a_node_still_loading_is_asked_again(node: FakeNode, run: Runner) -> None:
    async def main() -> None:
        async with AsyncClient(node.bootstrap) as c:
            await c.create_topic("t", partitions=1)
        node.inject(Fault("error", op=Op.METADATA, code=ErrorCode.NOT_READY, times=3))
        async with AsyncClient(node.bootstrap) as c:
            assert (await c.describe_topic("t")).topic.name == "t"
        node.inject(Fault("error", op=Op.METADATA, code=ErrorCode.NOT_READY, times=1000))
        with pytest.raises(NotReadyError):
            async with AsyncClient(node.bootstrap, retry=RetryPolicy(budget_s=0.2)) as c:
                await c.metadata()

    run(main())


def test_cannot_connect(run: Runner) -> None:
    with FakeNode() as fake:
        address = fake.bootstrap

    async def main() -> None:
        c = AsyncClient(address, retry=RetryPolicy(budget_s=0))
        with pytest.raises(CannotConnectError, match=f"cannot reach {address}"):
            await c.connect()
        await c.close()

    run(main())
