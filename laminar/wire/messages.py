"""Message types: one frozen dataclass per request and response, and their frames.

A message knows its op, which header fields it sends (a msgpack map) and what
its payload holds; `encode(correlation_id)` / `encode_buffers(...)` make a
frame, `from_frame(frame)` checks and reads one, and `decode_request` /
`decode_response` pick the type from the op and flags. The correlation id is
not part of a message: it belongs to the exchange, and the caller keeps it
(`frame.correlation_id`).

Field conventions: indexes are log indexes (u64); `highest_index` is
exclusive, the index the next append will get (an empty log has
`lowest_index == highest_index`); times are milliseconds since the Unix epoch
(`timestamp_ms`) or durations (`*_ms`); every node-level request (metadata,
topics) is sent with partition id 0.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from laminar.wire import fields as f
from laminar.wire.codec import HEADER_OFFSET, Buffer, Frame, encode_frame_buffers
from laminar.wire.errors import (
    ErrorCode,
    InvalidMessage,
    ProtocolError,
    UnknownOp,
    WireUsageError,
    error_code,
)
from laminar.wire.ops import Flags, Op
from laminar.wire.records import (
    PRODUCER_HEADER,
    FetchedRecord,
    ProducerStamp,
    add_header,
    check_parallel,
    decode_fetch_batch,
    decode_produce_batch,
    decode_record,
    encode_fetch_batch,
    encode_produce_batch,
    encode_record,
    stamp_only_record,
)

_RESPONSE = Flags.RESPONSE
_ERROR_RESPONSE = Flags.RESPONSE | Flags.ERROR
_KIND_MASK = Flags.RESPONSE | Flags.ERROR

DEFAULT_FETCH_MAX_BYTES = 1 << 20
DEFAULT_FETCH_MAX_RECORDS = 4096


class Message(abc.ABC):
    """What every message type shares: turning itself into a frame and back."""

    __slots__ = ()

    OP: ClassVar[int]
    FLAGS: ClassVar[int] = 0
    PAYLOAD: ClassVar[bool] = False
    """Whether frames of this type carry a payload; others must not (a payload
    nobody reads would only pin memory while the request waits)."""

    def _op(self) -> int:
        return self.OP

    def _partition(self) -> int:
        """The partition id for the frame prefix (0 for node-level messages)."""
        return 0

    def _header(self) -> dict[str, Any]:
        return {}

    def _payload(self) -> list[Buffer]:
        return []

    @classmethod
    @abc.abstractmethod
    def _decode(cls, frame: Frame) -> Self:
        """The message in `frame` (its op and flags already checked)."""

    def encode_buffers(self, correlation_id: int) -> list[Buffer]:
        """The frame as buffers for writev (record blobs are not copied)."""
        return encode_frame_buffers(
            self._op(),
            correlation_id,
            self._partition(),
            self._header(),
            self._payload(),
            flags=self.FLAGS,
        )

    def encode(self, correlation_id: int) -> bytes:
        """The frame as one bytes object."""
        return b"".join(self.encode_buffers(correlation_id))

    def to_frame(self, correlation_id: int) -> Frame:
        """The `Frame` this message is sent as, without going through bytes."""
        return Frame(
            self._op(),
            self.FLAGS,
            correlation_id,
            self._partition(),
            self._header(),
            b"".join(self._payload()),
        )

    @classmethod
    def from_frame(cls, frame: Frame) -> Self:
        """Read a message of this type; `InvalidMessage` if the frame does not fit it."""
        if frame.op != cls.OP or frame.flags & _KIND_MASK != cls.FLAGS:
            raise _context(
                InvalidMessage(
                    f"frame op={frame.op} flags=0x{frame.flags:02x} is not a {cls.__name__}"
                ),
                frame,
            )
        if frame.payload and not cls.PAYLOAD:
            raise _context(
                InvalidMessage(
                    f"a {cls.__name__} carries no payload; this one has {len(frame.payload)} bytes"
                ),
                frame,
            )
        try:
            return cls._decode(frame)
        except ProtocolError as exc:
            raise _context(exc, frame) from None


def _context(exc: ProtocolError, frame: Frame) -> ProtocolError:
    """Attach the frame's identity so the server can answer the right request."""
    if exc.correlation_id is None:
        exc.correlation_id = frame.correlation_id
        exc.op = frame.op
        exc.partition_id = frame.partition_id
    return exc


