"""What the client returns, and how an answer frame becomes it.

Every answer goes through `expect` (or `fetched_records`): an error frame
becomes the typed exception for its code, anything else is decoded as the
response type the request asked for. Records come back as `Record` tuples; a
consumer makes one per record, so they are NamedTuples built with
`tuple.__new__`, and a record without key and headers is decoded with one
slice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Final, NamedTuple, TypeVar

from laminar.client.errors import ProtocolViolationError, server_error
from laminar.client.routing import ClusterView
from laminar.placement import partition_id
from laminar.wire import (
    ErrorResponse,
    FetchResponse,
    Flags,
    Frame,
    ListOffsetsResponse,
    Message,
    Op,
    ProtocolError,
    TopicInfo,
    decode_user_record,
)
from laminar.wire.records import Headers, locate_fetch_records

M = TypeVar("M", bound=Message)

_new_tuple = tuple.__new__
_KIND_MASK: Final = Flags.RESPONSE | Flags.ERROR


def expect(frame: Frame, response_type: type[M]) -> M:
    """The answer in `frame` as a `response_type`, or the server's error raised."""
    try:
        if frame.flags & Flags.ERROR:
            err = ErrorResponse.from_frame(frame)
            raise server_error(err.code, err.message, err.leader, err.partition_id)
        return response_type.from_frame(frame)
    except ProtocolError as exc:
        raise ProtocolViolationError(
            f"the node's answer does not decode as {response_type.__name__}: {exc.message}"
        ) from exc


class Record(NamedTuple):
    """One record read from a partition. `index` hides `tuple.index` on purpose,
    as in the wire's `FetchedRecord`."""

    index: int  # type: ignore[assignment]
    timestamp_ms: int
    value: bytes | None  # None: a null value (a Kafka tombstone)
    key: bytes | None
    headers: Headers | None


def fetched_records(
    frame: Frame, prefix: tuple[Any, ...] = (), kind: type[tuple[Any, ...]] = Record
) -> list[Any]:
    """The records of a fetch answer (or the server's error raised), each a
    `kind` of `prefix`'s fields then a `Record`'s (the group consumer's
    `ConsumedRecord` starts with the topic and partition: made here, one
    tuple per record, not a `Record` made over).

    This is the consumer's hot path, so the fetch batch (layout in
    `laminar.wire.records`: count, a table of (index, timestamp_ms, blob_len),
    then the blobs) is located and checked in one C loop
    (`locate_fetch_records`) and sliced straight into `Record`s. Tests hold it
    to `decode_fetch_batch` on random batches.
    """
    if frame.flags & _KIND_MASK != Flags.RESPONSE or frame.op != Op.FETCH:
        expect(frame, FetchResponse)  # raises the server's error or says what is wrong
    payload = frame.payload
    try:
        located = locate_fetch_records(payload)
    except ProtocolError as exc:
        raise _bad_fetch(exc.message) from exc
    indexes, stamps = located.indexes, located.timestamps_ms
    if located.simple:
        # Every record is a bare value (no key, no headers but the producer
        # stamp): slice them all with C-level loops, no Python per record.
        values = map(payload.__getitem__, map(slice, located.value_starts, located.ends))
        rows = zip(
            *map(repeat, prefix), indexes, stamps, values, repeat(None), repeat(None), strict=False
        )
        return list(map(tuple.__new__, repeat(kind), rows))
    out: list[Any] = []
    for index, timestamp_ms, start, end in zip(
        indexes, stamps, located.starts, located.ends, strict=True
    ):
        try:
            value, key, headers = decode_user_record(payload[start:end])
        except ProtocolError as exc:
            raise _bad_fetch(exc.message) from exc
        out.append(_new_tuple(kind, (*prefix, index, timestamp_ms, value, key, headers)))
    return out


def _bad_fetch(reason: str) -> ProtocolViolationError:
    return ProtocolViolationError(f"the node's fetch answer does not decode: {reason}")


class Offsets(NamedTuple):
    """A partition's index range: `lowest` is the first retained index, `highest`
    the index the next append will get (exclusive), so it holds
    `highest - lowest` records."""

    lowest: int
    highest: int


class Sent(NamedTuple):
    """Where some records of a `send` went: `records` of them in `partition`,
    the first at `first_index` (the others right after it)."""

    partition: int
    first_index: int
    records: int


class PingResult(NamedTuple):
    """Which shard served a ping (`shard_id`), which shard's socket received it
    (`received_by`, different when the node forwarded it), and the round trip."""

    node_id: str
    shard_id: int
    received_by: int
    round_trip_ms: float


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    """One partition of a topic: its id, owner shard and endpoint, and range;
    in a cluster also its `replicas` (node ids: the group's voters as the
    answering replica applied them, else placement's, best first) and `leader`
    (None: single node, or no leader known right now). `highest` is the
    committed end."""

    index: int
    partition_id: int
    shard_id: int
    host: str
    port: int
    lowest: int
    highest: int
    leader: str | None = None
    replicas: tuple[str, ...] = ()

    @property
    def records(self) -> int:
        return self.highest - self.lowest


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic and the state of each of its partitions."""

    topic: TopicInfo
    partitions: tuple[PartitionDescription, ...]


def describe(
    view: ClusterView, topic: TopicInfo, answers: Sequence[ListOffsetsResponse]
) -> TopicDescription:
    """A `TopicDescription` from the offsets of each partition, in order; the
    leaders they name are noted in `view` (later requests go straight there)."""
    parts = []
    for p, offsets in enumerate(answers):
        pid = partition_id(topic.topic_id, p)
        view.learn_leader(pid, offsets.leader)
        route = view.route_pid(pid)
        host, port = route.address
        parts.append(
            PartitionDescription(
                p,
                route.partition_id,
                route.shard_id,
                host,
                port,
                offsets.lowest_index,
                offsets.committed_index,
                offsets.leader,
                offsets.voters or (tuple(view.replicas(pid)) if view.nodes else ()),
            )
        )
    return TopicDescription(topic, tuple(parts))
