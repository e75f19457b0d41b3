"""The same scenarios against `Client` and `AsyncClient` on a real node: records,
topics and atomic writes (committed, aborted, and with a batch whose answer
was lost and that was sent again), so the two clients cannot drift apart.

Each scenario is written once, in blocking style: the asyncio client runs on
a loop in its own thread, and `Blocking` turns its coroutines (and those of
the atomic writes it returns) into calls that wait.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from laminar.client import (
    AsyncAtomicWrite,
    AsyncClient,
    AsyncStager,
    Client,
    ConnectionLostError,
    Record,
    new_write_id,
)
from tests.delivery import assert_exactly_once
from tests.system.nodes import RunningNode, start_node
from tests.system.test_atomic_writes import _topic


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningNode]:
    with start_node(tmp_path_factory.mktemp("both"), cores=2) as running:
        yield running


class Loop:
    """An event loop in a thread of its own, for driving `AsyncClient` from a test."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class Blocking:
    """An asyncio object used from the test's thread: each method runs on the
    loop and is waited for; a task it returns becomes a `.result()` that
    waits; atomic writes and stagers it returns are wrapped too."""

    def __init__(self, target: Any, loop: Loop) -> None:
        self.target = target
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.target, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            async def on_loop() -> Any:
                result = attr(*args, **kwargs)
                return await result if asyncio.iscoroutine(result) else result

            return self._wrap(self._loop.run(on_loop()))

        return call

    def _wrap(self, result: Any) -> Any:
        if isinstance(result, AsyncAtomicWrite | AsyncStager):
            return Blocking(result, self._loop)
        if isinstance(result, asyncio.Future):
            return _Waiting(result, self._loop)
        return result

    def __enter__(self) -> Blocking:
        self._loop.run(self.target.__aenter__())
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._loop.run(self.target.__aexit__(*exc_info))


class _Waiting:
    def __init__(self, future: asyncio.Future[Any], loop: Loop) -> None:
        self._future, self._loop = future, loop

    def result(self) -> Any:
        async def wait() -> Any:
            return await self._future

        return self._loop.run(wait())


class _CountingClient(Client):
    """A `Client` that counts its retries (each goes through `_recover`)."""

    retries = 0

    def _recover(self) -> None:
        self.retries += 1
        super()._recover()


class _CountingAsyncClient(AsyncClient):
    """An `AsyncClient` that counts its retries (each goes through `_recover`)."""

    retries = 0

    async def _recover(self) -> None:
        self.retries += 1
        await super()._recover()


def _lose_answers_blocking(client: Client) -> None:
    """Close every connection: answers not read yet are lost with them."""
    for conn in list(client._conns.values()):
        conn.close()


async def _lose_answers_async(client: AsyncClient) -> None:
    """Once every request in flight is written, fail the connections carrying
    them: their answers, not read yet, are lost (the loop is held until then)."""
    busy = [conn for conn in client._conns.values() if conn.in_flight]
    while any(conn._outbox.pending_bytes for conn in busy):
        await asyncio.sleep(0)
    for conn in busy:
        conn._fail(ConnectionLostError("connection lost (by the test)"))


Kind = tuple[Any, Callable[[], int], Callable[[], None]]
"""(the client, its retry count, a way to lose the answers in flight)."""


@pytest.fixture(params=["Client", "AsyncClient"])
def both(request: pytest.FixtureRequest, node: RunningNode) -> Iterator[Kind]:
    if request.param == "Client":
        with _CountingClient(node.bootstrap) as client:
            yield client, lambda: client.retries, lambda: _lose_answers_blocking(client)
        return
    loop = Loop()
    aclient = _CountingAsyncClient(node.bootstrap)
    try:
        with Blocking(aclient, loop) as blocking:
            yield (
                blocking,
                lambda: aclient.retries,
                lambda: loop.run(_lose_answers_async(aclient)),
            )
    finally:
        loop.close()


