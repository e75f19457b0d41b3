"""The clients' producer window against a real `laminar-node`: a batch whose
answer was lost is sent again only while the node still remembers it, so it
gets its original index back, never `DuplicateSequenceError`.

The failure this guards (seen in the bench under load): a client kept sending
a partition's later batches while one batch, its answer lost, waited to be
sent again; once more than the node's `BATCHES_MAX` batches were appended
after it, its resend was answered DUPLICATE_SEQUENCE and the produce raised,
for a batch the producer had every right to send again. Each test loses the
answer of batch 0 deterministically (the connection fails after the node
appended it and before the client read the answer), holds its resend back
until the producer has gone as far ahead as the client lets it, and checks
delivery by identity: every acknowledged record in the partition exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from laminar.client import AsyncClient, Client, ConnectionLostError
from laminar.client.aio_connection import AsyncConnection
from laminar.shards.idempotence import BATCHES_MAX
from laminar.wire import PRODUCER_WINDOW
from tests.support import wait_until, wait_until_async
from tests.system.nodes import RunningNode, start_node

LATER = 2 * PRODUCER_WINDOW
"""Batches produced after the one whose answer is lost: well past the window."""


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningNode]:
    with start_node(tmp_path_factory.mktemp("window"), cores=2) as running:
        yield running


def _value(i: int) -> bytes:
    return b"batch-%d" % i


def _check_delivered(watcher: Client, topic: str, firsts: list[int]) -> None:
    """Batch i (one record) acknowledged at index firsts[i], and the partition
    holds each batch exactly once, in order."""
    assert firsts == list(range(1 + LATER))
    records = watcher.fetch(topic, 0, 0, max_records=10 * (1 + LATER))
    assert [r.value for r in records] == [_value(i) for i in range(1 + LATER)]
    assert watcher.offsets(topic, 0).highest == 1 + LATER


def test_the_node_remembers_the_whole_window() -> None:
    assert BATCHES_MAX >= PRODUCER_WINDOW


def test_blocking_client_resend_after_a_lost_answer(node: RunningNode) -> None:
    """`Client`: batch 0 sent, appended, its connection lost before the answer
    was read; the caller goes on producing and asks for batch 0's result last
    (only then does the blocking client send it again, unless the window made
    it settle batch 0 first)."""
    topic = "lost-answer-blocking"
    with Client(node.bootstrap) as client, Client(node.bootstrap) as watcher:
        client.create_topic(topic, partitions=1)
        first = client.produce_nowait(topic, 0, [_value(0)])
        wait_until(lambda: watcher.offsets(topic, 0).highest == 1, "batch 0 appended")
        for conn in list(client._conns.values()):
            conn.close()  # the answer to batch 0, unread, goes with the connection
        later = [client.produce(topic, 0, [_value(i)]) for i in range(1, 1 + LATER)]
        _check_delivered(watcher, topic, [first.result(), *later])


class _HeldResends(AsyncClient):
    """An `AsyncClient` whose retries wait for `resend` (the test's hand on
    the moment a lost batch goes out again)."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap)
        self.resend = asyncio.Event()
        self.retries = 0

    async def _recover(self) -> None:
        self.retries += 1
        await self.resend.wait()
        await super()._recover()


def test_async_client_resend_after_a_lost_answer(node: RunningNode) -> None:
    """`AsyncClient`: batch 0 sent, appended, its connection failed before the
    answer was read; its retry is held until the later batches are all
    acknowledged or the window stops them, then let go."""
    topic = "lost-answer-async"

    async def main(watcher: Client) -> None:
        client = _HeldResends(node.bootstrap)
        async with client:
            await client.create_topic(topic, partitions=1)
            address = client.cluster.route(topic, 0).address if client.cluster else None
            assert address is not None
            await client.ping(topic, 0)  # the shard's connection is open
            conn = client._conns[address]
            first = asyncio.ensure_future(client.produce(topic, 0, [_value(0)]))
            await _until_flushed(conn)
            # The loop is held from here on (a wait that does not yield to it):
            # the answer cannot be read.
            wait_until(lambda: watcher.offsets(topic, 0).highest == 1, "batch 0 appended")
            conn._fail(ConnectionLostError("connection lost (by the test)"))
            later = asyncio.ensure_future(_produce_later(client, topic))
            await wait_until_async(
                lambda: client.retries == 1 and (later.done() or _waits_for_room(client, topic)),
                "the retry held, the later batches acknowledged or stopped by the window",
            )
            assert not first.done()
            client.resend.set()
            firsts = [await first, *await later]
        _check_delivered(watcher, topic, firsts)

    with Client(node.bootstrap) as watcher:
        asyncio.run(main(watcher))


async def _until_flushed(conn: AsyncConnection) -> None:
    """Yield until the one request is written to the socket. Its answer cannot
    have been read then: the loop runs this task before the reader's I/O."""
    while not (conn.in_flight == 1 and conn._outbox.pending_bytes == 0):
        await asyncio.sleep(0)


async def _produce_later(client: AsyncClient, topic: str) -> list[int]:
    return [await client.produce(topic, 0, [_value(i)]) for i in range(1, 1 + LATER)]


def _waits_for_room(client: AsyncClient, topic: str) -> bool:
    """Whether a produce to the partition waits for its window."""
    return client._producer.queued((topic, 0)) > 0
