"""The client's core, sans I/O: routing, retries and the state both clients share.

Every operation is a *plan*: a generator that yields what it needs done and
returns the result (or raises the typed error). It yields

- `Send(address, message, fresh, timeout_s)`: send `message` to `address`
  and answer with the answer's frame (`fresh`: first replace an idle
  connection the node has closed, for a request that must not be lost into a
  dead socket);
- `Sleep(delay_s)`: wait, then answer None;
- `REFRESH`: fetch the metadata (the shell runs `_metadata_plan`, sharing one
  fetch among concurrent callers if it can) and answer with the new view;
- `RECOVER` (before a retry): drop the connections that broke and fetch the
  metadata again, leaving any failure for the retry itself to meet; answer
  None;
- `Start(call)`: send `call` now without waiting for it (retried as any call)
  and answer with a handle; `Join(handle)` answers with its result (or
  throws its error), `Drop(handle)` abandons it (its answer is never looked
  at), `Ready(handle)` answers whether its answer is in (`Join` would not
  wait), without waiting. A plan keeps a request in flight while its caller
  does something else (a group consumer's prefetch and unwaited commits,
  `laminar.client.consumer`).

A shell throws the `LaminarError` an action failed with into the plan
instead of answering (`generator.throw`); the plan decides what it means. So
the plan decides everything a request's fate depends on: its route, whether a
failure is retried (`laminar.client.retry`), the backoff, when metadata is
fetched again, what an answer teaches the routing (a named leader, an
unreachable node, a stale topic); the shells only perform the actions:
`Client` (`sync.py`) with blocking sockets and `time.sleep`, `AsyncClient`
(`aio.py`) with the event loop. Both therefore behave the same by
construction, and each public method of theirs is a line or two around one
of the plans here. The one shortcut: a call's first attempt may be made by
the shell itself (`_direct_route`: route, send, parse), a generator per
request being measurable on the produce and fetch hot paths; a failure of
it is handed to `_call_plan`, which decides as if it had made the attempt.

Idempotent produce calls go through `laminar.client.producer` first (the
window and the batching, shared; each shell waits for room its own way);
each batch is then one `_call_plan`. Atomic writes (`laminar.client.writes`)
are calls too, and their per-attempt bookkeeping is I/O-free there.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Generator, Mapping, Sequence
from typing import Any, Final, NamedTuple, TypeVar

from laminar.client import calls
from laminar.client.errors import (
    LaminarError,
    NotReadyError,
    UnknownPartitionError,
    UnknownTopicError,
)
from laminar.client.login import Credentials
from laminar.client.partitioner import Records, StickyPartitioner
from laminar.client.producer import ProducerSequences
from laminar.client.protocol import CLIENT_MAX_FRAME_BYTES
from laminar.client.results import PingResult, Sent, expect
from laminar.client.retry import (
    Backoff,
    MetadataSearch,
    RetryPolicy,
    final_error,
    given_up,
    may_have_applied,
    no_answer,
)
from laminar.client.routing import (
    Address,
    ClusterView,
    RouteHints,
    metadata_timeout_s,
    parse_addresses,
)
from laminar.memory import tune_allocator
from laminar.security.tls import client_context
from laminar.wire import Message, MetadataRequest, MetadataResponse, TopicInfo

T = TypeVar("T")


class Send(NamedTuple):
    """Send `message` to `address`; answer with the answer's frame."""

    address: Address
    message: Message
    fresh: bool
    """Replace an idle connection the node closed before sending on it."""
    timeout_s: float
    """How long the answer may take (past it the node counts as silent)."""


class Sleep(NamedTuple):
    """Wait `delay_s` seconds (a retry's backoff); answer None."""

    delay_s: float


class _Refresh:
    __slots__ = ()


class _Recover:
    __slots__ = ()


class Start(NamedTuple):
    """Send `call` now (retried as `_call_plan` retries it); answer with a
    handle for `Join` or `Drop` (the shell's own: `Pending`, or a task)."""

    call: calls.Call[Any]


class Join(NamedTuple):
    """Wait for a `Start`ed call; answer with its result, or throw its error."""

    handle: Any


class Drop(NamedTuple):
    """Abandon a `Start`ed call: its answer or error is never looked at; answer None."""

    handle: Any


class Ready(NamedTuple):
    """Whether a `Start`ed call's answer (or error) is in, so that `Join` would
    not wait; answer a bool, without waiting."""

    handle: Any


