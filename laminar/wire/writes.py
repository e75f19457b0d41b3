"""Messages of the atomic write protocol: stage, commit, abort, status (ops 9-15).

The protocol (`laminar.writes` has the rules and the reasons):

- A writer's task *attempt* stages batches on the shard that owns each target
  partition (`StageRequest`, op 9): durable, invisible to readers, keyed by
  `(write_id, task, attempt)` and numbered per partition 0, 1, 2, ... so a
  resent batch is recognised. On a cluster the answer names the node that
  staged it, and the attempt's later batches of that partition go there too.
- The committer names the winning attempts and what each staged where
  (`StagedPart`, with the node holding it) in one `CommitWriteRequest` (op 10)
  under a `commit_id`, sent to the *coordinator*: the shard owning
  `coordinator_pid(commit_id)` on one node, the leader of the decisions group
  (`DECISIONS_PID`) on a cluster. It checks every part where it is staged
  (`CheckStagedRequest`, op 13), writes one durable decision, then publishes
  each partition (`PublishStagedRequest`, op 14: one append per chunk, stamped
  with `WriteStamp`, so a publish sent again is recognised; a staging node
  that does not lead the partition appends through its leader,
  `AppendStagedRequest`, op 17) and finally drops the staged data
  (`DropStagedRequest`, op 15). Ops 13-15 and 17 are internal: a shard
  refuses them from a client; between nodes they travel only over
  authenticated peer sessions.
- `AbortWriteRequest` (op 11) decides "aborted" for good (`final`) or only
  drops the named parts; `WriteStatusRequest` (op 12) reads the decision.

Everything here is sans-IO and shared by client and server.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, ClassVar, Final, NamedTuple, Self

from laminar.placement import partition_id
from laminar.wire import fields as f
from laminar.wire.codec import Buffer, Frame
from laminar.wire.errors import InvalidMessage, WireUsageError
from laminar.wire.messages import REQUEST_TYPES, RESPONSE_TYPES, Message
from laminar.wire.ops import Flags, Op
from laminar.wire.records import decode_produce_batch, encode_produce_batch

WRITE_HEADER: Final = "laminar.write"
"""The header a publish puts on the first record of each appended chunk: a
`WriteStamp`. The name is reserved, like `laminar.producer`."""

COORDINATOR_BUCKETS: Final = 16
"""Commit ids are spread over this many coordinator buckets, each owned by the
shard that owns its reserved partition id (`coordinator_pid`)."""
_COORDINATOR_IDX_BASE: Final = 0x1_0000


def coordinator_bucket(commit_id: int) -> int:
    """The bucket that decides `commit_id`."""
    return commit_id % COORDINATOR_BUCKETS


def coordinator_pid(commit_id: int) -> int:
    """The reserved partition id (topic 0) that routes a commit, abort or status
    request to the coordinator of `commit_id`: the shard that owns it decides."""
    return bucket_pid(coordinator_bucket(commit_id))


def bucket_pid(bucket: int) -> int:
    return partition_id(0, _COORDINATOR_IDX_BASE + bucket)


def bucket_of_pid(pid: int) -> int | None:
    """The coordinator bucket a partition id names, or None."""
    if pid >> 32 != 0:
        return None
    bucket = (pid & 0xFFFF_FFFF) - _COORDINATOR_IDX_BASE
    return bucket if 0 <= bucket < COORDINATOR_BUCKETS else None


DECISIONS_PID: Final = partition_id(0, _COORDINATOR_IDX_BASE + COORDINATOR_BUCKETS)
"""On a cluster one Raft group, on this reserved partition id, decides every
commit id whatever its bucket: its leader's shard is the coordinator (a node
serves commit, abort and status requests on the shard owning this id)."""
DECISION_REPLICAS: Final = 3
"""The decisions group's replicas (all the nodes when there are fewer)."""


def coordinated_by_decisions(pid: int) -> bool:
    """Whether a cluster's decisions group answers for partition id `pid` (a
    coordinator bucket's, or the group's own)."""
    return pid == DECISIONS_PID or bucket_of_pid(pid) is not None


