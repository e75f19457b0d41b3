"""Requests as data: what to send where, how to read the answer, whether to retry.

A `Call` is everything the sync and async clients need to perform a request
and to perform it again: `target(view)` routes it with the current metadata
(so a retry after a metadata refresh goes to the new owner), `parse(frame)`
turns the answer into the result or raises the typed error, and
`idempotent` tells the retry rule (`laminar.client.retry`) whether a lost
answer may be asked for again. Record blobs are encoded once, when the call
is built, not on every attempt.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from laminar.client.batch import RecordBatch
from laminar.client.errors import RecordTooLargeError
from laminar.client.results import Offsets, Record, expect, fetched_records
from laminar.client.routing import Address, ClusterView
from laminar.groups.frames import FindCoordinatorRequest, FindCoordinatorResponse
from laminar.placement import partition_id, shard_for
from laminar.wire import (
    AlterTopicRequest,
    AlterTopicResponse,
    CreateTopicRequest,
    CreateTopicResponse,
    DecommissionNodeRequest,
    DecommissionNodeResponse,
    DeleteTopicRequest,
    DeleteTopicResponse,
    ErrorCode,
    FetchRequest,
    Frame,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    Message,
    Ping,
    Pong,
    ProduceRequest,
    ProduceResponse,
    TopicInfo,
)

T = TypeVar("T")

Target = Callable[[ClusterView], tuple[Address, Message]]


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request, ready to be sent (again) with whatever metadata is current."""

    what: str
    """The request in words, for error messages ("produce of 2 records to events/3")."""
    target: Target
    parse: Callable[[Frame], T]
    idempotent: bool
    wait_s: float = 0.0
    """How long the node may hold the request on purpose (a long-poll fetch)."""
    topic: str | None = None
    """The topic it addresses: an unknown-topic answer invalidates its metadata."""
    failed: Callable[[], None] | None = None
    """Called once if the call fails for good (an idempotent produce's partition
    then starts a new producer: `laminar.client.producer`)."""
    again: Callable[[T], T] | None = None
    """What an answer means when an earlier attempt of this call may have been
    applied (its answer was lost): a commit sent again hears "committed before"
    about its own first attempt."""
    appends: bool = False
    """A produce: given up on after an attempt whose answer was lost, it fails
    with `OutcomeUnknownError` whatever the last attempt said
    (`laminar.client.retry.given_up`), so a caller never resends records that
    may be in the partition under a new sequence."""


def produce(
    topic: str,
    partition: int,
    values: Sequence[bytes],
    keys: Sequence[bytes | None] | None = None,
    headers: Sequence[Mapping[str, bytes] | None] | None = None,
    producer_id: int | None = None,
    sequence: int | None = None,
    failed: Callable[[], None] | None = None,
) -> Call[int]:
    """Append records; the result is the index of the first. With `producer_id`
    and `sequence` the node deduplicates (`laminar.shards.idempotence`), so the
    call is idempotent and is retried like a fetch."""
    if not values:
        raise ValueError("produce needs at least one value")
    stamped = ProduceRequest.from_values(
        0, values, keys, headers, producer_id=producer_id, sequence=sequence
    )
    blobs = stamped.blobs
    frame_bytes = sum(len(b) for b in stamped.encode_buffers(0))

    def target(view: ClusterView) -> tuple[Address, Message]:
        route = view.route(topic, partition)
        if frame_bytes > view.max_frame_bytes:  # the node would refuse it and close
            raise _too_large(len(blobs), frame_bytes, view.max_frame_bytes)
        return route.address, ProduceRequest(route.partition_id, blobs, producer_id, sequence)

    return Call(
        f"produce of {len(blobs)} records to {topic}/{partition}",
        target,
        _first_index,
        idempotent=producer_id is not None,
        topic=topic,
        failed=failed,
        appends=True,
    )


