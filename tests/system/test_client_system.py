"""The client against a real `laminar-node --cores 2`: routing, records, errors, restarts."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from laminar.client import (
    AsyncClient,
    Client,
    ClusterView,
    InvalidRequestError,
    OffsetOutOfRangeError,
    OutcomeUnknownError,
    RecordTooLargeError,
    RetryPolicy,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)
from laminar.client.producer import Key
from laminar.placement import partition_id, shard_for
from laminar.reactor import StockEventLoop, UringEventLoop, uring_unavailable_reason
from laminar.wire import ErrorCode
from tests.support import wait_until, wait_until_async

from .nodes import RunningNode, bytes_in, start_node


def test_round_trip_across_partitions_and_shards(node: RunningNode) -> None:
    with Client(node.bootstrap) as c:
        assert c.cluster.shard_count == 2
        assert [port for _, port in c.cluster.shard_addresses] == node.shard_ports
        info = c.create_topic("events", partitions=16)
        batches = {p: [f"{p}-{i}".encode() * (1 + i % 7) for i in range(50)] for p in range(16)}
        pending = [c.produce_nowait("events", p, vals) for p, vals in batches.items()]
        assert [w.result() for w in pending] == [0] * 16
        fetches = {p: c.fetch_nowait("events", p, 0) for p in range(16)}
        for p, waiting in fetches.items():
            records = waiting.result()
            assert [r.value for r in records] == batches[p]
            assert [r.index for r in records] == list(range(50))
            assert c.offsets("events", p) == (0, 50)
        owners = set()
        for p in range(16):
            pid = partition_id(info.topic_id, p)
            pong = c.ping("events", p)
            owners.add(pong.shard_id)
            # Shard-direct: the owner's own socket received it, nothing was forwarded.
            assert pong.shard_id == pong.received_by == shard_for(pid, 2)
        assert owners == {0, 1}


def test_keys_headers_and_empty_values_are_preserved(node: RunningNode) -> None:
    with Client(node.bootstrap) as c:
        c.create_topic("t", partitions=2)
        values = [b"", b"v1", b"\x00\xff" * 100, b"v3"]
        keys = [None, b"", b"key", b"k\x00"]
        headers = [{"a": b"1"}, None, {"x": b"", "y": b"\xff"}, {}]
        first = c.produce("t", 1, values, keys=keys, headers=headers)
        records = c.fetch("t", 1, first)
        assert [(r.value, r.key) for r in records] == list(zip(values, keys, strict=True))
        assert [r.headers for r in records] == [{"a": b"1"}, None, {"x": b"", "y": b"\xff"}, None]
        assert all(r.timestamp_ms > 0 for r in records)
        ts = records[0].timestamp_ms
        assert c.offset_for_timestamp("t", 1, ts) == 0
        assert c.offset_for_timestamp("t", 1, ts + 3_600_000) == 4


def test_typed_errors_carry_the_server_code(node: RunningNode) -> None:
    with Client(node.bootstrap) as c:
        c.create_topic("t", partitions=2)
        with pytest.raises(TopicExistsError):
            c.create_topic("t")
        with pytest.raises(UnknownTopicError):
            c.fetch("missing", 0, 0)
        with pytest.raises(UnknownPartitionError):
            c.produce("t", 5, [b"x"])
        c.produce("t", 0, [b"x"])
        with pytest.raises(OffsetOutOfRangeError) as oor:
            c.fetch("t", 0, 100)
        assert oor.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
        c.delete_topic("t")
        with pytest.raises(UnknownTopicError):
            c.delete_topic("t")
        # Another client still holds the deleted topic in its metadata: the node says no.
    with Client(node.bootstrap) as stale, Client(node.bootstrap) as admin:
        admin.create_topic("gone", partitions=1)
        stale.refresh_metadata()
        admin.delete_topic("gone")
        with pytest.raises(UnknownTopicError):
            stale.fetch("gone", 0, 0)


def test_requests_are_retried_across_a_shard_restart(node: RunningNode) -> None:
    with Client(node.bootstrap, retry=RetryPolicy(budget_s=20)) as c:
        c.create_topic("t", partitions=8)
        owned = [p for p in range(8) if c.cluster.route("t", p).shard_id == 1]
        for p in owned:
            c.produce("t", p, [b"before"])
        node.kill_shard(1, wait_restart=False)
        # Idempotent requests ride out the restart (retried with fresh metadata).
        for p in owned:
            assert [r.value for r in c.fetch("t", p, 0)] == [b"before"]
        assert c.offsets("t", owned[0]) == (0, 1)
        # A produce on the connection the dead shard left behind is not lost into it.
        assert c.produce("t", owned[0], [b"after"]) == 1
        assert [r.value for r in c.fetch("t", owned[0], 0)] == [b"before", b"after"]


def test_produce_during_a_shard_kill_is_acknowledged_or_uncertain(node: RunningNode) -> None:
    """Every acknowledged batch is in the log once; a batch whose answer was lost
    is reported as uncertain, never silently retried into a duplicate."""
    with Client(node.bootstrap, retry=RetryPolicy(budget_s=20)) as c:
        c.create_topic("t", partitions=1)
        acked: list[bytes] = []
        uncertain: list[bytes] = []
        stop = threading.Event()

        def writer() -> None:
            n = 0
            while not stop.is_set():
                value = b"r%d" % n
                n += 1
                try:
                    c.produce("t", 0, [value])
                    acked.append(value)
                except OutcomeUnknownError:
                    uncertain.append(value)

        thread = threading.Thread(target=writer)
        thread.start()
        wait_until(lambda: len(acked) >= 5, "produces acknowledged before the kill")
        node.kill_shard(c.cluster.route("t", 0).shard_id)  # returns once a new one serves
        at_kill = len(acked)
        wait_until(lambda: len(acked) >= at_kill + 5, "produces acknowledged after the restart")
        stop.set()
        thread.join(30)
        values = [r.value for r in c.fetch("t", 0, 0, max_records=100_000)]
        assert len(values) == len(set(values))  # nothing twice
        assert set(acked) <= set(values)  # nothing acknowledged lost
        assert set(values) <= set(acked) | set(uncertain)


LOOPS = {"asyncio": StockEventLoop, "uring": UringEventLoop}


@pytest.mark.parametrize("loop", list(LOOPS))
def test_async_client_long_poll_and_concurrency(node: RunningNode, loop: str) -> None:
    if loop == "uring" and uring_unavailable_reason() is not None:
        pytest.skip(f"io_uring unavailable: {uring_unavailable_reason()}")

    async def main() -> None:
        async with AsyncClient(node.bootstrap) as c, AsyncClient(node.bootstrap) as writer:
            await c.create_topic("t", partitions=8)
            firsts = await asyncio.gather(*(c.produce("t", i % 8, [b"x"] * 10) for i in range(64)))
            assert sorted(firsts) == sorted(list(range(0, 80, 10)) * 8)
            received = bytes_in(node)
            poll = asyncio.ensure_future(c.fetch("t", 3, 80, max_wait_ms=20_000))
            await wait_until_async(lambda: bytes_in(node) > received, "the long poll at the node")
            assert not poll.done()  # waiting on the node for a record
            start = time.monotonic()
            await writer.produce("t", 3, [b"arrived"])
            records = await poll
            assert [r.value for r in records] == [b"arrived"]
            assert time.monotonic() - start < 15  # answered by the append, not the timeout
            assert await c.fetch("t", 3, 81, max_wait_ms=100) == []

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        runner.run(main())


def test_async_calls_within_a_linger_leave_as_one_batch(node: RunningNode) -> None:
    """`AsyncClient(linger_s=...)`: calls made in separate loop passes within
    the linger reach the node as one batch, each answered with its own index."""

    async def main() -> None:
        async with AsyncClient(node.bootstrap, linger_s=0.2) as c:
            await c.create_topic("linger", partitions=1)
            sent: list[list[bytes]] = []
            send = c._producer._send

            async def counted(key: Key, values: Sequence[bytes], *rest: object) -> int:
                sent.append(list(values))
                return await send(key, values, *rest)  # type: ignore[arg-type]

            c._producer._send = counted  # type: ignore[method-assign]
            calls = []
            for i in range(5):  # one call per pass
                calls.append(asyncio.create_task(c.produce("linger", 0, [b"v%d" % i])))
                await asyncio.sleep(0)
            firsts = await asyncio.gather(*calls)
            assert sent == [[b"v%d" % i for i in range(5)]]
            records = await c.fetch("linger", 0, 0)
            acked = {b"v%d" % i: first for i, first in enumerate(firsts)}
            assert {r.value: r.index for r in records} == acked  # each once, where acked

    asyncio.run(main())


def _as_an_older_node_says(view: ClusterView) -> ClusterView:
    """`view` without the node's frame limit, as metadata from an older node
    comes: the client cannot check a request's size before sending it."""
    return dataclasses.replace(
        view, metadata=dataclasses.replace(view.metadata, max_frame_bytes=None)
    )