def _values(client: Any, topic: str, partition: int) -> list[bytes]:
    _, highest = client.offsets(topic, partition)
    records: list[Record] = client.fetch(topic, partition, 0, max_records=highest or 1)
    return [r.value for r in records]


def test_records_and_topics(both: Kind) -> None:
    client, _, _ = both
    topic = _topic(client, 2)
    assert client.produce(topic, 0, [b"a", b"b"]) == 0
    pending = [client.produce_nowait(topic, 1, [v]) for v in (b"c", b"d")]
    assert [p.result() for p in pending] == [0, 1]
    assert [r.value for r in client.fetch_nowait(topic, 0, 0).result()] == [b"a", b"b"]
    assert len(client.fetch_batch_nowait(topic, 1, 0).result()) == 2
    assert len(client.fetch_batch(topic, 1, 1)) == 1
    assert tuple(client.offsets(topic, 1)) == (0, 2)
    assert client.offset_for_timestamp(topic, 0, 0) == 0
    sent = client.send(topic, [b"k"], keys=[b"key"])
    assert sum(s.records for s in sent) == 1
    assert client.alter_topic(topic, config={"retention.ms": 60_000}).config
    assert [d.topic.name for d in client.describe_topics([topic])] == [topic]
    assert client.describe_topic(topic).partitions[1].highest == 2
    assert topic in {t.name for t in client.list_topics()}
    assert client.ping(topic, 1).round_trip_ms >= 0
    client.delete_topic(topic)
    assert topic not in {t.name for t in client.list_topics()}


def test_an_atomic_write_publishes_everything_once(both: Kind) -> None:
    client, _, _ = both
    topic = _topic(client, 2)
    with client.begin_write() as write:
        write.send(topic, 0, [b"w0", b"w1"])
        write.send(topic, 1, [b"w2"])
        write.send(topic, 0, [b"w3"])
        assert _values(client, topic, 0) == []  # staged: invisible
        result = write.commit()
    assert result.first and result.records == 4
    assert write.commit() == result
    assert _values(client, topic, 0) == [b"w0", b"w1", b"w3"]
    assert _values(client, topic, 1) == [b"w2"]
    assert client.write_status(write.write_id) in ("committed", "done")
    again = client.commit_write(write.write_id, ())  # a commit sent again
    assert not again.first
    assert _values(client, topic, 0) == [b"w0", b"w1", b"w3"]


def test_an_aborted_write_publishes_nothing(both: Kind) -> None:
    client, _, _ = both
    topic = _topic(client, 1)
    write = client.begin_write()
    write.send(topic, 0, [b"never"])
    write.abort()
    assert client.write_status(write.write_id) == "aborted"
    with pytest.raises(RuntimeError, match="aborted"):
        write.commit()
    with pytest.raises(RuntimeError, match="finished"):
        write.send(topic, 0, [b"late"])

    with pytest.raises(ZeroDivisionError), client.begin_write() as failed:
        failed.send(topic, 0, [b"never either"])
        raise ZeroDivisionError  # leaving the block uncommitted aborts it
    assert client.write_status(failed.write_id) == "aborted"
    assert _values(client, topic, 0) == []


def test_a_staged_batch_whose_answer_was_lost_is_sent_again_and_staged_once(
    both: Kind,
) -> None:
    client, retries, lose_answers = both
    topic = _topic(client, 2)
    stager = client.stager(new_write_id(), task=3)
    stager.send(topic, 0, [b"s0"])
    stager.send_nowait(topic, 0, [b"s1", b"s2"])
    stager.send_nowait(topic, 1, [b"s3"])
    before = retries()
    lose_answers()
    parts = stager.finish()  # each lost batch is sent again: the node stages it once
    assert retries() > before
    assert sorted((p.batches, p.records) for p in parts) == [(1, 1), (2, 3)]
    result = client.commit_write(stager.write_id, parts)
    assert result.records == 4
    seen = _values(client, topic, 0) + _values(client, topic, 1)
    assert_exactly_once(seen, [b"s0", b"s1", b"s2", b"s3"])