def _too_large(count: int, frame_bytes: int, limit: int) -> RecordTooLargeError:
    what = "a record" if count == 1 else f"a produce of {count} records"
    advice = "" if count == 1 else "; send fewer records per produce"
    return RecordTooLargeError(
        f"{what} takes {frame_bytes} bytes on the wire, more than the node accepts: "
        f"requests of at most {limit} bytes (its --max-frame-bytes){advice}",
        code=ErrorCode.RECORD_TOO_LARGE,
    )


def _first_index(frame: Frame) -> int:
    return expect(frame, ProduceResponse).first_index


def fetch(
    topic: str,
    partition: int,
    index: int,
    max_bytes: int,
    max_records: int,
    max_wait_ms: int,
) -> Call[list[Record]]:
    """Read records from `index` on (long-poll up to `max_wait_ms` when none yet)."""
    return fetch_parsed(
        topic, partition, index, max_bytes, max_records, max_wait_ms, fetched_records
    )


def fetch_batch(
    topic: str,
    partition: int,
    index: int,
    max_bytes: int,
    max_records: int,
    max_wait_ms: int,
) -> Call[RecordBatch]:
    """`fetch`, answered as one `RecordBatch` instead of a `Record` per record."""

    def parse(frame: Frame) -> RecordBatch:
        return RecordBatch.from_frame(frame, partition)

    return fetch_parsed(topic, partition, index, max_bytes, max_records, max_wait_ms, parse)


def fetch_parsed(
    topic: str,
    partition: int,
    index: int,
    max_bytes: int,
    max_records: int,
    max_wait_ms: int,
    parse: Callable[[Frame], T],
) -> Call[T]:
    """`fetch`, its answer parsed by `parse` (a batch, or the group consumer's records)."""

    def target(view: ClusterView) -> tuple[Address, Message]:
        route = view.route_read(topic, partition)
        request = FetchRequest(
            route.partition_id,
            index,
            max_bytes,
            max_records,
            max_wait_ms,
            any_replica=view.hints.read_from_followers,
        )
        return route.address, request

    return Call(
        f"fetch from {topic}/{partition} at index {index}",
        target,
        parse,
        idempotent=True,
        wait_s=max_wait_ms / 1000,
        topic=topic,
    )


def list_offsets(
    topic: str,
    partition: int,
    timestamp_ms: int | None = None,
    node: str | None = None,
    count_from: int | None = None,
) -> Call[ListOffsetsResponse]:
    """A partition's range and, with `timestamp_ms`, the first index at that time;
    with `node`, as that node's replica sees it (cluster only); with
    `count_from`, how many records lie from there to the committed end."""

    def target(view: ClusterView) -> tuple[Address, Message]:
        route = view.route_read(topic, partition)
        any_replica = view.hints.read_from_followers
        if node is not None:  # that replica's own view, whatever its role
            route, any_replica = view.route_to(route.partition_id, node), True
        return route.address, ListOffsetsRequest(
            route.partition_id, timestamp_ms, any_replica, count_from
        )

    return Call(
        f"list offsets of {topic}/{partition}",
        target,
        _list_offsets,
        idempotent=True,
        topic=topic,
    )


def _list_offsets(frame: Frame) -> ListOffsetsResponse:
    return expect(frame, ListOffsetsResponse)


def timestamp_index_of(response: ListOffsetsResponse) -> int:
    """The first index appended at or after the asked time; the readable end
    (committed, not the log's end) when none was."""
    if response.timestamp_index is None:
        return response.committed_index
    return response.timestamp_index


def offsets_of(response: ListOffsetsResponse) -> Offsets:
    """The readable range: committed records only (on a single node, all of them)."""
    return Offsets(response.lowest_index, response.committed_index)


def create_topic(
    name: str,
    partitions: int,
    config: dict[str, int | str],
    replication_factor: int | None = None,
) -> Call[TopicInfo]:
    def target(view: ClusterView) -> tuple[Address, Message]:
        request = CreateTopicRequest(name, partitions, config, replication_factor)
        return view.node_route().address, request

    return Call(f"create topic {name!r}", target, _created, idempotent=False)


def _created(frame: Frame) -> TopicInfo:
    return expect(frame, CreateTopicResponse).topic


