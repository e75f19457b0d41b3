"""`Client`: the blocking client, on plain sockets (no event loop, no thread).

Every request is routed shard-direct from the cached metadata and sent on the
one connection kept per shard. Methods that end in `_nowait` send at once and
return a `Pending`; its `result()` waits. Sending many before waiting for any
pipelines them, across partitions and shards:

    pending = [c.produce_nowait("events", p, batch) for p in range(8)]
    firsts = [p.result() for p in pending]

The plain methods are `..._nowait(...).result()`. A `Client` may be shared by
threads: their requests are pipelined on the same connections.
"""

from __future__ import annotations

import contextlib
import functools
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar, Unpack

from laminar.client import calls, groups, security, writes
from laminar.client.batch import RecordBatch
from laminar.client.blocking import BlockingConnection
from laminar.client.consumer import Consumer, ConsumerCore, ConsumerOptions
from laminar.client.core import (
    REFRESH,
    Action,
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
from laminar.client.producer import BlockingProducer, Produced, is_idempotent, produce_call
from laminar.client.protocol import CLIENT_MAX_FRAME_BYTES
from laminar.client.results import Offsets, PingResult, Record, Sent, TopicDescription, describe
from laminar.client.retry import RetryPolicy
from laminar.client.routing import Address, ClusterView
from laminar.groups.messages import GroupView
from laminar.security.acls import Acl, AclFilter
from laminar.security.credentials import UserInfo
from laminar.security.frames import AuthenticateRequest
from laminar.wire import ListOffsetsResponse, Message, MetadataResponse, TopicInfo
from laminar.wire.messages import DEFAULT_FETCH_MAX_BYTES, DEFAULT_FETCH_MAX_RECORDS
from laminar.wire.writes import StagedPart

T = TypeVar("T")

_NO_RESULT: Any = object()


class Pending(Generic[T]):
    """A request that was sent; `result()` waits for its answer, going on with
    its plan (`laminar.client.core`: retries, as `laminar.client.retry` allows)."""

    __slots__ = (
        "_backoff",
        "_call",
        "_client",
        "_conn",
        "_corr",
        "_deadline",
        "_failed",
        "_lock",
        "_plan",
        "_result",
    )

    def __init__(self, client: Client, work: calls.Call[T] | Plan[T]) -> None:
        """Send `work`: a call (its first attempt straight on a connection when
        `ClientCore._direct_route` allows, the hot path; the rest by
        `ClientCore._call_plan`), or a plan."""
        self._client = client
        self._conn: BlockingConnection | None = None
        self._corr = 0
        self._deadline = 0.0
        self._backoff: Sleep | None = None
        """A backoff the plan asked for while being sent: `result()` waits it out."""
        self._failed: LaminarError | None = None
        """The error `result()` raises for good."""
        self._result: T = _NO_RESULT
        self._lock = threading.Lock()
        """Held while waiting: threads may ask for one result at once (a
        produce settling the oldest of its window, and the caller)."""
        self._plan: Plan[T] | None = None
        """None while the first attempt of `_call` is made without one."""
        if not isinstance(work, calls.Call):
            self._start_plan(work)
            return
        self._call = work
        route = client._direct_route(work)
        if route is None:
            self._start_plan(client._call_plan(work))
            return
        try:
            self._conn, self._corr = client._send_to(route[0], route[1], not work.idempotent)
        except LaminarError as exc:
            self._start_plan(client._call_plan(work, (route[0], exc)))
            return
        self._deadline = time.monotonic() + client.timeout_s + work.wait_s

    def _start_plan(self, plan: Plan[T], wait: bool = False) -> None:
        self._plan = plan
        self._resume(plan, plan.send, None, wait)

    def _resume(self, plan: Plan[T], step: Callable[[Any], Action], value: Any, wait: bool) -> None:
        """Go on with the plan from `step(value)` until a request is out, it
        ends, or (unless `wait`) it asks for a backoff."""
        client = self._client
        while True:
            try:
                action = step(value)
            except StopIteration as stop:
                self._result = stop.value
                return
            except LaminarError as exc:
                self._failed = exc
                return
            step, value = plan.send, None
            try:
                if type(action) is Send:
                    self._conn, self._corr = client._send_to(
                        action.address, action.message, action.fresh
                    )
                    self._deadline = time.monotonic() + action.timeout_s
                    return
                if type(action) is Sleep:
                    if not wait:
                        self._backoff = action
                        return
                    time.sleep(action.delay_s)
                elif action is REFRESH:
                    value = client.refresh_metadata_view()
                elif type(action) is Start:
                    value = client._start(action.call)
                elif type(action) is Join:  # waits even while being sent
                    value = action.handle.result()
                elif type(action) is Drop:
                    action.handle.abandon()
                elif type(action) is Ready:
                    value = action.handle.ready()
                else:
                    client._recover()
            except LaminarError as exc:
                step, value = plan.throw, exc

    @property
    def done(self) -> bool:
        """Whether the final answer is in: `result()` will not wait."""
        return self._result is not _NO_RESULT or self._failed is not None

    def ready(self) -> bool:
        """Whether `result()` would not wait: the final answer is in, or the
        answer to the request out now is (read without blocking, if no other
        thread is reading this connection: else it files it when it comes)."""
        if self.done:
            return True
        conn = self._conn
        return self._backoff is None and conn is not None and conn.answered(self._corr)

    def abandon(self) -> None:
        """Give up on the answer (a prefetch nobody wants any more): the request
        in flight is forgotten, its answer dropped when it comes; `result()`
        raises from now on."""
        with self._lock:
            if self.done:
                return
            if self._backoff is None and self._conn is not None:
                self._conn.abandon(self._corr)
            if self._plan is not None:
                self._plan.close()
            self._failed = LaminarError("the request was abandoned by its caller")

    def settle(self) -> None:
        """Wait for the final answer without raising it (`result()` still will)."""
        with contextlib.suppress(LaminarError):
            self.result()

    def result(self) -> T:
        """The answer, or the typed error (`laminar.client.errors`)."""
        with self._lock:
            while self._result is _NO_RESULT:
                if self._failed is not None:
                    raise self._failed
                if self._backoff is not None:
                    time.sleep(self._backoff.delay_s)
                    self._backoff = None
                    plan = self._plan
                    if plan is None:  # cannot happen: only a plan parks a backoff
                        raise RuntimeError("a Pending request has a backoff but no plan")
                    self._resume(plan, plan.send, None, wait=True)
                    continue
                conn = self._conn
                if conn is None:  # cannot happen: _resume sends, parks or ends
                    raise RuntimeError("a Pending request has no request out")
                plan = self._plan
                try:
                    frame = conn.wait(self._corr, self._deadline)
                    if plan is None:  # the direct first attempt
                        self._result = self._call.parse(frame)
                    else:
                        self._resume(plan, plan.send, frame, wait=True)
                except LaminarError as exc:
                    if plan is None:
                        call_plan = self._client._call_plan(self._call, (conn.address, exc))
                        self._start_plan(call_plan, wait=True)
                    else:
                        self._resume(plan, plan.throw, exc, wait=True)
            return self._result


class Client(ClientCore):
    """A blocking laminar client. `Client("host:port")` fetches the metadata at
    once, so an unreachable node fails here with `CannotConnectError`.

    `timeout_s` bounds the wait for one answer (plus a fetch's `max_wait_ms`);
    past it the node counts as unreachable (`laminar.client.retry`), so it also
    bounds how long a silent leader (stopped, or cut off by the network) holds
    up the client. `connect_timeout_s` bounds a connect and, per address, a
    metadata answer (and a TLS handshake). `tls=True` connects through TLS,
    checking the node's certificate against `ca_file` (else the system's CAs)
    and its name against the host dialled; `tls=ssl.SSLContext(...)` uses
    that context as it is; `cert_file` (and `key_file`) shows a client
    certificate, which a node with --tls-ca-file takes as a login
    (`User:<its CN>`). `username` and `password` log every connection in
    (SCRAM, `mechanism` "SCRAM-SHA-256" or "SCRAM-SHA-512";
    `laminar.client.login`): a refusal raises `AuthenticationFailedError`
    and is never retried. `retry` bounds how long idempotent requests are retried
    after connection loss, timeouts or retriable errors. In a cluster,
    `bootstrap` may list several nodes ("h1:p1,h2:p2": the first that answers
    gives the metadata); writes go to each partition's leader, reads too
    unless `read_from="follower"`, which spreads them over followers (each
    serves what it has committed).
    """

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
        self._conns: dict[Address, BlockingConnection] = {}
        self._producer = BlockingProducer(self._produce_batch)
        try:
            self.refresh_metadata()
        except BaseException:
            self.close()
            raise

    # --- context and lifetime --------------------------------------------------------

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection; the client cannot be used afterwards."""
        with self._lock:
            self._closed = True
            conns = list(self._conns.values())
            self._conns.clear()
        for conn in conns:
            conn.close()

    # --- records ---------------------------------------------------------------------

    def produce(
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
        """Append `values` (with optional per-record `keys` and `headers`) to a
        partition, durably; return the index of the first. Produces are
        idempotent by default and retried (the node appends each sequence
        once): the client numbers each partition's records itself
        (`laminar.client.producer`); or name the producer with `producer_id`
        and the `sequence` of the first value (per producer and partition: 0,
        then the count sent so far). A batch sent again returns its original
        index (or raises `DuplicateSequenceError` once forgotten). With
        `Client(idempotent=False)` a produce is plain: never retried once
        sent, a lost answer raises `OutcomeUnknownError`."""
        return self.produce_nowait(
            topic, partition, values, keys, headers, producer_id=producer_id, sequence=sequence
        ).result()

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
    ) -> Produced:
        """`produce`, sent now (once its partition's window has room); `.result()`
        is the index of its first record."""
        sequences = self._sequences if self.idempotent else None
        if not is_idempotent(sequences, producer_id, sequence) or producer_id is not None:
            # Plain, or under the caller's own producer: sent as it is, unmerged.
            call = calls.produce(topic, partition, values, keys, headers, producer_id, sequence)
            if producer_id is None:
                return self._start(call)
            alone = functools.partial(self._start, call)
            return self._producer.produce((topic, partition), values, alone=alone)
        return self._producer.produce((topic, partition), values, keys, headers)

    def _produce_batch(
        self,
        key: tuple[str, int],
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None,
        headers: Sequence[Mapping[str, bytes] | None] | None,
    ) -> Pending[int]:
        """One batch under the client's own producer of partition `key`, sent now
        (its sequence taken as it leaves: `laminar.client.producer`)."""
        topic, partition = key
        return self._start(
            produce_call(self._sequences, topic, partition, values, keys, headers, None, None)
        )

    def send(
        self,
        topic: str,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Mapping[str, bytes] | None] | None = None,
    ) -> list[Sent]:
        """Append `values` to `topic` without naming a partition, as Kafka's
        producer does (`laminar.client.partitioner`): a record with a key goes
        to its key's partition; the records without one go together to one
        partition, and the next call's to the next. One produce per partition
        (pipelined, idempotent as `produce`); returns where the records went,
        by partition. If one of them fails its error is raised, and the others
        may have been appended."""
        groups = self._run(self._split_plan(topic, values, keys, headers))
        pending = [self.produce_nowait(topic, p, *records) for p, records in groups]
        return sent(groups, [waiting.result() for waiting in pending])

    def fetch(
        self,
        topic: str,
        partition: int,
        index: int,
        *,
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        max_records: int = DEFAULT_FETCH_MAX_RECORDS,
        max_wait_ms: int = 0,
    ) -> list[Record]:
        """Records from `index` on, bounded by `max_bytes` (at least one record is
        returned if any exists) and `max_records`. With `max_wait_ms`, waits that
        long for a record to be appended when there is none yet (long poll)."""
        return self.fetch_nowait(
            topic,
            partition,
            index,
            max_bytes=max_bytes,
            max_records=max_records,
            max_wait_ms=max_wait_ms,
        ).result()

    def fetch_nowait(
        self,
        topic: str,
        partition: int,
        index: int,
        *,
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        max_records: int = DEFAULT_FETCH_MAX_RECORDS,
        max_wait_ms: int = 0,
    ) -> Pending[list[Record]]:
        """`fetch`, sent now; `.result()` is the list of records."""
        return self._start(
            calls.fetch(topic, partition, index, max_bytes, max_records, max_wait_ms)
        )

    def fetch_batch(
        self,
        topic: str,
        partition: int,
        index: int,
        *,
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        max_records: int = DEFAULT_FETCH_MAX_RECORDS,
        max_wait_ms: int = 0,
    ) -> RecordBatch:
        """`fetch` as one `RecordBatch`: `len()`, iteration (the same `Record`s),
        `values()` as memoryviews into the answer's buffer, `to_arrow()`. For
        consumers that want no object per record."""
        return self.fetch_batch_nowait(
            topic,
            partition,
            index,
            max_bytes=max_bytes,
            max_records=max_records,
            max_wait_ms=max_wait_ms,
        ).result()

    def fetch_batch_nowait(
        self,
        topic: str,
        partition: int,
        index: int,
        *,
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        max_records: int = DEFAULT_FETCH_MAX_RECORDS,
        max_wait_ms: int = 0,
    ) -> Pending[RecordBatch]:
        """`fetch_batch`, sent now; `.result()` is the batch."""
        return self._start(
            calls.fetch_batch(topic, partition, index, max_bytes, max_records, max_wait_ms)
        )

    def offsets(self, topic: str, partition: int) -> Offsets:
        """The partition's `(lowest, highest)` indexes; `highest` is exclusive."""
        return calls.offsets_of(self._start(calls.list_offsets(topic, partition)).result())

    def replica_offsets(self, topic: str, partition: int, node: str) -> ListOffsetsResponse:
        """The partition as node `node`'s replica sees it (a cluster's status:
        its committed index, its log's end, the leader it follows)."""
        return self._start(calls.list_offsets(topic, partition, node=node)).result()

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """The first index appended at or after `timestamp_ms` (ms since the epoch);
        the partition's highest index when none was."""
        response = self._start(calls.list_offsets(topic, partition, timestamp_ms)).result()
        return calls.timestamp_index_of(response)

    # --- atomic writes (laminar.client.writes) ----------------------------------------

    def begin_write(
        self, *, write_id: int | None = None, timeout_s: float | None = None
    ) -> writes.AtomicWrite:
        """An atomic write: `send` stages records (durable, invisible), `commit`
        publishes them all once, or nothing is ever visible."""
        return writes.AtomicWrite(self, write_id, timeout_s)

    def list_groups(self) -> list[GroupView]:
        """Every consumer group, with its members and committed positions."""
        return self._run(groups.list_groups_plan(self))

    def describe_group(self, group: str) -> GroupDescription:
        """A group's members and, per partition of its topics, its lag."""
        return self._run(groups.describe_group_plan(self, group))

    def reset_group(
        self, group: str, topic: str, to: str | int, *, timestamp: bool = False
    ) -> dict[tuple[str, int], int]:
        """Move a group without members on `topic` to "earliest", "latest", an
        index, or (`timestamp`) the first record at or after `to` ms."""
        return self._run(groups.reset_group_plan(self, group, topic, to, timestamp=timestamp))

    def delete_group(self, group: str) -> None:
        """Forget a group without members and its committed positions."""
        self._run(groups.delete_group_plan(self, group))

    def consumer(
        self, group: str, topics: Sequence[str], **options: Unpack[ConsumerOptions]
    ) -> Consumer:
        """Join consumer group `group` on `topics`: `poll()` returns records of
        the partitions the group gives this member, `commit()` records where
        it is (`laminar.client.consumer`; the options: `ConsumerCore`)."""
        return Consumer(self, ConsumerCore(self, group, topics, **options))

    def stager(
        self,
        write_id: int,
        task: int = 0,
        attempt: int | None = None,
        *,
        timeout_s: float | None = None,
    ) -> writes.Stager:
        """One task attempt's side of a distributed atomic write."""
        return writes.Stager(self, write_id, task, attempt, timeout_s)

    def commit_write(self, commit_id: int, parts: Sequence[StagedPart]) -> writes.CommitResult:
        """Commit exactly `parts` under `commit_id` (idempotent: retried, and a
        commit id committed before returns its first outcome, `first=False`)."""
        return self._start(writes.commit_write(commit_id, tuple(parts))).result()

    def abort_write(
        self, commit_id: int, parts: Sequence[StagedPart] = (), *, final: bool = True
    ) -> str:
        """Abort `commit_id` (for good unless `final=False`) and drop `parts`; the
        write's state after it ("aborted", or "committed"/"done" if it won)."""
        return self._start(writes.abort_write(commit_id, final, tuple(parts))).result()

    def write_status(self, commit_id: int) -> str:
        """The commit id's state: unknown, committed, done or aborted."""
        return self._start(writes.write_status(commit_id)).result()

    # --- topics ----------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        config: dict[str, int | str] | None = None,
        replication_factor: int | None = None,
    ) -> TopicInfo:
        """Create a topic; `TopicExistsError` if the name is taken. In a cluster each
        partition lives on `replication_factor` nodes (default: 3, or all of them
        if fewer)."""
        call = calls.create_topic(name, partitions, config or {}, replication_factor)
        return self._run(self._topic_change_plan(call))

    def decommission_node(self, node_id: str, *, cancel: bool = False) -> tuple[str, ...]:
        """Decide that node `node_id` leaves the cluster for good (a gossip
        cluster: its replicas move to the others first; `laminar status` shows
        how many are left), or with `cancel` that it stays. Returns every
        decommissioned node. Refused (`InvalidRequestError`) on a --peers
        cluster, for an unknown node, or when too few nodes would remain."""
        return self._start(calls.decommission_node(node_id, cancel)).result()

    def alter_topic(
        self,
        name: str,
        *,
        config: dict[str, int | str] | None = None,
        remove: Sequence[str] = (),
    ) -> TopicInfo:
        """Set the keys of `config` and return the keys in `remove` to their
        defaults on a live topic (retention.ms, retention.bytes, segment.bytes,
        segment.ms); returns the topic with its new config."""
        return self._run(self._topic_change_plan(calls.alter_topic(name, config or {}, remove)))

    def delete_topic(self, name: str) -> None:
        """Delete a topic and its records; `UnknownTopicError` if there is none."""
        self._run(self._delete_topic_plan(name))

    def list_topics(self) -> list[TopicInfo]:
        return self._start(calls.list_topics()).result()

    def describe_topic(self, name: str) -> TopicDescription:
        """A topic with each partition's owner shard, endpoint and index range."""
        return self.describe_topics([name])[0]

    def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        """`describe_topic` for several topics (all of them by default, sorted by
        name), from one metadata fetch and one pipelined burst of offset requests."""
        view = self.refresh_metadata_view()
        topics = [view.topic(name) for name in (sorted(view.topics) if names is None else names)]
        pending = [
            [self._start(calls.list_offsets(t.name, p)) for p in range(t.partitions)]
            for t in topics
        ]
        return [
            describe(view, t, [w.result() for w in waiting])
            for t, waiting in zip(topics, pending, strict=True)
        ]

    # --- users and ACLs (`laminar.client.security`) ------------------------------------

    def create_user(self, name: str, password: str, *, superuser: bool = False) -> None:
        """Create a user who logs in with `password` (salted here: the node
        never sees it); `UserExistsError` if the name is taken."""
        self._start(security.create_user(name, password, superuser)).result()

    def set_password(self, name: str, password: str) -> None:
        """Change a user's password (connections logged in stay so);
        `UnknownUserError` if there is no such user."""
        self._start(security.set_password(name, password)).result()

    def delete_user(self, name: str) -> None:
        """Delete a user (its ACLs stay: remove them with `remove_acls`)."""
        self._start(security.delete_user(name)).result()

    def list_users(self) -> list[UserInfo]:
        """Every user: name, mechanisms, superuser flag (never a key)."""
        return self._start(security.list_users()).result()

    def add_acls(self, acls: Iterable[Acl]) -> list[Acl]:
        """Add ACLs; the ones added (not those that were there already)."""
        return [acl for call in security.add_acls(acls) for acl in self._start(call).result()]

    def remove_acls(self, wanted: AclFilter) -> list[Acl]:
        """Remove every ACL `wanted` selects; the ones removed."""
        return self._start(security.remove_acls(wanted)).result()

    def list_acls(self, wanted: AclFilter | None = None) -> list[Acl]:
        """The ACLs `wanted` selects (all of them by default)."""
        return self._start(security.list_acls(wanted or AclFilter())).result()

    # --- the node --------------------------------------------------------------------

    def metadata(self) -> MetadataResponse:
        """Fresh metadata: the node, its shards and ports, topics, routing mode."""
        return self.refresh_metadata_view().metadata

    def ping(
        self,
        topic: str | None = None,
        partition: int = 0,
        *,
        shard: int | None = None,
    ) -> PingResult:
        """Ping the owner of `topic`/`partition`, or shard `shard`, or (with
        neither) the node port; the result says which shard served it."""
        return self._run(self._ping_plan(topic, partition, shard))

    @property
    def cluster(self) -> ClusterView:
        """The metadata the client routes by (fetched at construction)."""
        view = self._view
        return view if view is not None else self.refresh_metadata_view()

    def refresh_metadata(self) -> None:
        """Fetch metadata again (the client does this itself after failures)."""
        self.refresh_metadata_view()

    def refresh_metadata_view(self) -> ClusterView:
        """Fetch metadata (`ClientCore._metadata_plan`): from the first address
        that answers within `connect_timeout_s`; while the nodes that answer
        are still loading theirs (NOT_READY), again within the retry budget."""
        return self._run(self._metadata_plan())

    # --- the shell: performing the plans' actions ------------------------------------

    def _start(self, call: calls.Call[T]) -> Pending[T]:
        """`call`, sent now."""
        return Pending(self, call)

    def _run(self, plan: Plan[T]) -> T:
        """`plan`'s result, waited for."""
        return Pending(self, plan).result()

    def _send_to(
        self, address: Address, message: Message, fresh: bool
    ) -> tuple[BlockingConnection, int]:
        conn = self._connection(address, fresh)
        return conn, conn.send(message)

    def _connection(self, address: Address, fresh_check: bool) -> BlockingConnection:
        """The live connection to `address`, made if needed. With `fresh_check`,
        an idle connection the node has closed is replaced before use, so a
        request that must not be repeated is not lost into a dead socket."""
        with self._lock:
            if self._closed:
                raise ConnectionLostError("the client is closed")
            conn = self._conns.get(address)
            if conn is not None and (conn.broken or (fresh_check and conn.peer_closed())):
                conn = None
            if conn is None:
                conn = BlockingConnection(
                    address, self.connect_timeout_s, self._max_frame_bytes, self.tls
                )
                if self.credentials is not None:
                    self._log_in(conn, self.credentials)
                self._conns[address] = conn
            return conn

    def _log_in(self, conn: BlockingConnection, credentials: Credentials) -> None:
        """Log `conn` in (`laminar.client.login`); closed if that fails."""
        deadline = time.monotonic() + self.timeout_s
        try:
            login = ClientLogin(credentials)
            request: AuthenticateRequest | None = login.first()
            while request is not None:
                request = login.answer(conn.wait(conn.send(request), deadline))
        except BaseException:
            conn.close()
            raise

    def _recover(self) -> None:
        """`RECOVER`: forget broken connections and refresh the metadata."""
        with self._lock:
            for address, conn in list(self._conns.items()):
                if conn.broken:
                    del self._conns[address]
        with contextlib.suppress(LaminarError):
            self.refresh_metadata_view()
