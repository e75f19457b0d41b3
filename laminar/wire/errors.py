"""Error codes of the wire protocol and the exceptions the codec raises.

Every error a peer can see is an `ErrorCode` (sent as an integer) plus a human
message. On this side errors split the way h11 splits them:

- `ProtocolError`: the *peer* sent something the protocol does not allow. It
  carries the code to answer with and, when the frame got that far, the
  correlation id, op and partition id to answer to. `fatal` says whether the
  byte stream is still in step: after a fatal error (bad magic, wrong version,
  oversized or malformed frame) the connection must be closed, because the
  next frame boundary is unknown or untrustworthy; after a non-fatal one
  (unknown op, invalid fields) the frame was skipped whole and the connection
  can carry on.
- `WireUsageError`: *this* side asked for something the protocol cannot
  express (a correlation id over 32 bits, feeding a full receive buffer). It
  is a bug in the caller, never the peer's fault.
- `RequestError`: a well-formed request that *this* side cannot serve (no such
  topic, not the leader, ...): answered with its code, the connection goes on.
  Every server-side layer raises it (the shard's handlers, replicas, atomic
  writes), which is why it lives here, below all of them.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """What went wrong, as sent on the wire (msgpack int). Codes never change meaning.

    1-9: framing and protocol; 10-29: the request itself; 30-49: the server's
    state; 50-59: replication; 99: a bug on the server.
    """

    NONE = 0
    MALFORMED_FRAME = 1
    UNSUPPORTED_VERSION = 2
    UNKNOWN_OP = 3
    FRAME_TOO_LARGE = 4
    INVALID_REQUEST = 5
    UNKNOWN_TOPIC = 10
    UNKNOWN_PARTITION = 11
    TOPIC_EXISTS = 12
    OFFSET_OUT_OF_RANGE = 13
    RECORD_TOO_LARGE = 14
    CORRUPT_RECORD = 15
    USE_TCP = 16
    OUT_OF_ORDER_SEQUENCE = 17
    DUPLICATE_SEQUENCE = 18
    STAGING_FULL = 19
    WRITE_ABORTED = 20
    STAGED_DATA_MISSING = 21
    STAGE_OUT_OF_ORDER = 22
    WRITE_COMMITTED = 23
    STAGED_DATA_UNREACHABLE = 24
    NOT_OWNER = 30
    STORAGE_ERROR = 31
    SHUTTING_DOWN = 32
    TIMEOUT = 33
    COMMIT_PENDING = 34
    OUTCOME_UNKNOWN = 37
    NOT_READY = 38
    TOO_MANY_CONNECTIONS = 39
    AUTHENTICATION_FAILED = 40
    NOT_AUTHORIZED = 41
    USER_EXISTS = 42
    UNKNOWN_USER = 43
    LIMIT_REACHED = 44
    NOT_LEADER = 50
    NOT_ENOUGH_REPLICAS = 51
    INTERNAL = 99

    @property
    def default_message(self) -> str:
        """A message for when the sender has nothing more specific to say."""
        return _DEFAULT_MESSAGES[self]

    @property
    def retriable(self) -> bool:
        """True when the same request may succeed later (after a metadata refresh
        for NOT_OWNER); a client may retry an idempotent request on these."""
        return self in _RETRIABLE


_DEFAULT_MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.NONE: "no error",
    ErrorCode.MALFORMED_FRAME: "the frame could not be decoded; the connection is closed",
    ErrorCode.UNSUPPORTED_VERSION: "the frame's protocol version is not supported",
    ErrorCode.UNKNOWN_OP: "the op code is not known to this server",
    ErrorCode.FRAME_TOO_LARGE: "the frame is larger than the server accepts",
    ErrorCode.INVALID_REQUEST: "the request's fields are missing or invalid",
    ErrorCode.UNKNOWN_TOPIC: "no topic by that name or id exists",
    ErrorCode.UNKNOWN_PARTITION: "the topic has no partition with that index",
    ErrorCode.TOPIC_EXISTS: "a topic with that name already exists",
    ErrorCode.OFFSET_OUT_OF_RANGE: "the index is outside the partition's retained range",
    ErrorCode.RECORD_TOO_LARGE: "a record or batch is larger than the log accepts",
    ErrorCode.CORRUPT_RECORD: "a record's bytes do not follow the record encoding",
    ErrorCode.USE_TCP: "the request does not fit in a datagram; send it over TCP",
    ErrorCode.OUT_OF_ORDER_SEQUENCE: (
        "the idempotent batch does not continue its producer's sequence (a gap or an overlap)"
    ),
    ErrorCode.DUPLICATE_SEQUENCE: (
        "the idempotent batch was appended before; its index is no longer known"
    ),
    ErrorCode.STAGING_FULL: (
        "the shard's staging area is full; wait for staged writes to commit or expire"
    ),
    ErrorCode.WRITE_ABORTED: "the write was aborted; it cannot be committed",
    ErrorCode.STAGED_DATA_MISSING: (
        "the commit names staged data the node does not hold (expired, dropped or never staged)"
    ),
    ErrorCode.STAGE_OUT_OF_ORDER: "the staged batch does not continue its attempt's sequence",
    ErrorCode.WRITE_COMMITTED: "the write is committed already; it cannot be aborted",
    ErrorCode.STAGED_DATA_UNREACHABLE: (
        "the node holding staged data of the write cannot be reached; nothing was published"
    ),
    ErrorCode.NOT_OWNER: "this shard or node does not own the partition; refresh metadata",
    ErrorCode.STORAGE_ERROR: "the server could not read or write its log",
    ErrorCode.SHUTTING_DOWN: "the server is shutting down; retry elsewhere or later",
    ErrorCode.TIMEOUT: "the request did not complete in time",
    ErrorCode.COMMIT_PENDING: (
        "the commit is decided but not yet published everywhere; the node finishes it, "
        "send the commit again to wait for it"
    ),
    ErrorCode.OUTCOME_UNKNOWN: (
        "the request was handed on and no answer came back: it may or may not have been "
        "applied; read to check before sending it again"
    ),
    ErrorCode.NOT_READY: (
        "the shard is still loading its metadata; nothing was applied; retry shortly"
    ),
    ErrorCode.TOO_MANY_CONNECTIONS: (
        "the shard serves as many connections as it may; nothing was read; retry later"
    ),
    ErrorCode.AUTHENTICATION_FAILED: (
        "authentication failed (a wrong user name or password, or a request before "
        "logging in); nothing was applied"
    ),
    ErrorCode.NOT_AUTHORIZED: (
        "the authenticated principal is not allowed this operation on this resource; "
        "nothing was applied"
    ),
    ErrorCode.USER_EXISTS: "a user by that name exists already",
    ErrorCode.UNKNOWN_USER: "no user by that name exists",
    ErrorCode.LIMIT_REACHED: "the cluster holds as many users or ACLs as it may",
    ErrorCode.NOT_LEADER: (
        "this node is not the partition's leader; nothing was applied; send it to the "
        "leader the error names (or refresh metadata)"
    ),
    ErrorCode.NOT_ENOUGH_REPLICAS: (
        "a majority of the partition's replicas could not be reached in time; nothing was applied"
    ),
    ErrorCode.INTERNAL: "the server failed unexpectedly",
}

_RETRIABLE = frozenset(
    {
        ErrorCode.NOT_OWNER,
        ErrorCode.SHUTTING_DOWN,
        ErrorCode.TIMEOUT,
        ErrorCode.STORAGE_ERROR,
        ErrorCode.COMMIT_PENDING,
        ErrorCode.STAGED_DATA_UNREACHABLE,
        ErrorCode.NOT_READY,
        ErrorCode.TOO_MANY_CONNECTIONS,
        ErrorCode.NOT_LEADER,
        ErrorCode.NOT_ENOUGH_REPLICAS,
    }
)


def error_code(value: int) -> ErrorCode:
    """The `ErrorCode` for a wire value; codes from a newer peer become INTERNAL."""
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.INTERNAL


class WireError(Exception):
    """Base of every exception `laminar.wire` raises on purpose."""


class WireUsageError(WireError, ValueError):
    """This side misused the codec (a bug in the caller, not the peer's fault)."""


class ReceiveBufferFull(WireUsageError):
    """`feed` would take the receive buffer past its bound; drain frames first.

    Nothing was buffered: feed the same bytes again after `next_frame` has
    returned the complete frames already held.
    """


class ProtocolError(WireError):
    """The peer broke the protocol. Answer with `code`; close if `fatal`."""

    code: ErrorCode = ErrorCode.MALFORMED_FRAME
    fatal: bool = True

    def __init__(
        self,
        message: str | None = None,
        *,
        correlation_id: int | None = None,
        op: int | None = None,
        partition_id: int | None = None,
    ) -> None:
        super().__init__(message or self.code.default_message)
        self.message = message or self.code.default_message
        self.correlation_id = correlation_id
        self.op = op
        self.partition_id = partition_id


class BadMagic(ProtocolError):
    """Byte 4 is not the laminar magic: this is not laminar traffic."""


class UnsupportedVersion(ProtocolError):
    """Byte 5 names a protocol version this side does not speak."""

    code = ErrorCode.UNSUPPORTED_VERSION


class FrameTooLarge(ProtocolError):
    """The length field announces a frame over the limit; its body was never buffered."""

    code = ErrorCode.FRAME_TOO_LARGE


class MalformedFrame(ProtocolError):
    """The frame's lengths are inconsistent or its msgpack header does not decode."""


class UnknownOp(ProtocolError):
    """A well-formed frame with an op code this side has no message type for."""

    code = ErrorCode.UNKNOWN_OP
    fatal = False


class InvalidMessage(ProtocolError):
    """A well-formed frame whose header fields or payload layout break the schema."""

    code = ErrorCode.INVALID_REQUEST
    fatal = False


class CorruptRecord(ProtocolError):
    """A record blob does not follow the record encoding (`laminar.wire.records`)."""

    code = ErrorCode.CORRUPT_RECORD
    fatal = False


class RequestError(Exception):
    """A request cannot be served; answer with `code` and `message` (and, for
    NOT_LEADER, the node id of the `leader` when known)."""

    def __init__(
        self, code: ErrorCode, message: str | None = None, *, leader: str | None = None
    ) -> None:
        super().__init__(message or code.default_message)
        self.code = code
        self.message = message or code.default_message
        self.leader = leader