def alter_topic(name: str, config: dict[str, int | str], remove: Sequence[str]) -> Call[TopicInfo]:
    """Set and remove topic config keys. Sending it twice leaves the same config,
    so a lost answer may be asked for again."""

    def target(view: ClusterView) -> tuple[Address, Message]:
        return view.node_route().address, AlterTopicRequest(name, config, tuple(remove))

    return Call(f"alter topic {name!r}", target, _altered, idempotent=True)


def _altered(frame: Frame) -> TopicInfo:
    return expect(frame, AlterTopicResponse).topic


def decommission_node(node_id: str, cancel: bool) -> Call[tuple[str, ...]]:
    """Record that a node leaves for good (or stays). Repeating it changes
    nothing, so a lost answer may be asked for again."""

    def target(view: ClusterView) -> tuple[Address, Message]:
        return view.node_route().address, DecommissionNodeRequest(node_id, cancel)

    what = f"{'cancel the decommission of' if cancel else 'decommission'} node {node_id!r}"
    return Call(what, target, _decommissioned, idempotent=True)


def _decommissioned(frame: Frame) -> tuple[str, ...]:
    return expect(frame, DecommissionNodeResponse).decommissioned


def delete_topic(name: str) -> Call[DeleteTopicResponse]:
    def target(view: ClusterView) -> tuple[Address, Message]:
        return view.node_route().address, DeleteTopicRequest(name)

    return Call(f"delete topic {name!r}", target, _deleted, idempotent=False)


def _deleted(frame: Frame) -> DeleteTopicResponse:
    return expect(frame, DeleteTopicResponse)


def list_topics() -> Call[list[TopicInfo]]:
    def target(view: ClusterView) -> tuple[Address, Message]:
        return view.node_route().address, ListTopicsRequest()

    return Call("list topics", target, _topics, idempotent=True)


def _topics(frame: Frame) -> list[TopicInfo]:
    return list(expect(frame, ListTopicsResponse).topics)


def find_coordinator(group: str) -> Call[FindCoordinatorResponse]:
    """Where `group` is served. Asking again is harmless: the node makes the
    positions topic once."""

    def target(view: ClusterView) -> tuple[Address, Message]:
        return view.node_route().address, FindCoordinatorRequest(group)

    return Call(
        f"find the coordinator of group {group[:60]!r}",
        target,
        lambda frame: expect(frame, FindCoordinatorResponse),
        idempotent=True,
    )


def ping(
    *,
    topic: str | None = None,
    partition: int = 0,
    shard: int | None = None,
    address: Address | None = None,
) -> Call[Pong]:
    """A ping to the owner of `topic`/`partition`, or to shard `shard`'s port, or
    to `address` (the node port), in that order of preference."""

    def target(view: ClusterView) -> tuple[Address, Message]:
        if topic is not None:
            route = view.route(topic, partition)
            return route.address, Ping(route.partition_id)
        if shard is not None:
            if not 0 <= shard < view.shard_count:
                raise ValueError(f"the node has shards 0..{view.shard_count - 1}, not {shard}")
            return view.shard_addresses[shard], Ping(owned_probe_pid(shard, view.shard_count))
        if address is not None:
            return address, Ping(0)
        return view.node_route().address, Ping(0)

    if topic is not None:
        where = f"{topic}/{partition}"
    else:
        where = "the node" if shard is None else f"shard {shard}"
    return Call(f"ping {where}", target, _pong, idempotent=True, topic=topic)


def owned_probe_pid(shard: int, shard_count: int) -> int:
    """A partition id that `shard` owns, for probing that shard itself: pings are
    routed like partition requests, so a ping to a shard's port with a partition
    it does not own is forwarded and answered by the owner. The ids come from the
    reserved topic 0, which pings may name without it holding that partition."""
    for idx in itertools.count():
        pid = partition_id(0, idx)
        if shard_for(pid, shard_count) == shard:
            return pid
    raise AssertionError("unreachable")


def _pong(frame: Frame) -> Pong:
    return expect(frame, Pong)
