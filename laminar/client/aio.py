"""`AsyncClient`: the asyncio client, on the loop's sock_* methods.

The same routing, retry rule and results as `Client`, with coroutines. Tasks
pipeline naturally: every request awaits its own answer, and concurrent
requests to one shard share its connection:

    async with AsyncClient("127.0.0.1:7070") as c:
        firsts = await asyncio.gather(
            *(c.produce("events", p, batch) for p in range(8))
        )

Methods that end in `_nowait` start the request as a task at once and
return it (`await` it for the result), as `Client`'s return a `Pending`;
atomic writes (`begin_write`, `stager`, `commit_write`) are `Client`'s with
coroutines (`laminar.client.writes`). Routing, retries and results come from
the same sans-I/O plans as `Client`'s (`laminar.client.core`); this shell
only performs them on the loop.

It runs on the stock asyncio loop and on laminar's `UringEventLoop`. Nothing
is sent before the first request (or `connect()`), which fetches metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar, Unpack

from laminar.client import calls, groups, security, writes
from laminar.client.aio_connection import AsyncConnection
from laminar.client.batch import RecordBatch
from laminar.client.consumer import AsyncConsumer, ConsumerCore, ConsumerOptions
from laminar.client.core import (
    REFRESH,
    ClientCore,
    Drop,
    Join,
    Plan,
    Ready,
    Send,
    Sleep,
    Start,
    sent,
)
from laminar.client.errors import ConnectionLostError, LaminarError
from laminar.client.groups import GroupDescription
from laminar.client.login import ClientLogin, Credentials
from laminar.client.producer import AsyncProducer, is_idempotent, produce_call
from laminar.client.protocol import CLIENT_MAX_FRAME_BYTES
from laminar.client.reader import PartitionReader, abandon
from laminar.client.results import Offsets, PingResult, Record, Sent, TopicDescription, describe
from laminar.client.retry import RetryPolicy
from laminar.client.routing import Address, ClusterView
from laminar.groups.messages import GroupView
from laminar.security.acls import Acl, AclFilter
from laminar.security.credentials import UserInfo
from laminar.security.frames import AuthenticateRequest
from laminar.wire import ListOffsetsResponse, MetadataResponse, TopicInfo
from laminar.wire.messages import DEFAULT_FETCH_MAX_BYTES, DEFAULT_FETCH_MAX_RECORDS
from laminar.wire.writes import StagedPart

T = TypeVar("T")


class AsyncClient(ClientCore):
    """An asyncio laminar client; see the module docstring. Use it from one
    event loop (the one it first ran on). Settings as for `Client`, and
    `linger_s` (0 by default; Kafka's linger.ms): how long an idempotent
    produce batch that finds room in its partition's window waits for more
    calls to join it (it leaves sooner once a batch is full); with 0 it
    leaves at the end of the event loop's pass (`laminar.client.producer`)."""

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
        linger_s: float = 0.0,
        tls: bool | ssl.SSLContext = False,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        username: str | None = None,
        password: str | None = None,
        mechanism: str = "SCRAM-SHA-256",
    ) -> None:
        super().__init__(
            bootstrap,
            timeout_s=timeout_s,
            connect_timeout_s=connect_timeout_s,
            retry=retry,
            max_frame_bytes=max_frame_bytes,
            read_from=read_from,
            idempotent=idempotent,
            tls=tls,
            ca_file=ca_file,
            cert_file=cert_file,
            key_file=key_file,
            username=username,
            password=password,
            mechanism=mechanism,
        )
        self._conns: dict[Address, AsyncConnection] = {}
        self._connecting: dict[Address, asyncio.Task[AsyncConnection]] = {}
        self._producer = AsyncProducer(self._produce_batch, linger_s=linger_s)
        self._generation = 0
        self._refresh_lock: asyncio.Lock | None = None

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

    def produce_nowait(
        self,
        topic: str,
        partition: int,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Mapping[str, bytes] | None] | None = None,
        *,
        producer_id: int | None = None,
        sequence: int | None = None,
    ) -> asyncio.Task[int]:
        """`produce`, started now as a task (the `_nowait` calls of one loop
        iteration go out in call order); await it for the first record's index."""
        return asyncio.ensure_future(
            self.produce(
                topic, partition, values, keys, headers, producer_id=producer_id, sequence=sequence
            )
        )

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
        call = produce_call(self._sequences, topic, partition, values, keys, headers, None, None)
        return await self._call(call)

    async def send(
        self,
        topic: str,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Mapping[str, bytes] | None] | None = None,
    ) -> list[Sent]:
        """Append `values` to `topic`, choosing the partitions as Kafka's
        producer does: see `Client.send`."""
        groups = await self._run(self._split_plan(topic, values, keys, headers))
        firsts = await asyncio.gather(*(self.produce(topic, p, *records) for p, records in groups))
        return sent(groups, firsts)

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

    def fetch_nowait(
        self,
        topic: str,
        partition: int,
        index: int,
        *,
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        max_records: int = DEFAULT_FETCH_MAX_RECORDS,
        max_wait_ms: int = 0,
    ) -> asyncio.Task[list[Record]]:
        """`fetch`, started now as a task; await it for the records."""
        return self._start(
            calls.fetch(topic, partition, index, max_bytes, max_records, max_wait_ms)
        )

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

    def fetch_batch_nowait(
        self,
        topic: str,
        partition: int,
        index: int,
        *,
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        max_records: int = DEFAULT_FETCH_MAX_RECORDS,
        max_wait_ms: int = 0,
    ) -> asyncio.Task[RecordBatch]:
        """`fetch_batch`, started now as a task; await it for the batch."""
        return self._start(
            calls.fetch_batch(topic, partition, index, max_bytes, max_records, max_wait_ms)
        )

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

    async def replica_offsets(self, topic: str, partition: int, node: str) -> ListOffsetsResponse:
        """`Client.replica_offsets`: the partition as node `node`'s replica sees it."""
        return await self._call(calls.list_offsets(topic, partition, node=node))

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """The first index appended at or after `timestamp_ms`, else the highest."""
        response = await self._call(calls.list_offsets(topic, partition, timestamp_ms))
        return calls.timestamp_index_of(response)

    # --- atomic writes (laminar.client.writes) ----------------------------------------

    def begin_write(
        self, *, write_id: int | None = None, timeout_s: float | None = None
    ) -> writes.AsyncAtomicWrite:
        """`Client.begin_write` with coroutines: `async with client.begin_write()
        as w: await w.send(...); await w.commit()`."""
        return writes.AsyncAtomicWrite(self, write_id, timeout_s)

    async def list_groups(self) -> list[GroupView]:
        """Every consumer group, with its members and committed positions."""
        return await self._run(groups.list_groups_plan(self))

    async def describe_group(self, group: str) -> GroupDescription:
        """A group's members and, per partition of its topics, its lag."""
        return await self._run(groups.describe_group_plan(self, group))

    async def reset_group(
        self, group: str, topic: str, to: str | int, *, timestamp: bool = False
    ) -> dict[tuple[str, int], int]:
        """Move a group without members on `topic` to "earliest", "latest", an
        index, or (`timestamp`) the first record at or after `to` ms."""
        return await self._run(groups.reset_group_plan(self, group, topic, to, timestamp=timestamp))

    async def delete_group(self, group: str) -> None:
        """Forget a group without members and its committed positions."""
        await self._run(groups.delete_group_plan(self, group))

    def consumer(
        self, group: str, topics: Sequence[str], **options: Unpack[ConsumerOptions]
    ) -> AsyncConsumer:
        """`Client.consumer` with coroutines: `async with client.consumer(...) as c:
        records = await c.poll()`; its heartbeats run on a task."""
        return AsyncConsumer(self, ConsumerCore(self, group, topics, **options))

    def stager(
        self,
        write_id: int,
        task: int = 0,
        attempt: int | None = None,
        *,
        timeout_s: float | None = None,
    ) -> writes.AsyncStager:
        """One task attempt's side of a distributed atomic write (`Client.stager`)."""
        return writes.AsyncStager(self, write_id, task, attempt, timeout_s)

    async def commit_write(
        self, commit_id: int, parts: Sequence[StagedPart]
    ) -> writes.CommitResult:
        """`Client.commit_write`: commit exactly `parts` under `commit_id`."""
        return await self._call(writes.commit_write(commit_id, tuple(parts)))

    async def abort_write(
        self, commit_id: int, parts: Sequence[StagedPart] = (), *, final: bool = True
    ) -> str:
        """`Client.abort_write`: abort `commit_id` and drop `parts`."""
        return await self._call(writes.abort_write(commit_id, final, tuple(parts)))

    async def write_status(self, commit_id: int) -> str:
        """The commit id's state: unknown, committed, done or aborted."""
        return await self._call(writes.write_status(commit_id))

    # --- topics ----------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        config: dict[str, int | str] | None = None,
        replication_factor: int | None = None,
    ) -> TopicInfo:
        call = calls.create_topic(name, partitions, config or {}, replication_factor)
        return await self._run(self._topic_change_plan(call))

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
        call = calls.alter_topic(name, config or {}, remove)
        return await self._run(self._topic_change_plan(call))

    async def delete_topic(self, name: str) -> None:
        await self._run(self._delete_topic_plan(name))

    async def list_topics(self) -> list[TopicInfo]:
        return await self._call(calls.list_topics())

    async def describe_topic(self, name: str) -> TopicDescription:
        """A topic with each partition's owner, endpoint and index range."""
        return (await self.describe_topics([name]))[0]

    async def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        """`describe_topic` for several topics (all by default, sorted by name)."""
        view = await self.refresh_metadata()
        topics = [view.topic(name) for name in (sorted(view.topics) if names is None else names)]
        answers = await asyncio.gather(
            *(
                asyncio.gather(
                    *(self._call(calls.list_offsets(t.name, p)) for p in range(t.partitions))
                )
                for t in topics
            )
        )
        return [describe(view, t, a) for t, a in zip(topics, answers, strict=True)]

    # --- users and ACLs (`laminar.client.security`) ------------------------------------

    async def create_user(self, name: str, password: str, *, superuser: bool = False) -> None:
        """Create a user who logs in with `password` (salted here: the node
        never sees it); `UserExistsError` if the name is taken."""
        await self._call(security.create_user(name, password, superuser))

    async def set_password(self, name: str, password: str) -> None:
        """Change a user's password (connections logged in stay so);
        `UnknownUserError` if there is no such user."""
        await self._call(security.set_password(name, password))

    async def delete_user(self, name: str) -> None:
        """Delete a user (its ACLs stay: remove them with `remove_acls`)."""
        await self._call(security.delete_user(name))

    async def list_users(self) -> list[UserInfo]:
        """Every user: name, mechanisms, superuser flag (never a key)."""
        return await self._call(security.list_users())

    async def add_acls(self, acls: Iterable[Acl]) -> list[Acl]:
        """Add ACLs; the ones added (not those that were there already)."""
        return [acl for call in security.add_acls(acls) for acl in await self._call(call)]

    async def remove_acls(self, wanted: AclFilter) -> list[Acl]:
        """Remove every ACL `wanted` selects; the ones removed."""
        return await self._call(security.remove_acls(wanted))

    async def list_acls(self, wanted: AclFilter | None = None) -> list[Acl]:
        """The ACLs `wanted` selects (all of them by default)."""
        return await self._call(security.list_acls(wanted or AclFilter()))

    # --- the node --------------------------------------------------------------------

    async def metadata(self) -> MetadataResponse:
        return (await self.refresh_metadata()).metadata

    async def ping(
        self, topic: str | None = None, partition: int = 0, *, shard: int | None = None
    ) -> PingResult:
        """Ping the owner of `topic`/`partition`, or shard `shard`, or the node port."""
        return await self._run(self._ping_plan(topic, partition, shard))

    @property
    def cluster(self) -> ClusterView | None:
        """The metadata the client routes by (None before the first request)."""
        return self._view

    async def refresh_metadata(self) -> ClusterView:
        """Fetch metadata (`ClientCore._metadata_plan`: the bootstrap addresses,
        then any node known). Concurrent callers share one fetch."""
        if self._refresh_lock is None:
            self._refresh_lock = asyncio.Lock()
        generation = self._generation
        async with self._refresh_lock:
            if self._generation != generation and self._view is not None:
                return self._view  # fetched while this caller waited for the lock
            view = await self._run(self._metadata_plan())
            self._generation += 1
            return view

    # --- the shell: performing the plans' actions ------------------------------------

    def _start(self, call: calls.Call[T]) -> asyncio.Task[T]:
        """`call`, started now as a task."""
        return asyncio.ensure_future(self._call(call))

    async def _call(self, call: calls.Call[T]) -> T:
        """`call` performed: its first attempt straight on a connection already
        open (`ClientCore._direct_route`, the hot path), the rest by the plan."""
        route = self._direct_route(call)
        if route is not None:
            address, message = route
            conn = self._conns.get(address)
            if conn is not None and not conn.broken:
                try:
                    return call.parse(await conn.request(message, self.timeout_s + call.wait_s))
                except LaminarError as exc:
                    return await self._run(self._call_plan(call, (address, exc)))
        return await self._run(self._call_plan(call))

    async def _run(self, plan: Plan[T]) -> T:
        """Perform `plan`'s actions on the loop; its result."""
        step: Any = plan.send
        value: Any = None
        while True:
            try:
                action = step(value)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            step, value = plan.send, None
            try:
                if type(action) is Send:
                    conn = self._conns.get(action.address)
                    if conn is None or conn.broken:
                        conn = await self._connection(action.address)
                    value = await conn.request(action.message, action.timeout_s)
                elif type(action) is Sleep:
                    await asyncio.sleep(action.delay_s)
                elif action is REFRESH:
                    value = await self.refresh_metadata()
                elif type(action) is Start:
                    value = self._start(action.call)
                elif type(action) is Join:  # shielded: a cancelled caller leaves it running
                    value = await asyncio.shield(action.handle)
                elif type(action) is Drop:
                    abandon(action.handle)
                elif type(action) is Ready:
                    value = action.handle.done()
                else:
                    await self._recover()
            except LaminarError as exc:
                step, value = plan.throw, exc

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
        conn = await AsyncConnection.open(
            address, self.connect_timeout_s, self._max_frame_bytes, self.tls
        )
        if self.credentials is not None:
            try:
                await self._log_in(conn, self.credentials)
            except BaseException:
                await conn.close()
                raise
        if self._closed:
            await conn.close()
            raise ConnectionLostError("the client is closed")
        self._conns[address] = conn
        return conn

    async def _log_in(self, conn: AsyncConnection, credentials: Credentials) -> None:
        """Log `conn` in (`laminar.client.login`)."""
        login = ClientLogin(credentials)
        request: AuthenticateRequest | None = login.first()
        while request is not None:
            request = login.answer(await conn.request(request, self.timeout_s))

    async def _recover(self) -> None:
        """`RECOVER`: forget broken connections and refresh the metadata."""
        for address, conn in list(self._conns.items()):
            if conn.broken:
                del self._conns[address]
        with contextlib.suppress(LaminarError):
            await self.refresh_metadata()