_STAMP = struct.Struct(">QII")
SLOTS_MAX: Final = 1 << 8
CHUNKS_MAX: Final = 1 << 24
"""A stamp's chunk field holds the slot in its top 8 bits and the chunk below."""


class WriteStamp(NamedTuple):
    """Chunk `chunk` of `chunks` that publishing `commit_id` appended to a
    partition; on the first record of the chunk. `slot` tells apart the parts
    of one partition staged on different nodes (published one node after the
    other, each with its own chunks); 0 when one node staged them all."""

    commit_id: int
    chunk: int
    chunks: int
    slot: int = 0

    def encode(self) -> bytes:
        if not (0 <= self.slot < SLOTS_MAX and 0 <= self.chunk < CHUNKS_MAX):
            raise WireUsageError(f"a write stamp's slot or chunk is out of range: {self}")
        return _STAMP.pack(self.commit_id, self.slot << 24 | self.chunk, self.chunks)

    @classmethod
    def decode(cls, value: bytes) -> WriteStamp | None:
        """The stamp, or None when `value` is not one (a user's own header)."""
        if len(value) != _STAMP.size:
            return None
        commit_id, chunk, chunks = _STAMP.unpack(value)
        return cls(commit_id, chunk & (CHUNKS_MAX - 1), chunks, chunk >> 24)


NODE_BYTES_MAX: Final = 255


class StagedPart(NamedTuple):
    """What one task attempt staged on one partition: `batches` batches
    (sequences 0..batches-1) holding `records` records, on node `node` (the
    node whose answer to the attempt's first batch named it; "" for the node
    the commit reaches, as before clusters)."""

    partition_id: int
    write_id: int
    task: int
    attempt: int
    batches: int
    records: int
    node: str = ""

    def to_wire(self) -> list[int | str]:
        return list(self)

    @classmethod
    def from_wire(cls, item: object) -> StagedPart:
        """A part from a decision or claim entry (six fields without the node)."""
        if (
            type(item) is not list
            or len(item) not in (6, 7)
            or not all(type(v) is int and 0 <= v < f.U64 for v in item[:6])
            or (len(item) == 7 and not _node_ok(item[6]))
        ):
            raise InvalidMessage(
                "a staged part is [partition_id, write_id, task, attempt, batches, records, node]"
            )
        part = cls(*item)
        if part.task >= f.U32 or part.batches >= f.U32:
            raise InvalidMessage("a staged part's task and batches are u32")
        return part


def _node_ok(node: object) -> bool:
    return type(node) is str and len(node.encode()) <= NODE_BYTES_MAX


_PART = struct.Struct(">QQIQIQB")
"""partition_id, write_id, task, attempt, batches, records, the node id's length."""


def _parts_payload(parts: tuple[StagedPart, ...]) -> list[Buffer]:
    """Parts travel in the payload, 41 bytes each plus the node id: a commit may
    name thousands, more than a request header may hold
    (`laminar.wire.codec.REQUEST_HEADER_LIMITS`)."""
    out = bytearray()
    for p in parts:
        node = p.node.encode()
        try:
            out += _PART.pack(*p[:6], len(node)) + node
        except struct.error as exc:
            raise WireUsageError(f"a staged part does not fit its fields: {exc}") from None
    return [bytes(out)]


def _parts(payload: bytes) -> tuple[StagedPart, ...]:
    parts = []
    pos = 0
    while pos < len(payload):
        if pos + _PART.size > len(payload):
            raise InvalidMessage(f"a payload of staged parts ends inside a part at byte {pos}")
        *fields, node_len = _PART.unpack_from(payload, pos)
        pos += _PART.size
        node = payload[pos : pos + node_len]
        pos += node_len
        if len(node) != node_len:
            raise InvalidMessage("a payload of staged parts ends inside a node id")
        try:
            parts.append(StagedPart._make([*fields, node.decode()]))
        except UnicodeDecodeError:
            raise InvalidMessage("a staged part's node id is not UTF-8") from None
    return tuple(parts)


