"""What the client returns, and how an answer frame becomes it.

Every answer goes through `expect`: an error frame becomes the typed
exception for its code, anything else is decoded as the response type the
request asked for. Records come back as `Record` tuples; a consumer makes one
per record, so they are NamedTuples built with `tuple.__new__`, and a record
without key and headers is decoded with one slice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from laminar.client.errors import ProtocolViolationError, server_error
from laminar.wire import (
    ErrorResponse,
    FetchedRecord,
    Flags,
    Frame,
    Message,
    ProtocolError,
    TopicInfo,
    decode_record,
)

M = TypeVar("M", bound=Message)

_new_tuple = tuple.__new__


def expect(frame: Frame, response_type: type[M]) -> M:
    """The answer in `frame` as a `response_type`, or the server's error raised."""
    try:
        if frame.flags & Flags.ERROR:
            err = ErrorResponse.from_frame(frame)
            raise server_error(err.code, err.message)
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


def to_records(fetched: tuple[FetchedRecord, ...]) -> list[Record]:
    """Decode the blobs of a fetch answer into `Record`s."""
    out: list[Record] = []
    append = out.append
    for index, timestamp_ms, blob in fetched:
        if blob and blob[0] == 0:  # no key, no headers: the value is the rest
            append(_new_tuple(Record, (index, timestamp_ms, blob[1:], None, None)))
        else:
            value, key, headers = decode_record(blob)
            append(_new_tuple(Record, (index, timestamp_ms, value, key, headers)))
    return out


class Offsets(NamedTuple):
    """A partition's index range: `lowest` is the first retained index, `highest`
    the index the next append will get (exclusive), so it holds
    `highest - lowest` records."""

    lowest: int
    highest: int


class PingResult(NamedTuple):
    """Which shard served a ping (`shard_id`), which shard's socket received it
    (`received_by`, different when the node forwarded it), and the round trip."""

    node_id: str
    shard_id: int
    received_by: int
    round_trip_ms: float


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    """One partition of a topic: its id, owner shard and endpoint, and range."""

    index: int
    partition_id: int
    shard_id: int
    host: str
    port: int
    lowest: int
    highest: int

    @property
    def records(self) -> int:
        return self.highest - self.lowest


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic and the state of each of its partitions."""

    topic: TopicInfo
    partitions: tuple[PartitionDescription, ...]