REFRESH: Final = _Refresh()
"""Fetch the metadata (`_metadata_plan`); answer with the new `ClusterView`."""
RECOVER: Final = _Recover()
"""Before a retry: drop broken connections, refresh the metadata (a failure
here is left for the retry to meet); answer None."""

Action = Send | Sleep | _Refresh | _Recover | Start | Join | Drop | Ready
Plan = Generator[Action, Any, T]
"""An operation as the actions it needs (see the module docstring)."""


class ClientCore:
    """What `Client` and `AsyncClient` share: their settings, the metadata they
    route by, what answers taught them, and every operation as a plan. No
    I/O: the subclasses perform the plans' actions."""

    def __init__(
        self,
        bootstrap: str,
        *,
        timeout_s: float,
        connect_timeout_s: float,
        retry: RetryPolicy | None,
        max_frame_bytes: int = CLIENT_MAX_FRAME_BYTES,
        read_from: str,
        idempotent: bool,
        tls: bool | ssl.SSLContext = False,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        username: str | None = None,
        password: str | None = None,
        mechanism: str = "SCRAM-SHA-256",
    ) -> None:
        if read_from not in ("leader", "follower"):
            raise ValueError(f"read_from is 'leader' or 'follower', not {read_from!r}")
        tune_allocator()  # fetch answers are MiB-sized buffers: see laminar.memory
        self.bootstraps: tuple[Address, ...] = parse_addresses(bootstrap)
        self.bootstrap: Address = self.bootstraps[0]
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.tls = client_context(tls, ca_file, cert_file, key_file)
        """The context every connection handshakes with (None: plaintext)."""
        self.credentials = Credentials.of(username, password, mechanism)
        """Who every connection logs in as (None: it does not log in)."""
        self.retry = retry or RetryPolicy()
        self._max_frame_bytes = max_frame_bytes
        self.idempotent = idempotent
        self._lock = threading.RLock()
        """Guards the view and the hints: the blocking client is shared by threads."""
        self._view: ClusterView | None = None
        self._sequences = ProducerSequences()
        self._partitioner = StickyPartitioner()
        self._hints = RouteHints(read_from_followers=read_from == "follower")
        """Leaders and unreachable nodes learned from answers (kept across refreshes)."""
        self._closed = False

    # --- plans -----------------------------------------------------------------------

    def _call_plan(
        self, call: calls.Call[T], failed: tuple[Address, LaminarError] | None = None
    ) -> Plan[T]:
        """Perform `call`, retrying it as `laminar.client.retry` allows, with
        fresh metadata before each retry. With `failed`, the shell made the
        first attempt itself (`_direct_route`) and it failed so, at that address."""
        backoff: Backoff | None = None
        applied_maybe = False  # an earlier attempt may have taken effect
        while True:
            address: Address | None = None
            if failed is not None:
                (address, error), failed = failed, None
            else:
                try:
                    view = self._view or (yield REFRESH)
                    try:
                        address, message = call.target(view)
                    except (UnknownTopicError, UnknownPartitionError):
                        # Perhaps created since the metadata was fetched: look once more.
                        address, message = call.target((yield REFRESH))
                    frame = yield Send(
                        address, message, not call.idempotent, self.timeout_s + call.wait_s
                    )
                    result = call.parse(frame)
                    return call.again(result) if applied_maybe and call.again else result
                except LaminarError as exc:
                    error = exc
            applied_maybe = applied_maybe or may_have_applied(error)
            if address is not None and no_answer(error):
                self._note_unreachable(address)
            self._note_leader(error)
            final = final_error(error, call.idempotent, call.what)
            if final is None:
                backoff = backoff or Backoff(self.retry)
                delay = backoff.next_delay()
                if delay is not None:
                    yield Sleep(delay)
                    yield RECOVER
                    continue
                final = error  # the retry budget is spent
            final = given_up(final, applied_maybe and call.appends, call.what)
            self._note_failure(call, final)
            raise final

    def _direct_route(self, call: calls.Call[Any]) -> tuple[Address, Message] | None:
        """Where `call`'s first attempt goes when the shell may make it without a
        plan (the hot path: a generator per request costs a few microseconds):
        with metadata at hand and a route found. None leaves it all to
        `_call_plan`; a first attempt that fails goes on there (`failed`)."""
        view = self._view
        if view is None:
            return None
        try:
            return call.target(view)
        except LaminarError:
            return None

    def _metadata_plan(self) -> Plan[ClusterView]:
        """Metadata from the first address that answers within
        `connect_timeout_s` (`MetadataSearch`: the bootstrap addresses, then
        every node known); while the nodes that answer are still loading
        theirs (NOT_READY), again within the retry budget. The view becomes
        the one the client routes by."""
        backoff: Backoff | None = None
        timeout_s = metadata_timeout_s(self.timeout_s, self.connect_timeout_s)
        while True:
            search = MetadataSearch(self.bootstraps, self._view, self._hints)
            try:
                for address in search.candidates:
                    try:  # (fresh: a connection the node closed is replaced first)
                        frame = yield Send(address, MetadataRequest(), True, timeout_s)
                        response = expect(frame, MetadataResponse)
                        view = ClusterView.from_metadata(response, address, self._hints)
                        break
                    except LaminarError as exc:
                        with self._lock:
                            search.failed(address, exc)
                else:
                    raise search.error()
            except NotReadyError:
                backoff = backoff or Backoff(self.retry)
                delay = backoff.next_delay()
                if delay is None:
                    raise
                yield Sleep(delay)
                continue
            with self._lock:
                self._view = view
            return view

    def _topic_change_plan(self, call: calls.Call[TopicInfo]) -> Plan[TopicInfo]:
        """Create or alter a topic; the routing learns the answer at once."""
        topic = yield from self._call_plan(call)
        with self._lock:
            if self._view is not None:
                self._view = self._view.with_topic(topic)
        return topic

    def _delete_topic_plan(self, name: str) -> Plan[None]:
        yield from self._call_plan(calls.delete_topic(name))
        with self._lock:
            if self._view is not None:
                self._view = self._view.without_topic(name)

    def _ping_plan(self, topic: str | None, partition: int, shard: int | None) -> Plan[PingResult]:
        """Ping the owner of `topic`/`partition`, or shard `shard`, or (with
        neither) the node port, timing the round trip."""
        address = self.bootstrap if topic is None and shard is None else None
        call = calls.ping(topic=topic, partition=partition, shard=shard, address=address)
        start = time.perf_counter()
        pong = yield from self._call_plan(call)
        elapsed_ms = (time.perf_counter() - start) * 1000
        return PingResult(pong.node_id, pong.shard_id, pong.received_by, elapsed_ms)

    def _split_plan(
        self,
        topic: str,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None,
        headers: Sequence[Mapping[str, bytes] | None] | None,
    ) -> Plan[list[tuple[int, Records]]]:
        """`send`'s records grouped by partition (`laminar.client.partitioner`),
        with the metadata fetched again if the topic is not known yet."""
        view = self._view
        try:
            if view is None:
                raise UnknownTopicError(topic)
            partitions = view.topic(topic).partitions
        except UnknownTopicError:  # no metadata yet, or the topic is new
            partitions = (yield REFRESH).topic(topic).partitions
        return self._partitioner.split(topic, partitions, values, keys, headers)

    # --- what answers teach ----------------------------------------------------------

    def _note_unreachable(self, address: Address) -> None:
        """Nobody answers at `address`: route around its node for a while."""
        with self._lock:
            self._hints.unreachable(address, self._view.nodes if self._view else {})

    def _note_leader(self, error: LaminarError) -> None:
        """A NOT_LEADER answer that names the leader: send there next time."""
        with self._lock:
            if self._view is not None:
                self._view.learn(error)

    def _note_failure(self, call: calls.Call[Any], error: LaminarError) -> None:
        """A call failed for good: tell it (`Call.failed`). An unknown-topic
        answer means the cached topic may be stale (deleted and recreated with a
        new id): drop it so the next request looks again."""
        if call.failed is not None:
            call.failed()
        if call.topic is not None and isinstance(error, UnknownTopicError | UnknownPartitionError):
            with self._lock:
                if self._view is not None:
                    self._view = self._view.without_topic(call.topic)


def sent(groups: Sequence[tuple[int, Records]], firsts: Sequence[int]) -> list[Sent]:
    """`send`'s result: where each partition's records went."""
    return [
        Sent(p, first, len(records[0])) for (p, records), first in zip(groups, firsts, strict=True)
    ]