class Published(NamedTuple):
    """Where a commit's records landed in one partition: `records` records from
    `first_index` on (several appends, possibly with others' records between
    them, when the share was larger than the node's publish append size)."""

    partition_id: int
    first_index: int
    records: int

    @classmethod
    def from_wire(cls, item: object) -> Published:
        if (
            type(item) is not list
            or len(item) != 3
            or not all(type(v) is int and 0 <= v < f.U64 for v in item)
        ):
            raise InvalidMessage("a published entry is [partition_id, first_index, records]")
        return cls(*item)


def _published(h: dict[str, Any]) -> tuple[Published, ...]:
    raw = h.get("published")
    if type(raw) is not list:
        raise InvalidMessage("header field 'published' must be a list")
    return tuple(Published.from_wire(item) for item in raw)


class WriteState:
    """A commit id's decision, as `WriteStatusResponse.state` names it."""

    UNKNOWN: Final = "unknown"
    """No decision (none was made, or it is older than the node remembers)."""
    COMMITTED: Final = "committed"
    """Decided; publishing is under way (or will be rolled forward)."""
    DONE: Final = "done"
    """Committed and published in every partition."""
    ABORTED: Final = "aborted"
    """Aborted for good: a commit with this id is refused."""
    ALL: Final = frozenset({UNKNOWN, COMMITTED, DONE, ABORTED})


def _state(h: dict[str, Any]) -> str:
    state = f.string(h, "state")
    if state not in WriteState.ALL:
        raise InvalidMessage(f"unknown write state {state!r}")
    return state


# --- requests ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StageRequest(Message):
    """Stage a batch of records for a task attempt: durable when answered, never
    visible until a commit publishes it. `sequence` numbers the attempt's
    batches on this partition from 0; a batch sent again with a sequence already
    staged is answered without staging it twice. `timeout_ms` (0: the node's
    default) is how long the staged data may stay idle before it expires.

    Header: {write_id, task, attempt, sequence, timeout_ms}. Payload: a produce batch.
    """

    OP: ClassVar[int] = Op.STAGE
    PAYLOAD: ClassVar[bool] = True

    partition_id: int
    write_id: int
    task: int
    attempt: int
    sequence: int
    blobs: tuple[bytes, ...]
    timeout_ms: int = 0

    def _partition(self) -> int:
        return self.partition_id

    def _header(self) -> dict[str, Any]:
        return {
            "write_id": self.write_id,
            "task": self.task,
            "attempt": self.attempt,
            "sequence": self.sequence,
            "timeout_ms": self.timeout_ms,
        }

    def _payload(self) -> list[Buffer]:
        return encode_produce_batch(self.blobs)

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(
            frame.partition_id,
            f.uint(h, "write_id"),
            f.uint(h, "task", f.U32),
            f.uint(h, "attempt"),
            f.uint(h, "sequence", f.U32),
            decode_produce_batch(frame.payload),
            f.uint(h, "timeout_ms", f.U32),
        )


@dataclass(frozen=True, slots=True)
class CommitWriteRequest(Message):
    """Commit `commit_id` with exactly the staged `parts` (the winning attempts),
    atomically: all of them are published, once, or none. Sent to
    `coordinator_pid(commit_id)`. A commit id already committed is answered
    with its first outcome and publishes nothing (the parts named now are
    dropped); an aborted one is refused.

    Header: {commit_id}. Payload: the parts, each (partition_id u64, write_id u64,
    task u32, attempt u64, batches u32, records u64), big-endian.
    """

    OP: ClassVar[int] = Op.COMMIT_WRITE
    PAYLOAD: ClassVar[bool] = True

    commit_id: int
    parts: tuple[StagedPart, ...]

    def _partition(self) -> int:
        return coordinator_pid(self.commit_id)

    def _header(self) -> dict[str, Any]:
        return {"commit_id": self.commit_id}

    def _payload(self) -> list[Buffer]:
        return _parts_payload(self.parts)

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        msg = cls(f.uint(frame.header, "commit_id"), _parts(frame.payload))
        _check_coordinator(frame, msg.commit_id)
        return msg