def test_a_frame_over_the_nodes_limit_is_refused_not_a_lost_connection(tmp_path: Path) -> None:
    """The node answers FRAME_TOO_LARGE and closes while the client is still
    sending (7 MiB does not fit the socket buffers): the client must read that
    answer, not report a broken connection ("the node stopped answering", or
    outcome unknown for a plain produce)."""
    limit = 1 << 20
    record = b"x" * (7 << 20)
    with start_node(tmp_path, cores=1, max_frame_bytes=limit) as node:
        for idempotent in (True, False):
            with Client(node.bootstrap, idempotent=idempotent) as c:
                assert c.cluster.max_frame_bytes == limit  # the node says its limit
                c.create_topic(f"t{int(idempotent)}")
                with pytest.raises(RecordTooLargeError, match=f"at most {limit} bytes"):
                    c.produce(f"t{int(idempotent)}", 0, [record])  # checked before sending
                c._view = _as_an_older_node_says(c.cluster)
                with pytest.raises(InvalidRequestError) as refused:
                    c.produce(f"t{int(idempotent)}", 0, [record])
                assert refused.value.code is ErrorCode.FRAME_TOO_LARGE

        async def main() -> None:
            async with AsyncClient(node.bootstrap) as c:
                c._view = _as_an_older_node_says(c.cluster or await c.refresh_metadata())
                with pytest.raises(InvalidRequestError) as refused:
                    await c.produce("t1", 0, [record])
                assert refused.value.code is ErrorCode.FRAME_TOO_LARGE

        for loop in LOOPS.values():
            with asyncio.Runner(loop_factory=loop) as runner:
                runner.run(main())
        with Client(node.bootstrap) as c:  # nothing was appended, the node is fine
            assert c.offsets("t1", 0) == c.offsets("t0", 0) == (0, 0)
