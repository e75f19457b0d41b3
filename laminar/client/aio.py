"""`AsyncClient`: the asyncio client, on the loop's sock_* methods.

The same routing, retry rule and results as `Client`, with coroutines. Tasks
pipeline naturally: every request awaits its own answer, and concurrent
requests to one shard share its connection:

    async with AsyncClient("127.0.0.1:7070") as c:
        firsts = await asyncio.gather(
            *(c.produce("events", p, batch) for p in range(8))
        )

It runs on the stock asyncio loop and on laminar's `UringEventLoop`. Nothing
is sent before the first request (or `connect()`), which fetches metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from laminar.client import calls
from laminar.client.aio_connection import AsyncConnection
from laminar.client.batch import RecordBatch
from laminar.client.errors import (
    ConnectionLostError,
    LaminarError,
    NotReadyError,
    UnknownPartitionError,
    UnknownTopicError,
)
from laminar.client.partitioner import StickyPartitioner
from laminar.client.producer import (
    AsyncProducer,
    ProducerSequences,
    is_idempotent,
    produce_call,
)
from laminar.client.protocol import CLIENT_MAX_FRAME_BYTES
from laminar.client.reader import PartitionReader
from laminar.client.results import (
    Offsets,
    PingResult,
    Record,
    Sent,
    TopicDescription,
    describe,
    expect,
)
from laminar.client.retry import Backoff, MetadataSearch, RetryPolicy, final_error, no_answer
from laminar.client.routing import (
    Address,
    ClusterView,
    RouteHints,
    metadata_timeout_s,
    parse_addresses,
)
from laminar.memory import tune_allocator
from laminar.wire import MetadataRequest, MetadataResponse, TopicInfo
from laminar.wire.messages import DEFAULT_FETCH_MAX_BYTES, DEFAULT_FETCH_MAX_RECORDS

T = TypeVar("T")


class AsyncClient:
    """An asyncio laminar client; see the module docstring. Use it from one
    event loop (the one it first ran on)."""

    def __init__(
        self,
        bootstrap: str = "127.0.0.1:7070",
        *,
        timeout_s: float = 30.0,
        connect_timeout_s: float = 5.0,
        retry: RetryPolicy | None = None,
        max_frame_bytes: int = CLIENT_MAX_FRAME_BYTES,
        read_from: str = "leader",
        idempotent: bool = True,
    ) -> None:
        if read_from not in ("leader", "follower"):
            raise ValueError(f"read_from is 'leader' or 'follower', not {read_from!r}")
        tune_allocator()  # fetch answers are MiB-sized buffers: see laminar.memory
        self.bootstraps: tuple[Address, ...] = parse_addresses(bootstrap)
        self.bootstrap: Address = self.bootstraps[0]
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.retry = retry or RetryPolicy()
        self._max_frame_bytes = max_frame_bytes
        self._conns: dict[Address, AsyncConnection] = {}
        self._connecting: dict[Address, asyncio.Task[AsyncConnection]] = {}
        self._view: ClusterView | None = None
        self.idempotent = idempotent
        self._sequences = ProducerSequences()
        self._producer = AsyncProducer(self._produce_batch)
        self._partitioner = StickyPartitioner()
        self._hints = RouteHints(read_from_followers=read_from == "follower")
        """Leaders and unreachable nodes learned from answers (kept across refreshes)."""
        self._generation = 0
        self._refresh_lock: asyncio.Lock | None = None
        self._closed = False

    # --- context and lifetime --------------------------------------------------------

    async def connect(self) -> AsyncClient:
        """Fetch metadata now (fails with `CannotConnectError` if the node is down)."""
        await self.refresh_metadata()
        return self

    async def __aenter__(self) -> AsyncClient:
        try:
            return await self.connect()
        except BaseException:
            await self.close()  # `async with` will not call __aexit__
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every connection; the client cannot be used afterwards. Connects
        still under way are cancelled and awaited, so none outlives the client
        (asyncio.run would report one that fails after its caller gave up)."""
        self._closed = True
        await self._producer.close()
        connecting = list(self._connecting.values())
        for task in connecting:
            task.cancel()
        await asyncio.gather(*connecting, return_exceptions=True)
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            await conn.close()

    # --- records ---------------------------------------------------------------------

    async def produce(
        self,
        topic: str,
        partition: int,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Mapping[str, bytes] | None] | None = None,
        *,
        producer_id: int | None = None,
        sequence: int | None = None,
    ) -> int:
        """Append records durably; the index of the first. Idempotent and
        retried by default; with `AsyncClient(idempotent=False)` never retried
        once sent (a lost answer raises `OutcomeUnknownError`): see
        `Client.produce`, also for `producer_id` and `sequence`."""
        sequences = self._sequences if self.idempotent else None
        if not is_idempotent(sequences, producer_id, sequence) or producer_id is not None:
            # Plain, or under the caller's own producer: sent as it is, unmerged.
            call = calls.produce(topic, partition, values, keys, headers, producer_id, sequence)
            if producer_id is None:
                return await self._call(call)
            alone = functools.partial(self._call, call)
            return await self._producer.produce((topic, partition), values, alone=alone)
        return await self._producer.produce((topic, partition), values, keys, headers)

    async def _produce_batch(
        self,
        key: tuple[str, int],
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None,
        headers: Sequence[Mapping[str, bytes] | None] | None,
    ) -> int:
        """One batch under the client's own producer of partition `key`; the
        sequence is taken now, as it leaves (`laminar.client.producer`)."""
        topic, partition = key
        return await self._call(
            produce_call(self._sequences, topic, partition, values, keys, headers, None, None)
        )

    async def send(
        self,
        topic: str,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Mapping[str, bytes] | None] | None = None,
    ) -> list[Sent]:
        """Append `values` to `topic`, choosing the partitions as Kafka's
        producer does: see `Client.send`."""
        try:
            if self._view is None:
                raise UnknownTopicError(topic)
            partitions = self._view.topic(topic).partitions
        except UnknownTopicError:  # no metadata yet, or the topic is new
            partitions = (await self.refresh_metadata()).topic(topic).partitions
        groups = self._partitioner.split(topic, partitions, values, keys, headers)
        firsts = await asyncio.gather(*(self.produce(topic, p, *records) for p, records in groups))
        return [
            Sent(p, first, len(records[0]))
            for (p, records), first in zip(groups, firsts, strict=True)
        ]

    async def fetch(
        self,
        topic: str,
        partition: int,
        index: int,
        *,
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        max_records: int = DEFAULT_FETCH_MAX_RECORDS,
        max_wait_ms: int = 0,
    ) -> list[Record]:
        """Records from `index` on (see `Client.fetch`); long-polls `max_wait_ms`."""
        call = calls.fetch(topic, partition, index, max_bytes, max_records, max_wait_ms)
        return await self._call(call)

    async def fetch_batch(
        self,
        topic: str,
        partition: int,
        index: int,
        *,
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        max_records: int = DEFAULT_FETCH_MAX_RECORDS,
        max_wait_ms: int = 0,
    ) -> RecordBatch:
        """`fetch` as one `RecordBatch` (see `Client.fetch_batch`)."""
        call = calls.fetch_batch(topic, partition, index, max_bytes, max_records, max_wait_ms)
        return await self._call(call)

    def reader(
        self,
        topic: str,
        partition: int,
        index: int,
        *,
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        max_records: int = DEFAULT_FETCH_MAX_RECORDS,
        max_wait_ms: int = 0,
        prefetch: int = 1,
    ) -> PartitionReader:
        """The partition from `index` on as `fetch_batch` answers, with up to
        `prefetch` fetches in flight ahead of the caller (see
        `laminar.client.reader`; 0 is one fetch at a time)."""
        fetch_from = functools.partial(
            self.fetch_batch,
            topic,
            partition,
            max_bytes=max_bytes,
            max_records=max_records,
            max_wait_ms=max_wait_ms,
        )
        return PartitionReader(fetch_from, index, max_records=max_records, prefetch=prefetch)

    async def offsets(self, topic: str, partition: int) -> Offsets:
        """The partition's `(lowest, highest)` indexes; `highest` is exclusive."""
        return calls.offsets_of(await self._call(calls.list_offsets(topic, partition)))

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """The first index appended at or after `timestamp_ms`, else the highest."""
        response = await self._call(calls.list_offsets(topic, partition, timestamp_ms))
        return calls.timestamp_index_of(response)

    # --- topics ----------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        config: dict[str, int | str] | None = None,
        replication_factor: int | None = None,
    ) -> TopicInfo:
        topic = await self._call(
            calls.create_topic(name, partitions, config or {}, replication_factor)
        )
        if self._view is not None:
            self._view = self._view.with_topic(topic)
        return topic

    async def decommission_node(self, node_id: str, *, cancel: bool = False) -> tuple[str, ...]:
        """`Client.decommission_node`: a node leaves for good (or stays)."""
        return await self._call(calls.decommission_node(node_id, cancel))

    async def alter_topic(
        self,
        name: str,
        *,
        config: dict[str, int | str] | None = None,
        remove: Sequence[str] = (),
    ) -> TopicInfo:
        """`Client.alter_topic`: set and remove a live topic's config keys."""
        topic = await self._call(calls.alter_topic(name, config or {}, remove))
        if self._view is not None:
            self._view = self._view.with_topic(topic)
        return topic

    async def delete_topic(self, name: str) -> None:
        await self._call(calls.delete_topic(name))
        if self._view is not None:
            self._view = self._view.without_topic(name)

    async def list_topics(self) -> list[TopicInfo]:
        return await self._call(calls.list_topics())

    async def describe_topic(self, name: str) -> TopicDescription:
        """A topic with each partition's owner, endpoint and index range."""
        return (await self.describe_topics([name]))[0]

    async def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        """`describe_topic` for several topics (all by default, sorted by name)."""
        view = await self.refresh_metadata()
        if names is None:
            names = sorted(view.topics)
        topics = [view.topic(name) for name in names]
        answers = await asyncio.gather(
            *(
                asyncio.gather(
                    *(self._call(calls.list_offsets(t.name, p)) for p in range(t.partitions))
                )
                for t in topics
            )
        )
        return [describe(view, t, a) for t, a in zip(topics, answers, strict=True)]

    # --- the node --------------------------------------------------------------------

    async def metadata(self) -> MetadataResponse:
        return (await self.refresh_metadata()).metadata

    async def ping(
        self, topic: str | None = None, partition: int = 0, *, shard: int | None = None
    ) -> PingResult:
        """Ping the owner of `topic`/`partition`, or shard `shard`, or the node port."""
        address = self.bootstrap if topic is None and shard is None else None
        call = calls.ping(topic=topic, partition=partition, shard=shard, address=address)
        start = time.perf_counter()
        pong = await self._call(call)
        elapsed_ms = (time.perf_counter() - start) * 1000
        return PingResult(pong.node_id, pong.shard_id, pong.received_by, elapsed_ms)

    @property
    def cluster(self) -> ClusterView | None:
        """The metadata the client routes by (None before the first request)."""
        return self._view

    async def refresh_metadata(self) -> ClusterView:
        """Fetch metadata from the bootstrap address, else from any known shard.
        Concurrent callers share one fetch."""
        if self._refresh_lock is None:
            self._refresh_lock = asyncio.Lock()
        generation = self._generation
        async with self._refresh_lock:
            if self._generation != generation and self._view is not None:
                return self._view  # fetched while this caller waited for the lock
            view = await self._fetch_metadata_retrying()
            self._view = view
            self._generation += 1
            return view

    async def _fetch_metadata_retrying(self) -> ClusterView:
        """`_fetch_metadata`, again within the retry budget while the nodes
        that answer are still loading their metadata (NOT_READY)."""
        backoff: Backoff | None = None
        while True:
            try:
                return await self._fetch_metadata()
            except NotReadyError:
                backoff = backoff or Backoff(self.retry)
                delay = backoff.next_delay()
                if delay is None:
                    raise
                await asyncio.sleep(delay)

    async def _fetch_metadata(self) -> ClusterView:
        """As `Client.refresh_metadata_view`: the first address that answers."""
        search = MetadataSearch(self.bootstraps, self._view, self._hints)
        timeout_s = metadata_timeout_s(self.timeout_s, self.connect_timeout_s)
        for address in search.candidates:
            try:
                conn = await self._connection(address)
                frame = await conn.request(MetadataRequest(), timeout_s)
                return ClusterView.from_metadata(
                    expect(frame, MetadataResponse), address, self._hints
                )
            except LaminarError as exc:
                search.failed(address, exc)
        raise search.error()

    # --- plumbing --------------------------------------------------------------------

    async def _call(self, call: calls.Call[T]) -> T:
        """Perform `call`, retrying as `laminar.client.retry` allows."""
        backoff: Backoff | None = None
        while True:
            address: Address | None = None
            try:
                view = self._view or await self.refresh_metadata()
                try:
                    address, message = call.target(view)
                except (UnknownTopicError, UnknownPartitionError):
                    address, message = call.target(await self.refresh_metadata())
                conn = self._conns.get(address)
                if conn is None or conn.broken:
                    conn = await self._connection(address)
                frame = await conn.request(message, self.timeout_s + call.wait_s)
                return call.parse(frame)
            except LaminarError as exc:
                error = exc
                if address is not None and no_answer(exc):
                    self._note_unreachable(address)
            if self._view is not None:
                self._view.learn(error)
            final = final_error(error, call.idempotent, call.what)
            if final is not None:
                self._note_failure(call, final)
                raise final
            if backoff is None:
                backoff = Backoff(self.retry)
            delay = backoff.next_delay()
            if delay is None:
                self._note_failure(call, error)
                raise error
            await asyncio.sleep(delay)
            await self._recover()

    async def _connection(self, address: Address) -> AsyncConnection:
        """The live connection to `address`; concurrent callers share one connect."""
        if self._closed:
            raise ConnectionLostError("the client is closed")
        conn = self._conns.get(address)
        if conn is not None and not conn.broken:
            return conn
        task = self._connecting.get(address)
        if task is None:
            task = asyncio.ensure_future(self._open(address))
            self._connecting[address] = task
            task.add_done_callback(lambda _t: self._connecting.pop(address, None))
        return await asyncio.shield(task)

    async def _open(self, address: Address) -> AsyncConnection:
        conn = await AsyncConnection.open(address, self.connect_timeout_s, self._max_frame_bytes)
        if self._closed:
            await conn.close()
            raise ConnectionLostError("the client is closed")
        self._conns[address] = conn
        return conn

    async def _recover(self) -> None:
        for address, conn in list(self._conns.items()):
            if conn.broken:
                del self._conns[address]
        with contextlib.suppress(LaminarError):
            await self.refresh_metadata()

    def _note_unreachable(self, address: Address) -> None:
        """Nobody answers at `address`: route around its node for a while."""
        self._hints.unreachable(address, self._view.nodes if self._view else {})

    def _note_failure(self, call: calls.Call[Any], error: LaminarError) -> None:
        """As `Client._note_failure`."""
        if call.failed is not None:
            call.failed()
        if (
            call.topic is not None
            and self._view is not None
            and isinstance(error, UnknownTopicError | UnknownPartitionError)
        ):
            self._view = self._view.without_topic(call.topic)