@dataclass(frozen=True, slots=True)
class AbortWriteRequest(Message):
    """Abort `commit_id`. With `final`, the coordinator decides "aborted" for good
    (unless it is committed already); without, nothing is decided and only the
    named `parts` are dropped (a streaming micro-batch that may run again under
    the same id). Staged data not named here expires.

    Header: {commit_id, final}. Payload: parts, as for a commit.
    """

    OP: ClassVar[int] = Op.ABORT_WRITE
    PAYLOAD: ClassVar[bool] = True

    commit_id: int
    final: bool = True
    parts: tuple[StagedPart, ...] = ()

    def _partition(self) -> int:
        return coordinator_pid(self.commit_id)

    def _header(self) -> dict[str, Any]:
        return {"commit_id": self.commit_id, "final": self.final}

    def _payload(self) -> list[Buffer]:
        return _parts_payload(self.parts)

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        final = h.get("final")
        if type(final) is not bool:
            raise InvalidMessage("header field 'final' must be a bool")
        msg = cls(f.uint(h, "commit_id"), final, _parts(frame.payload))
        _check_coordinator(frame, msg.commit_id)
        return msg


@dataclass(frozen=True, slots=True)
class WriteStatusRequest(Message):
    """Ask the coordinator what it decided for `commit_id`. Header: {commit_id}."""

    OP: ClassVar[int] = Op.WRITE_STATUS

    commit_id: int

    def _partition(self) -> int:
        return coordinator_pid(self.commit_id)

    def _header(self) -> dict[str, Any]:
        return {"commit_id": self.commit_id}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        msg = cls(f.uint(frame.header, "commit_id"))
        _check_coordinator(frame, msg.commit_id)
        return msg


def _check_coordinator(frame: Frame, commit_id: int) -> None:
    if frame.partition_id != coordinator_pid(commit_id):
        raise InvalidMessage(
            f"a request about commit {commit_id:#x} must be sent with partition id "
            f"{coordinator_pid(commit_id):#x} (its coordinator), not {frame.partition_id:#x}"
        )


@dataclass(frozen=True, slots=True)
class _PartitionParts(Message):
    """Internal: a coordinator's request about one partition's parts of a commit.

    Header: {commit_id}. Payload: parts, as for a commit."""

    PAYLOAD: ClassVar[bool] = True

    partition_id: int
    commit_id: int
    parts: tuple[StagedPart, ...]

    def __post_init__(self) -> None:
        if any(p.partition_id != self.partition_id for p in self.parts):
            raise WireUsageError("every part must be of the request's partition")

    def _partition(self) -> int:
        return self.partition_id

    def _header(self) -> dict[str, Any]:
        return {"commit_id": self.commit_id}

    def _payload(self) -> list[Buffer]:
        return _parts_payload(self.parts)

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        parts = _parts(frame.payload)
        if any(p.partition_id != frame.partition_id for p in parts):
            raise InvalidMessage("every part must be of the request's partition")
        h = frame.header
        return cls(frame.partition_id, f.uint(h, "commit_id"), parts, *cls._more(h))

    @classmethod
    def _more(cls, h: dict[str, Any]) -> tuple[Any, ...]:
        """The fields a subclass adds, from the header."""
        return ()


@dataclass(frozen=True, slots=True)
class _OwnedParts(_PartitionParts):
    """Internal: a request about parts on behalf of the commit's owner
    (`principal`, None on a node without logins): only attempts that principal
    staged are claimed or dropped.

    Header: {commit_id, principal?}. Payload: parts, as for a commit."""

    principal: str | None = None

    def _header(self) -> dict[str, Any]:
        header: dict[str, Any] = {"commit_id": self.commit_id}
        if self.principal is not None:
            header["principal"] = self.principal
        return header

    @classmethod
    def _more(cls, h: dict[str, Any]) -> tuple[Any, ...]:
        return (f.opt_string(h, "principal"),)


@dataclass(frozen=True, slots=True)
class CheckStagedRequest(_OwnedParts):
    """Internal (op 13): is every named part staged in full on this partition,
    by `principal`? If so the partition records, durably, that `commit_id`
    claims them (so expiry asks the coordinator before dropping them)."""

    OP: ClassVar[int] = Op.CHECK_STAGED


