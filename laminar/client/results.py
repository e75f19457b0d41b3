"""What the client returns, and how an answer frame becomes it.

Every answer goes through `expect` (or `fetched_records`): an error frame
becomes the typed exception for its code, anything else is decoded as the
response type the request asked for. Records come back as `Record` tuples; a
consumer makes one per record, so they are NamedTuples built with
`tuple.__new__`, and a record without key and headers is decoded with one
slice.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat
from typing import Final, NamedTuple, TypeVar

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
from laminar.wire.records import simple_value_starts, unpack_fetch_columns

M = TypeVar("M", bound=Message)

_new_tuple = tuple.__new__
_KIND_MASK: Final = Flags.RESPONSE | Flags.ERROR
_U32: Final = struct.Struct(">I")
_FETCH_ENTRY: Final = struct.Struct(">QQI")  # index, timestamp_ms, blob_len


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
    value: bytes
    key: bytes | None
    headers: dict[str, bytes] | None


def fetched_records(frame: Frame) -> list[Record]:
    """The records of a fetch answer (or the server's error raised).

    This is the consumer's hot path, so the fetch batch (layout in
    `laminar.wire.records`: count, a table of (index, timestamp_ms, blob_len),
    then the blobs) is decoded straight into `Record`s in one pass: half the
    per-record cost of `decode_fetch_batch` followed by a second pass over its
    `FetchedRecord`s. Tests hold it to `decode_fetch_batch` on random batches.
    """
    if frame.flags & _KIND_MASK != Flags.RESPONSE or frame.op != Op.FETCH:
        expect(frame, FetchResponse)  # raises the server's error or says what is wrong
    payload = frame.payload
    if len(payload) < 4:
        raise _bad_fetch(f"payload of {len(payload)} bytes has no record count")
    (count,) = _U32.unpack_from(payload)
    table_end = 4 + _FETCH_ENTRY.size * count
    if table_end > len(payload):
        raise _bad_fetch(f"{count} records do not fit a payload of {len(payload)} bytes")
    if not count:
        if table_end != len(payload):
            raise _bad_fetch(f"an empty batch carries {len(payload) - table_end} stray bytes")
        return []
    indexes, stamps, sizes = unpack_fetch_columns(payload, count)
    starts = list(accumulate(sizes, initial=table_end))
    if starts[-1] == len(payload):
        ends = starts[1:]
        value_starts = simple_value_starts(payload, starts[:-1], sizes)
        if value_starts is not None:
            # Every record is a bare value (no key, no headers but the producer
            # stamp): slice them all with C-level loops, no Python per record.
            values = map(payload.__getitem__, map(slice, value_starts, ends))
            rows = zip(indexes, stamps, values, repeat(None), repeat(None), strict=False)
            return list(map(tuple.__new__, repeat(Record), rows))
    return _fetched_one_by_one(payload, table_end)


def _fetched_one_by_one(payload: bytes, table_end: int) -> list[Record]:
    """`fetched_records` for batches with keys or headers, checking each record."""
    out: list[Record] = []
    append = out.append
    pos = table_end
    payload_len = len(payload)
    for index, timestamp_ms, size in _FETCH_ENTRY.iter_unpack(payload[4:table_end]):
        end = pos + size
        if end > payload_len:
            raise _bad_fetch(f"record {index} of {size} bytes runs past the payload's end")
        if size and payload[pos] == 0:  # value only: one slice
            append(_new_tuple(Record, (index, timestamp_ms, payload[pos + 1 : end], None, None)))
        else:
            try:
                value, key, headers = decode_user_record(payload[pos:end])
            except ProtocolError as exc:
                raise _bad_fetch(exc.message) from exc
            append(_new_tuple(Record, (index, timestamp_ms, value, key, headers)))
        pos = end
    if pos != payload_len:
        raise _bad_fetch(f"record lengths add up to {pos} bytes, the payload has {payload_len}")
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
