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
    RetryPolicy,
    UnknownTopicError,
)
from laminar.client.protocol import PROBE_AFTER_S
from laminar.placement import partition_id, shard_for
from laminar.wire import ErrorCode, Op, producer_stamp
from tests.support import wait_until, wait_until_async

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
    """As `Client`'s: a timeout counts as a lost answer, retried when safe."""

    async def main() -> None:
        async with AsyncClient(node.bootstrap, timeout_s=0.3) as c:
            info = await c.create_topic("t", partitions=1)
            with pytest.raises(OffsetOutOfRangeError):
                await c.fetch("t", 0, 3)
            await c.produce("t", 0, [b"a"])
            node.inject(Fault("ignore", op=Op.FETCH))
            fetches = node.count(Op.FETCH)
            ignored = asyncio.ensure_future(c.fetch("t", 0, 0))
            await wait_until_async(lambda: node.count(Op.FETCH) > fetches, "the ignored fetch")
            assert await c.offsets("t", 0) == (0, 1)  # answered meanwhile: not silent
            assert [r.value for r in await ignored] == [b"a"]  # timed out, asked again
            node.inject(Fault("ignore", op=Op.PRODUCE))  # alone on its connection: silent
            assert await c.produce("t", 0, [b"b"]) == 1
            assert len(node.records(partition_id(info.topic_id, 0))) == 2
        async with AsyncClient(node.bootstrap, timeout_s=0.3, idempotent=False) as c:
            node.inject(Fault("ignore", op=Op.PRODUCE))
            with pytest.raises(OutcomeUnknownError, match="no answer"):
                await c.produce("t", 0, [b"x"])
            assert await c.offsets("t", 0) == (0, 2)  # a new connection (ignored: not applied)

    run(main())


def test_a_frozen_node_fails_every_request_on_the_connection_at_once(
    node: FakeNode, run: Runner
) -> None:
    """As `Client`'s: the first deadline on a silent connection fails them all."""

    async def main() -> int:
        async with AsyncClient(node.bootstrap, timeout_s=0.5, idempotent=False) as c:
            info = await c.create_topic("t", partitions=1)
            node.freeze()
            first = asyncio.ensure_future(c.produce("t", 0, [b"first"]))
            await asyncio.sleep(0.2)  # pacing: `second`'s own deadline comes 0.2 s later
            second = asyncio.ensure_future(c.produce("t", 0, [b"second"]))
            for pending in (first, second):
                with pytest.raises(OutcomeUnknownError, match="nothing else from it"):
                    await pending  # `second` by `first`'s deadline, not its own
            node.thaw()
            pid = partition_id(info.topic_id, 0)
            await asyncio.to_thread(
                wait_until, lambda: len(node.records(pid)) == 2, "the thawed node applied both"
            )
            return await c.produce("t", 0, [b"after"])  # a new connection

    assert run(main()) == 2


def test_a_frozen_node_is_found_silent_by_a_probe_long_before_the_deadline(
    node: FakeNode, run: Runner
) -> None:
    """As `Client`'s: with the default `timeout_s`, a ping finds the silence."""

    async def main() -> float:
        async with AsyncClient(node.bootstrap, idempotent=False) as c:
            await c.create_topic("t", partitions=1)
            node.freeze()
            start = time.monotonic()
            with pytest.raises(OutcomeUnknownError, match="nothing else from it"):
                await c.produce("t", 0, [b"frozen"])
            node.thaw()
            return (time.monotonic() - start) / c.timeout_s

    assert run(main()) < 1 / 3


def test_a_slow_answer_on_a_live_connection_is_not_silence(node: FakeNode, run: Runner) -> None:
    """As `Client`'s: the probe is answered, the held request runs to its deadline."""

    async def main() -> None:
        async with AsyncClient(node.bootstrap, timeout_s=3 * PROBE_AFTER_S, idempotent=False) as c:
            await c.create_topic("t", partitions=1)
            node.inject(Fault("ignore", op=Op.PRODUCE))
            with pytest.raises(OutcomeUnknownError) as lost:
                await c.produce("t", 0, [b"held"])
            assert "nothing else from it" not in str(lost.value)
            assert await c.produce("t", 0, [b"next"]) >= 0

    run(main())


def test_a_silent_bootstrap_address_is_passed_over(
    node: FakeNode, silent_address: str, run: Runner
) -> None:
    """As `Client`'s: the next address is asked after `connect_timeout_s`."""

    async def main() -> None:
        both = f"{silent_address},{node.bootstrap}"
        start = time.monotonic()
        async with AsyncClient(both, timeout_s=60, connect_timeout_s=0.3) as c:
            assert time.monotonic() - start < 30
            await c.create_topic("t", partitions=1)
            assert await c.produce("t", 0, [b"x"]) == 0
        with pytest.raises(CannotConnectError, match=f"{silent_address}: no answer"):
            async with AsyncClient(f"{silent_address},{silent_address}", connect_timeout_s=0.3):
                pass

    run(main())


def test_a_bootstrap_node_not_ready_yet_is_passed_over(node: FakeNode, run: Runner) -> None:
    """As `Client`'s: NOT_READY sends the metadata request to the next address."""
    with FakeNode() as loading:
        loading.inject(Fault("error", op=Op.METADATA, code=ErrorCode.NOT_READY))

        async def main() -> None:
            async with AsyncClient(f"{loading.bootstrap},{node.bootstrap}") as c:
                await c.create_topic("t", partitions=1)

        run(main())
        assert [r.op for r in loading.received] == [Op.METADATA]


def test_long_poll_and_cancellation(node: FakeNode, run: Runner) -> None:
    async def main() -> None:
        async with AsyncClient(node.bootstrap) as c, AsyncClient(node.bootstrap) as w:
            await c.create_topic("t", partitions=2)
            fetches = node.count(Op.FETCH)
            poll = asyncio.ensure_future(c.fetch("t", 0, 0, max_wait_ms=10_000))
            await wait_until_async(lambda: node.count(Op.FETCH) > fetches, "the long poll")
            start = time.monotonic()
            await w.produce("t", 0, [b"late"])
            assert [r.value for r in await poll] == [b"late"]
            assert time.monotonic() - start < 9
            # A cancelled long poll leaves its connection usable for others.
            other = c.cluster.route("t", 1) if c.cluster else None
            assert other is not None
            fetches = node.count(Op.FETCH)
            stuck = asyncio.ensure_future(c.fetch("t", 1, 0, max_wait_ms=10_000))
            await wait_until_async(lambda: node.count(Op.FETCH) > fetches, "the stuck long poll")
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


def test_close_leaves_no_connect_running(node: FakeNode, run: Runner) -> None:
    """A connect whose caller gave up goes on (callers share it); close() must
    end it, or asyncio.run finds it at exit and, when it fails then, prints
    "unhandled exception during asyncio.run() shutdown" (seen when `consume
    --follow` stopped while the node was down)."""

    async def main() -> list[asyncio.Task[object]]:
        client = AsyncClient(node.bootstrap)
        caller = asyncio.ensure_future(client.connect())
        await asyncio.sleep(0)  # the caller has started the shared connect
        caller.cancel()
        await client.close()
        return [
            t
            for t in asyncio.all_tasks()
            if not t.done() and "AsyncClient._open" in repr(t.get_coro())
        ]

    assert run(main()) == []