@dataclass(frozen=True, slots=True)
class PublishStagedRequest(_PartitionParts):
    """Internal (op 14): append the named parts' records to the partition, in the
    order named, once per `commit_id` however often this is sent. `slot`: which
    of the nodes holding parts of this partition this is (`WriteStamp.slot`).

    Header: {commit_id, slot}. Payload: parts, as for a commit."""

    OP: ClassVar[int] = Op.PUBLISH_STAGED

    slot: int = 0

    def _header(self) -> dict[str, Any]:
        return {"commit_id": self.commit_id, "slot": self.slot}

    @classmethod
    def _more(cls, h: dict[str, Any]) -> tuple[Any, ...]:
        return (f.uint(h, "slot", SLOTS_MAX),)


@dataclass(frozen=True, slots=True)
class AppendStagedRequest(Message):
    """Internal (op 17), to the partition's leader: append one chunk of a
    publish (`blobs`, the first stamped with `WriteStamp(commit_id, chunk,
    chunks, slot)`), sent by the node holding the staged data when it does not
    lead the partition. With `scan_from` (a publish resumed after its outcome
    was unknown) the leader first settles its log and looks for the chunk's
    stamp at or after that index, and appends only if it is not there.

    Header: {commit_id, slot, chunk, chunks, scan_from}. Payload: a produce batch."""

    OP: ClassVar[int] = Op.APPEND_STAGED
    PAYLOAD: ClassVar[bool] = True

    partition_id: int
    commit_id: int
    slot: int
    chunk: int
    chunks: int
    scan_from: int | None
    blobs: tuple[bytes, ...]

    @property
    def stamp(self) -> WriteStamp:
        return WriteStamp(self.commit_id, self.chunk, self.chunks, self.slot)

    def _partition(self) -> int:
        return self.partition_id

    def _header(self) -> dict[str, Any]:
        return {
            "commit_id": self.commit_id,
            "slot": self.slot,
            "chunk": self.chunk,
            "chunks": self.chunks,
            "scan_from": self.scan_from,
        }

    def _payload(self) -> list[Buffer]:
        return encode_produce_batch(self.blobs)

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(
            frame.partition_id,
            f.uint(h, "commit_id"),
            f.uint(h, "slot", SLOTS_MAX),
            f.uint(h, "chunk", CHUNKS_MAX),
            f.uint(h, "chunks", f.U32),
            f.opt_uint(h, "scan_from"),
            decode_produce_batch(frame.payload),
        )


@dataclass(frozen=True, slots=True)
class DropStagedRequest(_OwnedParts):
    """Internal (op 15): forget `commit_id` on this partition and drop the named
    parts' staged data, and any other attempt of their writes that no commit
    claims (a finished or aborted commit's losers), of those `principal` staged."""

    OP: ClassVar[int] = Op.DROP_STAGED


# --- responses --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StageResponse(Message):
    """The batch is staged durably on node `node` (`duplicate`: it had been
    before). The attempt's later batches of this partition go to that node.

    Header: {sequence, count, duplicate, node}."""

    OP: ClassVar[int] = Op.STAGE
    FLAGS: ClassVar[int] = Flags.RESPONSE

    partition_id: int
    sequence: int
    count: int
    duplicate: bool = False
    node: str = ""

    def _partition(self) -> int:
        return self.partition_id

    def _header(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "count": self.count,
            "duplicate": self.duplicate,
            "node": self.node,
        }

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        node = f.opt_string(h, "node") or ""
        if not _node_ok(node):
            raise InvalidMessage(f"a node id is at most {NODE_BYTES_MAX} bytes")
        return cls(
            frame.partition_id,
            f.uint(h, "sequence", f.U32),
            f.uint(h, "count", f.U32),
            h.get("duplicate") is True,
            node,
        )