# --- nested structures ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """One shard of a node and the TCP port it serves partitions on directly;
    `kafka_port` is its Kafka listener's (None: the node's Kafka door is off).
    Header key `kafka_port`, absent when None (and from older nodes)."""

    shard_id: int
    host: str
    port: int
    kafka_port: int | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"shard_id": self.shard_id, "host": self.host, "port": self.port}
        if self.kafka_port is not None:
            out["kafka_port"] = self.kafka_port
        return out

    @classmethod
    def from_wire(cls, h: dict[str, Any]) -> ShardInfo:
        return cls(
            f.uint(h, "shard_id", f.U16),
            f.string(h, "host"),
            f.uint(h, "port", f.U16),
            f.opt_uint(h, "kafka_port", f.U16),
        )


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node of the cluster: its id, node port, shard ports (by shard id, empty
    until this node has learned them) and placement weight."""

    node_id: str
    host: str
    port: int
    shard_ports: tuple[int, ...] = ()
    weight: float = 1.0

    def to_wire(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "host": self.host,
            "port": self.port,
            "shard_ports": list(self.shard_ports),
            "weight": self.weight,
        }

    @classmethod
    def from_wire(cls, h: dict[str, Any]) -> NodeInfo:
        ports = h.get("shard_ports", [])
        if type(ports) is not list or not all(type(p) is int and 0 < p < f.U16 for p in ports):
            raise InvalidMessage("shard_ports must be a list of ports")
        weight = h.get("weight", 1.0)
        if type(weight) not in (int, float) or not 0 < weight < float("inf"):
            raise InvalidMessage("weight must be a positive number")
        return cls(
            f.string(h, "node_id"),
            f.string(h, "host"),
            f.uint(h, "port", f.U16),
            tuple(ports),
            float(weight),
        )


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic: its name, numeric id (the high half of its partition ids), size,
    and how many nodes hold each partition (`replication_factor`)."""

    name: str
    topic_id: int
    partitions: int
    config: dict[str, int | str] = field(default_factory=dict)
    replication_factor: int = 1

    def to_wire(self) -> dict[str, Any]:
        h: dict[str, Any] = {
            "name": self.name,
            "topic_id": self.topic_id,
            "partitions": self.partitions,
        }
        if self.config:
            h["config"] = self.config
        if self.replication_factor != 1:
            h["replication_factor"] = self.replication_factor
        return h

    @classmethod
    def from_wire(cls, h: dict[str, Any]) -> TopicInfo:
        return cls(
            f.string(h, "name"),
            f.uint(h, "topic_id", f.U32),
            f.uint(h, "partitions", f.U32 + 1),
            f.config(h, "config"),
            f.opt_uint(h, "replication_factor", 256) or 1,
        )


# --- requests ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProduceRequest(Message):
    """Append records to a partition. `blobs` are encoded records
    (`encode_record`); the server stores each as one log record, unchanged.

    An idempotent produce names its `producer_id` and the `sequence` of its
    first record, and its first blob carries the same `ProducerStamp` in the
    `laminar.producer` header (`from_values` puts it there); the partition
    appends the batch only if it continues that producer's sequence
    (`laminar.shards.idempotence`). No other record, and no record of a plain
    produce, may carry that header: decoding refuses it.

    Header: {producer_id?, sequence?}. Payload: a produce batch (`laminar.wire.records`).
    """

    OP: ClassVar[int] = Op.PRODUCE
    PAYLOAD: ClassVar[bool] = True

    partition_id: int
    blobs: tuple[bytes, ...]
    producer_id: int | None = None
    sequence: int | None = None

    def __post_init__(self) -> None:
        if (self.producer_id is None) != (self.sequence is None):
            raise WireUsageError("an idempotent produce needs both producer_id and sequence")

    @classmethod
    def from_values(
        cls,
        partition_id: int,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Mapping[str, bytes] | None] | None = None,
        *,
        producer_id: int | None = None,
        sequence: int | None = None,
    ) -> ProduceRequest:
        """Encode records from parallel lists of values, keys and headers; with
        `producer_id` and `sequence`, stamp the first record for idempotence."""
        check_parallel(values, keys, headers)
        if keys is None and headers is None:
            blobs = [b"\x00" + v for v in values]
        else:
            blobs = [
                encode_record(
                    v,
                    None if keys is None else keys[i],
                    None if headers is None else headers[i],
                )
                for i, v in enumerate(values)
            ]
        if producer_id is not None and sequence is not None and values:
            return cls.stamped(partition_id, blobs, producer_id, sequence)
        return cls(partition_id, tuple(blobs), producer_id, sequence)

    @classmethod
    def stamped(
        cls, partition_id: int, blobs: Sequence[bytes], producer_id: int, sequence: int
    ) -> ProduceRequest:
        """An idempotent produce of encoded records: the first carries the stamp."""
        out = list(blobs)
        out[0] = _stamped(out[0], ProducerStamp(producer_id, sequence, len(out)))
        return cls(partition_id, tuple(out), producer_id, sequence)

    def _partition(self) -> int:
        return self.partition_id

    def _header(self) -> dict[str, Any]:
        if self.producer_id is None:
            return {}
        return {"producer_id": self.producer_id, "sequence": self.sequence}

    def _payload(self) -> list[Buffer]:
        return encode_produce_batch(self.blobs)

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        producer_id = f.opt_uint(h, "producer_id")
        sequence = f.opt_uint(h, "sequence")
        if (producer_id is None) != (sequence is None):
            raise InvalidMessage("an idempotent produce needs both producer_id and sequence")
        blobs = decode_produce_batch(frame.payload, stamp_first=producer_id is not None)
        return cls(frame.partition_id, blobs, producer_id, sequence)


def _stamped(blob: bytes, stamp: ProducerStamp) -> bytes:
    """`blob` re-encoded with `stamp` added to its headers (the name is reserved)."""
    if blob[:1] == b"\x00":  # a bare value: the common case, without msgpack
        return stamp_only_record(memoryview(blob)[1:], stamp)
    _, _, headers = decode_record(blob)
    if headers and PRODUCER_HEADER in headers:
        raise WireUsageError(f"the record header {PRODUCER_HEADER!r} is reserved")
    return add_header(blob, PRODUCER_HEADER, stamp.encode())


@dataclass(frozen=True, slots=True)
class FetchRequest(Message):
    """Read records from `index` on. The server answers with at least one record
    when it has any (even past `max_bytes`), else waits up to `max_wait_ms` for
    one to be appended.

    On a replicated partition only the leader answers, and linearizably: it
    confirms its leadership with a majority (ReadIndex) after the request
    arrived, so the answer holds every record acknowledged before it was sent.
    With `any_replica` a follower answers too, from what it has committed,
    possibly behind the leader (`read_from="follower"`).

    Header: {index, max_bytes, max_records, max_wait_ms, any_replica?}.
    """

    OP: ClassVar[int] = Op.FETCH

    partition_id: int
    index: int
    max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    max_records: int = DEFAULT_FETCH_MAX_RECORDS
    max_wait_ms: int = 0
    any_replica: bool = False

    def _partition(self) -> int:
        return self.partition_id

    def _header(self) -> dict[str, Any]:
        header = {
            "index": self.index,
            "max_bytes": self.max_bytes,
            "max_records": self.max_records,
            "max_wait_ms": self.max_wait_ms,
        }
        if self.any_replica:
            header["any_replica"] = True
        return header

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(
            frame.partition_id,
            f.uint(h, "index"),
            f.uint(h, "max_bytes", f.U32),
            f.uint(h, "max_records", f.U32),
            f.uint(h, "max_wait_ms", f.U32),
            f.flag(h, "any_replica"),
        )


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest(Message):
    """Ask for a partition's index range and, with `timestamp_ms`, the first index
    appended at or after that time. Consistency as for `FetchRequest`: the
    leader answers linearizably; with `any_replica` any replica answers with
    its own view (what it committed, its log's end, the leader it knows).
    With `count_from`, the answer also counts the records (not Raft's own
    entries) from there to the committed end: a consumer group's lag.

    Header: {timestamp_ms?, any_replica?, count_from?}.
    """

    OP: ClassVar[int] = Op.LIST_OFFSETS

    partition_id: int
    timestamp_ms: int | None = None
    any_replica: bool = False
    count_from: int | None = None

    def _partition(self) -> int:
        return self.partition_id

    def _header(self) -> dict[str, Any]:
        header: dict[str, Any] = {}
        if self.timestamp_ms is not None:
            header["timestamp_ms"] = self.timestamp_ms
        if self.any_replica:
            header["any_replica"] = True
        if self.count_from is not None:
            header["count_from"] = self.count_from
        return header

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(
            frame.partition_id,
            f.opt_uint(h, "timestamp_ms"),
            f.flag(h, "any_replica"),
            f.opt_uint(h, "count_from"),
        )


@dataclass(frozen=True, slots=True)
class MetadataRequest(Message):
    """Ask for the node, its shards and ports, its topics and its routing mode.

    A node answers only once it has loaded its topic metadata (NOT_READY
    until then), except with `layout_only`: then at once, with no topics and
    no leaders (a peer opening its Raft links needs only the shard ports, and
    the metadata group a restarted node loads from needs those links).

    Header: {layout_only?}.
    """

    OP: ClassVar[int] = Op.METADATA

    layout_only: bool = False

    def _header(self) -> dict[str, Any]:
        return {"layout_only": True} if self.layout_only else {}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        return cls(f.flag(frame.header, "layout_only"))


@dataclass(frozen=True, slots=True)
class CreateTopicRequest(Message):
    """Create a topic with `partitions` partitions (the server assigns its id),
    each on `replication_factor` nodes (None: the cluster's default).

    Header: {name, partitions, config?, replication_factor?}.
    """

    OP: ClassVar[int] = Op.CREATE_TOPIC

    name: str
    partitions: int
    config: dict[str, int | str] = field(default_factory=dict)
    replication_factor: int | None = None

    def _header(self) -> dict[str, Any]:
        h: dict[str, Any] = {"name": self.name, "partitions": self.partitions}
        if self.config:
            h["config"] = self.config
        if self.replication_factor is not None:
            h["replication_factor"] = self.replication_factor
        return h

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(
            f.string(h, "name"),
            f.uint(h, "partitions", f.U32 + 1),
            f.config(h, "config"),
            f.opt_uint(h, "replication_factor", 256),
        )


@dataclass(frozen=True, slots=True)
class DeleteTopicRequest(Message):
    """Delete a topic and all its partitions.

    Header: {name}.
    """

    OP: ClassVar[int] = Op.DELETE_TOPIC

    name: str

    def _header(self) -> dict[str, Any]:
        return {"name": self.name}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        return cls(f.string(frame.header, "name"))


@dataclass(frozen=True, slots=True)
class AlterTopicRequest(Message):
    """Change a live topic's config: set the keys in `config`, return the keys in
    `remove` to their defaults (the keys and their meaning: `laminar.replication.topic_config`).

    Header: {name, config?, remove?}.
    """

    OP: ClassVar[int] = Op.ALTER_TOPIC

    name: str
    config: dict[str, int | str] = field(default_factory=dict)
    remove: tuple[str, ...] = ()

    def _header(self) -> dict[str, Any]:
        h: dict[str, Any] = {"name": self.name}
        if self.config:
            h["config"] = self.config
        if self.remove:
            h["remove"] = list(self.remove)
        return h

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(f.string(h, "name"), f.config(h, "config"), f.strings(h, "remove"))


@dataclass(frozen=True, slots=True)
class DecommissionNodeRequest(Message):
    """Decide that node `node_id` leaves the cluster for good: its replicas move
    to the others first (`cancel`: it stays after all). Repeating it is harmless.

    Header: {node_id, cancel?}.
    """

    OP: ClassVar[int] = Op.DECOMMISSION_NODE

    node_id: str
    cancel: bool = False

    def _header(self) -> dict[str, Any]:
        h: dict[str, Any] = {"node_id": self.node_id}
        if self.cancel:
            h["cancel"] = True
        return h

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(f.string(h, "node_id"), f.flag(h, "cancel"))


@dataclass(frozen=True, slots=True)
class ListTopicsRequest(Message):
    """Ask for every topic. Header: {}."""

    OP: ClassVar[int] = Op.LIST_TOPICS

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        return cls()


@dataclass(frozen=True, slots=True)
class Ping(Message):
    """A liveness and routing probe. Sent with a partition id, it reaches that
    partition's owner by the same routing as any request, and the `Pong` says
    which shard served it.

    Header: {}.
    """

    OP: ClassVar[int] = Op.PING

    partition_id: int = 0

    def _partition(self) -> int:
        return self.partition_id

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        return cls(frame.partition_id)


@dataclass(frozen=True, slots=True)
class ForwardRequest(Message):
    """Internal: a shard hands a client frame it received to the owning shard.
    `frame` is the client's frame, byte for byte; the owner answers with a
    `ForwardResponse` holding the response frame, which the origin sends back.

    Header: {origin_shard, client?, principal?} (client: the id of the client
    connection the frame came on, which owns the idempotent producers it
    introduces; principal: who that connection logged in as, which the owner
    authorizes). Payload: the client's frame.
    """

    OP: ClassVar[int] = Op.FORWARD
    PAYLOAD: ClassVar[bool] = True

    partition_id: int
    origin_shard: int
    frame: bytes
    client: int | None = None
    principal: str | None = None

    def _partition(self) -> int:
        return self.partition_id

    def _header(self) -> dict[str, Any]:
        header: dict[str, Any] = {"origin_shard": self.origin_shard}
        if self.client is not None:
            header["client"] = self.client
        if self.principal is not None:
            header["principal"] = self.principal
        return header

    def _payload(self) -> list[Buffer]:
        return [self.frame]

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(
            frame.partition_id,
            f.uint(h, "origin_shard", f.U16),
            frame.payload,
            f.opt_uint(h, "client"),
            f.opt_string(h, "principal"),
        )


@dataclass(frozen=True, slots=True)
class MetadataTailRequest(Message):
    """Internal: shard `shard_id` has applied the metadata log below `index` and
    asks the metadata owner for the entries from there, waiting up to
    `max_wait_ms` at the end of the log. Accepted only on the inter-shard channel.

    Header: {index, max_wait_ms, shard_id}.
    """

    OP: ClassVar[int] = Op.METADATA_TAIL

    index: int
    shard_id: int
    max_wait_ms: int = 0

    def _header(self) -> dict[str, Any]:
        return {"index": self.index, "max_wait_ms": self.max_wait_ms, "shard_id": self.shard_id}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(
            f.uint(h, "index"), f.uint(h, "shard_id", f.U16), f.uint(h, "max_wait_ms", f.U32)
        )


# --- responses --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProduceResponse(Message):
    """The records are durable (per the node's flush policy) at indexes
    `first_index .. first_index + count - 1`, appended at `timestamp_ms`.

    Header: {first_index, count, timestamp_ms}.
    """

    OP: ClassVar[int] = Op.PRODUCE
    FLAGS: ClassVar[int] = _RESPONSE

    partition_id: int
    first_index: int
    count: int
    timestamp_ms: int

    def _partition(self) -> int:
        return self.partition_id

    def _header(self) -> dict[str, Any]:
        return {
            "first_index": self.first_index,
            "count": self.count,
            "timestamp_ms": self.timestamp_ms,
        }

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(
            frame.partition_id,
            f.uint(h, "first_index"),
            f.uint(h, "count", f.U32),
            f.uint(h, "timestamp_ms"),
        )


@dataclass(frozen=True, slots=True)
class FetchResponse(Message):
    """Records from the requested index on (possibly none), with the partition's
    range at the time of the read and `next_index`, where the next fetch starts.
    Indexes may have gaps (a replicated partition's log also holds Raft's own
    entries, which reads skip), so `next_index` is the one way forward: after
    the last record, past any such entries that follow it; for an answer
    without records, the requested index or past the entries there.

    Header: {lowest_index, highest_index, next_index}. Payload: a fetch batch.
    """

    OP: ClassVar[int] = Op.FETCH
    FLAGS: ClassVar[int] = _RESPONSE
    PAYLOAD: ClassVar[bool] = True

    partition_id: int
    records: tuple[FetchedRecord, ...]
    lowest_index: int
    highest_index: int
    next_index: int

    def _partition(self) -> int:
        return self.partition_id

    def _header(self) -> dict[str, Any]:
        return {
            "lowest_index": self.lowest_index,
            "highest_index": self.highest_index,
            "next_index": self.next_index,
        }

    def _payload(self) -> list[Buffer]:
        return encode_fetch_batch(self.records)

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(
            frame.partition_id,
            decode_fetch_batch(frame.payload),
            f.uint(h, "lowest_index"),
            f.uint(h, "highest_index"),
            f.uint(h, "next_index"),
        )


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse(Message):
    """A partition's range: `lowest_index` (first retained), `highest_index`
    (exclusive), `committed_index` (exclusive: every index below it is
    committed; equal to `highest_index` on a single node), and
    `timestamp_index`, the first index appended at or after the requested time
    (`highest_index` if none; None when no time was asked for), and the node id
    of the partition's `leader` as this replica knows it (None: unknown, or a
    single node). A replica of a Raft group also names the group's `voters`
    and `learners` as it applied them (empty on a single node): a group's
    real members, which moves make differ from placement's. `records` (when
    `count_from` was asked) is how many records lie in [count_from,
    committed_index), Raft's own entries not counted.

    Header: {lowest_index, highest_index, committed_index, timestamp_index?, leader?,
    voters?, learners?, records?}.
    """

    OP: ClassVar[int] = Op.LIST_OFFSETS
    FLAGS: ClassVar[int] = _RESPONSE

    partition_id: int
    lowest_index: int
    highest_index: int
    committed_index: int
    timestamp_index: int | None = None
    leader: str | None = None
    voters: tuple[str, ...] = ()
    learners: tuple[str, ...] = ()
    records: int | None = None

    def _partition(self) -> int:
        return self.partition_id

    def _header(self) -> dict[str, Any]:
        h: dict[str, Any] = {
            "lowest_index": self.lowest_index,
            "highest_index": self.highest_index,
            "committed_index": self.committed_index,
        }
        if self.timestamp_index is not None:
            h["timestamp_index"] = self.timestamp_index
        if self.leader is not None:
            h["leader"] = self.leader
        if self.voters:
            h["voters"] = list(self.voters)
        if self.learners:
            h["learners"] = list(self.learners)
        if self.records is not None:
            h["records"] = self.records
        return h

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(
            frame.partition_id,
            f.uint(h, "lowest_index"),
            f.uint(h, "highest_index"),
            f.uint(h, "committed_index"),
            f.opt_uint(h, "timestamp_index"),
            f.opt_string(h, "leader"),
            f.strings(h, "voters"),
            f.strings(h, "learners"),
            f.opt_uint(h, "records"),
        )


@dataclass(frozen=True, slots=True)
class MetadataResponse(Message):
    """The node as a client needs it for routing: its id and node port, its
    shards in shard id order (ids 0..N-1, so `shard_for(pid, len(shards))`
    names an index into `shards`), its topics, its routing mode ("ebpf",
    "cbpf" or "userspace"), and the port of its admin HTTP endpoint (None when
    it has none).

    Header: {node_id, host, port, routing_mode, shards: [{shard_id, host, port}],
    topics: [{name, topic_id, partitions, config?}], admin_port?, nodes?}.

    `nodes` lists every node of a cluster (this one included) with its shard
    ports, so a client routes to any of them; it is empty for a single node.
    A partition's replicas are computable from it (`laminar.placement.replica_nodes`
    over the nodes' weights). `leaders` are (partition id, node id) pairs: the
    current leader of each partition whose Raft group the answering shard
    hosts, as that replica knows it (a leader it has not heard of yet is
    missing; clients learn the others from NOT_LEADER answers). Header key
    `leaders`: [[pid, node_id], ...], absent when empty (older nodes).
    `max_frame_bytes` is the largest request frame the node accepts (its
    `--max-frame-bytes`), so a client can size its produce batches under it;
    absent from older nodes.
    `decommissioned`: nodes the cluster decided leave for good (they hold
    replicas until those have moved, but placement names them for none);
    absent when empty.
    """

    OP: ClassVar[int] = Op.METADATA
    FLAGS: ClassVar[int] = _RESPONSE

    node_id: str
    host: str
    port: int
    routing_mode: str
    shards: tuple[ShardInfo, ...]
    topics: tuple[TopicInfo, ...]
    admin_port: int | None = None
    nodes: tuple[NodeInfo, ...] = ()
    leaders: tuple[tuple[int, str], ...] = ()
    max_frame_bytes: int | None = None
    decommissioned: tuple[str, ...] = ()

    def _header(self) -> dict[str, Any]:
        h: dict[str, Any] = {
            "node_id": self.node_id,
            "host": self.host,
            "port": self.port,
            "routing_mode": self.routing_mode,
            "shards": [s.to_wire() for s in self.shards],
            "topics": [t.to_wire() for t in self.topics],
            "admin_port": self.admin_port,
        }
        if self.nodes:
            h["nodes"] = [n.to_wire() for n in self.nodes]
        if self.leaders:
            h["leaders"] = [list(pair) for pair in self.leaders]
        if self.max_frame_bytes is not None:
            h["max_frame_bytes"] = self.max_frame_bytes
        if self.decommissioned:
            h["decommissioned"] = list(self.decommissioned)
        return h

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(
            f.string(h, "node_id"),
            f.string(h, "host"),
            f.uint(h, "port", f.U16),
            f.string(h, "routing_mode"),
            f.items(h, "shards", ShardInfo.from_wire),
            f.items(h, "topics", TopicInfo.from_wire),
            f.opt_uint(h, "admin_port", f.U16),
            f.items(h, "nodes", NodeInfo.from_wire) if "nodes" in h else (),
            _leaders(h.get("leaders", [])),
            f.opt_uint(h, "max_frame_bytes"),
            f.strings(h, "decommissioned"),
        )


def _leaders(raw: object) -> tuple[tuple[int, str], ...]:
    """The `leaders` of a metadata answer: [[pid, node_id], ...]."""
    if type(raw) is not list or not all(
        type(pair) is list
        and len(pair) == 2
        and type(pair[0]) is int
        and 0 <= pair[0] < f.U64
        and type(pair[1]) is str
        for pair in raw
    ):
        raise InvalidMessage("leaders must be a list of [partition id, node id] pairs")
    return tuple((pid, node) for pid, node in raw)


@dataclass(frozen=True, slots=True)
class CreateTopicResponse(Message):
    """The topic as created. Header: {topic: {name, topic_id, partitions, config?}}."""

    OP: ClassVar[int] = Op.CREATE_TOPIC
    FLAGS: ClassVar[int] = _RESPONSE

    topic: TopicInfo

    def _header(self) -> dict[str, Any]:
        return {"topic": self.topic.to_wire()}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        return cls(TopicInfo.from_wire(f.mapping(frame.header.get("topic"), "'topic'")))


@dataclass(frozen=True, slots=True)
class DeleteTopicResponse(Message):
    """The topic is gone. Header: {name, topic_id}."""

    OP: ClassVar[int] = Op.DELETE_TOPIC
    FLAGS: ClassVar[int] = _RESPONSE

    name: str
    topic_id: int

    def _header(self) -> dict[str, Any]:
        return {"name": self.name, "topic_id": self.topic_id}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(f.string(h, "name"), f.uint(h, "topic_id", f.U32))


@dataclass(frozen=True, slots=True)
class AlterTopicResponse(Message):
    """The topic with its new config. Header: {topic: {name, topic_id, partitions, config?}}."""

    OP: ClassVar[int] = Op.ALTER_TOPIC
    FLAGS: ClassVar[int] = _RESPONSE

    topic: TopicInfo

    def _header(self) -> dict[str, Any]:
        return {"topic": self.topic.to_wire()}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        return cls(TopicInfo.from_wire(f.mapping(frame.header.get("topic"), "'topic'")))


@dataclass(frozen=True, slots=True)
class DecommissionNodeResponse(Message):
    """Every node decommissioned now. Header: {decommissioned: [node_id, ...]}."""

    OP: ClassVar[int] = Op.DECOMMISSION_NODE
    FLAGS: ClassVar[int] = _RESPONSE

    decommissioned: tuple[str, ...]

    def _header(self) -> dict[str, Any]:
        return {"decommissioned": list(self.decommissioned)}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        return cls(f.strings(frame.header, "decommissioned"))


@dataclass(frozen=True, slots=True)
class ListTopicsResponse(Message):
    """Every topic. Header: {topics: [{name, topic_id, partitions, config?}]}."""

    OP: ClassVar[int] = Op.LIST_TOPICS
    FLAGS: ClassVar[int] = _RESPONSE

    topics: tuple[TopicInfo, ...]

    def _header(self) -> dict[str, Any]:
        return {"topics": [t.to_wire() for t in self.topics]}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        return cls(f.items(frame.header, "topics", TopicInfo.from_wire))


@dataclass(frozen=True, slots=True)
class Pong(Message):
    """The answer to `Ping`: which node and shard served it (`shard_id`), and which
    shard's socket received it (`received_by`; different when it was forwarded).

    Header: {node_id, shard_id, received_by}.
    """

    OP: ClassVar[int] = Op.PING
    FLAGS: ClassVar[int] = _RESPONSE

    partition_id: int
    node_id: str
    shard_id: int
    received_by: int

    def _partition(self) -> int:
        return self.partition_id

    def _header(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "shard_id": self.shard_id, "received_by": self.received_by}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(
            frame.partition_id,
            f.string(h, "node_id"),
            f.uint(h, "shard_id", f.U16),
            f.uint(h, "received_by", f.U16),
        )


@dataclass(frozen=True, slots=True)
class ForwardResponse(Message):
    """Internal: the owner's response frame to a `ForwardRequest`, byte for byte.

    Header: {}. Payload: the response frame.
    """

    OP: ClassVar[int] = Op.FORWARD
    FLAGS: ClassVar[int] = _RESPONSE
    PAYLOAD: ClassVar[bool] = True

    partition_id: int
    frame: bytes

    def _partition(self) -> int:
        return self.partition_id

    def _payload(self) -> list[Buffer]:
        return [self.frame]

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        return cls(frame.partition_id, frame.payload)


@dataclass(frozen=True, slots=True)
class MetadataTailResponse(FetchResponse):
    """Internal: metadata log entries from the requested index on (or from the
    owner's lowest index, a snapshot, when the log was compacted past it), laid
    out like a `FetchResponse`; `partition_id` is the metadata partition's (0)."""

    OP: ClassVar[int] = Op.METADATA_TAIL


@dataclass(frozen=True, slots=True)
class ErrorResponse(Message):
    """The request failed. Sent with the request's op (`op`, any value, even an
    unknown one), flags RESPONSE | ERROR, and the request's partition id. A code
    from a newer peer that this side does not know reads as INTERNAL.
    NOT_LEADER names the `leader` when the node knows it (a node id from the
    metadata's `nodes`).

    Header: {code, message, leader?}.
    """

    FLAGS: ClassVar[int] = _ERROR_RESPONSE

    op: int
    code: ErrorCode
    message: str
    partition_id: int = 0
    leader: str | None = None

    @classmethod
    def from_error(cls, exc: ProtocolError) -> ErrorResponse:
        """The answer to a request that raised `exc` while being decoded."""
        return cls(exc.op or 0, exc.code, exc.message, exc.partition_id or 0)

    @classmethod
    def for_code(
        cls, op: int, code: ErrorCode, message: str | None = None, partition_id: int = 0
    ) -> ErrorResponse:
        """An error response with the code's default message unless one is given."""
        return cls(op, code, message or code.default_message, partition_id)

    def _op(self) -> int:
        return self.op

    def _partition(self) -> int:
        return self.partition_id

    def _header(self) -> dict[str, Any]:
        h: dict[str, Any] = {"code": int(self.code), "message": self.message}
        if self.leader is not None:
            h["leader"] = self.leader
        return h

    @classmethod
    def from_frame(cls, frame: Frame) -> ErrorResponse:
        if frame.flags & _KIND_MASK != _ERROR_RESPONSE:
            raise _context(InvalidMessage("frame is not an error response"), frame)
        try:
            return cls._decode(frame)
        except ProtocolError as exc:
            raise _context(exc, frame) from None

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(
            frame.op,
            error_code(f.uint(h, "code", f.U16)),
            f.string(h, "message"),
            frame.partition_id,
            f.opt_string(h, "leader"),
        )


# --- dispatch ---------------------------------------------------------------------

Request = (
    ProduceRequest
    | FetchRequest
    | ListOffsetsRequest
    | MetadataRequest
    | CreateTopicRequest
    | DeleteTopicRequest
    | ListTopicsRequest
    | Ping
    | AlterTopicRequest
    | DecommissionNodeRequest
    | ForwardRequest
    | MetadataTailRequest
)
Response = (
    ProduceResponse
    | FetchResponse
    | ListOffsetsResponse
    | MetadataResponse
    | CreateTopicResponse
    | DeleteTopicResponse
    | ListTopicsResponse
    | Pong
    | AlterTopicResponse
    | DecommissionNodeResponse
    | ForwardResponse
    | MetadataTailResponse
    | ErrorResponse
)

REQUEST_TYPES: dict[int, type[Request]] = {
    cls.OP: cls
    for cls in (
        ProduceRequest,
        FetchRequest,
        ListOffsetsRequest,
        MetadataRequest,
        CreateTopicRequest,
        DeleteTopicRequest,
        ListTopicsRequest,
        Ping,
        AlterTopicRequest,
        DecommissionNodeRequest,
        ForwardRequest,
        MetadataTailRequest,
    )
}
RESPONSE_TYPES: dict[int, type[Response]] = {
    cls.OP: cls
    for cls in (
        ProduceResponse,
        FetchResponse,
        ListOffsetsResponse,
        MetadataResponse,
        CreateTopicResponse,
        DeleteTopicResponse,
        ListTopicsResponse,
        Pong,
        AlterTopicResponse,
        DecommissionNodeResponse,
        ForwardResponse,
        MetadataTailResponse,
    )
}


def request_frame_limits(max_frame_bytes: int, header_bytes: int) -> list[int]:
    """Per-op frame limits for a `FrameDecoder` that reads requests: `max_frame_bytes`
    for ops whose requests carry a payload (and for unknown ops, answered
    UNKNOWN_OP), room for the prefix and a header of `header_bytes` for the rest,
    so a payload nobody reads is refused before it is buffered."""
    limits = [max_frame_bytes] * 256
    header_only = min(max_frame_bytes, HEADER_OFFSET + header_bytes)
    for op, cls in REQUEST_TYPES.items():
        if not cls.PAYLOAD:
            limits[op] = header_only
    return limits


def decode_request(frame: Frame) -> Request:
    """The request a frame carries. Raises `UnknownOp` for an op without a request
    type (Raft and membership ops are decoded by their own layers) and
    `InvalidMessage` for a response frame or bad fields; both are not fatal."""
    if frame.flags & _KIND_MASK:
        raise _context(InvalidMessage("expected a request, got a response frame"), frame)
    cls = REQUEST_TYPES.get(frame.op)
    if cls is None:
        raise _context(UnknownOp(f"unknown request op {frame.op}"), frame)
    return cls.from_frame(frame)


def decode_response(frame: Frame) -> Response:
    """The response a frame carries; an ERROR frame is an `ErrorResponse` whatever
    its op."""
    kind = frame.flags & _KIND_MASK
    if kind == _ERROR_RESPONSE:
        return ErrorResponse.from_frame(frame)
    if kind != _RESPONSE:
        raise _context(InvalidMessage("expected a response, got a request frame"), frame)
    cls = RESPONSE_TYPES.get(frame.op)
    if cls is None:
        raise _context(UnknownOp(f"unknown response op {frame.op}"), frame)
    return cls.from_frame(frame)