@dataclass(frozen=True, slots=True)
class CommitWriteResponse(Message):
    """The commit is decided and published: where its records are. `first` is
    False when the commit id had been committed before (by an earlier request):
    `published` is then that commit's outcome, and nothing was appended now.

    Header: {commit_id, first, published: [[partition_id, first_index, records]]}."""

    OP: ClassVar[int] = Op.COMMIT_WRITE
    FLAGS: ClassVar[int] = Flags.RESPONSE

    commit_id: int
    first: bool
    published: tuple[Published, ...]

    def _partition(self) -> int:
        return coordinator_pid(self.commit_id)

    def _header(self) -> dict[str, Any]:
        return {
            "commit_id": self.commit_id,
            "first": self.first,
            "published": [list(p) for p in self.published],
        }

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(f.uint(h, "commit_id"), h.get("first") is True, _published(h))


@dataclass(frozen=True, slots=True)
class WriteStateResponse(Message):
    """A commit id's decision (`WriteState`). The answer to an abort and to a
    status request. Header: {commit_id, state}."""

    OP: ClassVar[int] = Op.WRITE_STATUS
    FLAGS: ClassVar[int] = Flags.RESPONSE

    commit_id: int
    state: str

    def _partition(self) -> int:
        return coordinator_pid(self.commit_id)

    def _header(self) -> dict[str, Any]:
        return {"commit_id": self.commit_id, "state": self.state}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(f.uint(h, "commit_id"), _state(h))


@dataclass(frozen=True, slots=True)
class AbortWriteResponse(WriteStateResponse):
    """The decision after an abort: "aborted", or "committed"/"done" if the commit
    won, or "unknown" for an abort that was not `final`."""

    OP: ClassVar[int] = Op.ABORT_WRITE


@dataclass(frozen=True, slots=True)
class PartitionDoneResponse(Message):
    """Internal: the answer to a check, publish or drop on one partition: the
    records concerned and, for a publish, the index of the first.

    Header: {first_index, count}."""

    partition_id: int
    first_index: int
    count: int

    def _partition(self) -> int:
        return self.partition_id

    def _header(self) -> dict[str, Any]:
        return {"first_index": self.first_index, "count": self.count}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(frame.partition_id, f.uint(h, "first_index"), f.uint(h, "count"))


@dataclass(frozen=True, slots=True)
class CheckStagedResponse(PartitionDoneResponse):
    OP: ClassVar[int] = Op.CHECK_STAGED
    FLAGS: ClassVar[int] = Flags.RESPONSE


@dataclass(frozen=True, slots=True)
class PublishStagedResponse(PartitionDoneResponse):
    OP: ClassVar[int] = Op.PUBLISH_STAGED
    FLAGS: ClassVar[int] = Flags.RESPONSE


@dataclass(frozen=True, slots=True)
class DropStagedResponse(PartitionDoneResponse):
    OP: ClassVar[int] = Op.DROP_STAGED
    FLAGS: ClassVar[int] = Flags.RESPONSE


@dataclass(frozen=True, slots=True)
class AppendStagedResponse(Message):
    """Internal: where the chunk is (`found`: it was in the log already).

    Header: {first_index, found}."""

    OP: ClassVar[int] = Op.APPEND_STAGED
    FLAGS: ClassVar[int] = Flags.RESPONSE

    partition_id: int
    first_index: int
    found: bool

    def _partition(self) -> int:
        return self.partition_id

    def _header(self) -> dict[str, Any]:
        return {"first_index": self.first_index, "found": self.found}

    @classmethod
    def _decode(cls, frame: Frame) -> Self:
        h = frame.header
        return cls(frame.partition_id, f.uint(h, "first_index"), h.get("found") is True)


WRITE_REQUESTS: Final = (
    StageRequest,
    CommitWriteRequest,
    AbortWriteRequest,
    WriteStatusRequest,
    CheckStagedRequest,
    PublishStagedRequest,
    DropStagedRequest,
    AppendStagedRequest,
)
WRITE_RESPONSES: Final = (
    StageResponse,
    CommitWriteResponse,
    AbortWriteResponse,
    WriteStateResponse,
    CheckStagedResponse,
    PublishStagedResponse,
    DropStagedResponse,
    AppendStagedResponse,
)
REQUEST_TYPES.update({cls.OP: cls for cls in WRITE_REQUESTS})  # type: ignore[misc]
RESPONSE_TYPES.update({cls.OP: cls for cls in WRITE_RESPONSES})  # type: ignore[misc]
