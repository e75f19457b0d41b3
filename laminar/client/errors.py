"""The exceptions the client raises: one type per thing a caller may handle.

`LaminarError` is the base. An error the server answered with carries its
`ErrorCode` in `.code` and the server's words in `.message`; an error on this
side of the wire (no route to the node, a connection that died, a local
timeout) has `.code` None. The split a caller most often needs:

- `ServerError` and its subclasses: the node refused the request. Retrying the
  same request will fail the same way unless `.retriable` is true.
- `ConnectionLostError`: no answer arrived. `CannotConnectError` means the
  request was never sent; `OutcomeUnknownError` means it was sent and may or
  may not have been applied (the client raises it instead of retrying a
  produce or a topic change, which are not idempotent).
"""

from __future__ import annotations

from laminar.wire import ErrorCode


class LaminarError(Exception):
    """Base of every error the client raises on purpose."""

    code: ErrorCode | None = None

    def __init__(self, message: str, *, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    @property
    def retriable(self) -> bool:
        """True when the same request may succeed if sent again later."""
        return self.code is not None and self.code.retriable

    def __str__(self) -> str:
        if self.code is None:
            return self.message
        return f"{self.message} ({self.code.name})"


# --- the server said no -------------------------------------------------------------


class ServerError(LaminarError):
    """The node answered with an error code (`.code`) and a message."""

    code: ErrorCode | None = ErrorCode.INTERNAL


class InvalidRequestError(ServerError):
    """The node could not accept the request as sent (bad fields, frame too large,
    an op or version it does not speak): a bug or a version mismatch here."""

    code = ErrorCode.INVALID_REQUEST


class UnknownTopicError(ServerError):
    """No topic by that name or id exists."""

    code = ErrorCode.UNKNOWN_TOPIC


class UnknownPartitionError(ServerError):
    """The topic has no partition with that index."""

    code = ErrorCode.UNKNOWN_PARTITION


class TopicExistsError(ServerError):
    """A topic with that name already exists."""

    code = ErrorCode.TOPIC_EXISTS


class OffsetOutOfRangeError(ServerError):
    """The index is outside the partition's retained range."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE


class RecordTooLargeError(ServerError):
    """A record or batch is larger than the node's log accepts."""

    code = ErrorCode.RECORD_TOO_LARGE


class CorruptRecordError(ServerError):
    """A record's bytes do not follow the record encoding."""

    code = ErrorCode.CORRUPT_RECORD


class OutOfOrderSequenceError(ServerError):
    """An idempotent batch does not continue its producer's sequence (a gap or an
    overlap): nothing was appended. The message says which sequence is expected."""

    code = ErrorCode.OUT_OF_ORDER_SEQUENCE


class DuplicateSequenceError(ServerError):
    """An idempotent batch was appended before (nothing was appended now), but the
    node no longer remembers its index. The records are in the partition."""

    code = ErrorCode.DUPLICATE_SEQUENCE


class StagingFullError(ServerError):
    """The shard's staging area for atomic writes is full (its bound is the node's
    --staging-bytes-max): commit, abort or wait for staged writes to expire."""

    code = ErrorCode.STAGING_FULL


class WriteAbortedError(ServerError):
    """The atomic write was aborted; it can no longer be committed."""

    code = ErrorCode.WRITE_ABORTED


class StagedDataMissingError(ServerError):
    """A commit names staged data the node does not hold (it expired, was dropped,
    or was never staged): nothing was committed."""

    code = ErrorCode.STAGED_DATA_MISSING


class StagedDataUnreachableError(ServerError):
    """The node holding staged data a commit names (or a stager's earlier
    batches) cannot be reached: nothing of the write was published. Staged data
    is durable: once that node is back, within the staging timeout, the same
    commit succeeds (retriable)."""

    code = ErrorCode.STAGED_DATA_UNREACHABLE


class StageOutOfOrderError(ServerError):
    """A staged batch does not continue its attempt's sequence (a gap, or a batch
    sent again with other records): nothing was staged."""

    code = ErrorCode.STAGE_OUT_OF_ORDER


class WriteCommittedError(ServerError):
    """An abort came too late: the atomic write is committed."""

    code = ErrorCode.WRITE_COMMITTED


class CommitPendingError(ServerError):
    """The commit is decided (it will be visible) but not yet published in every
    partition; the node finishes it. Sending the commit again waits for it."""

    code = ErrorCode.COMMIT_PENDING


class NotOwnerError(ServerError):
    """The shard does not own the partition: metadata was stale (retriable)."""

    code = ErrorCode.NOT_OWNER


class NotLeaderError(ServerError):
    """The node is not the partition's leader; nothing was applied. `leader` names
    the node that is, when the node knows it (the client retries there)."""

    code = ErrorCode.NOT_LEADER

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode | None = None,
        leader: str | None = None,
        partition_id: int | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.leader = leader
        self.partition_id = partition_id


class NotEnoughReplicasError(ServerError):
    """The node has not heard from a majority of the partition's replicas lately
    (it may be cut off from them); nothing was applied. The client retries at
    the partition's next replica."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS

    def __init__(
        self, message: str, *, code: ErrorCode | None = None, partition_id: int | None = None
    ) -> None:
        super().__init__(message, code=code)
        self.partition_id = partition_id


class StorageError(ServerError):
    """The node could not read or write its log."""

    code = ErrorCode.STORAGE_ERROR


class ShuttingDownError(ServerError):
    """The node is draining; retry later or elsewhere."""

    code = ErrorCode.SHUTTING_DOWN


class ServerTimeoutError(ServerError):
    """The node gave up on the request in time."""

    code = ErrorCode.TIMEOUT


class NotReadyError(ServerError):
    """The shard is still loading its topic metadata (a restart); nothing was
    applied. Retriable."""

    code = ErrorCode.NOT_READY


class AuthenticationFailedError(ServerError):
    """The node did not accept this client's credentials (or it sent a request
    before logging in); nothing was applied. Not retriable with the same ones."""

    code = ErrorCode.AUTHENTICATION_FAILED


class NotAuthorizedError(ServerError):
    """The client's principal may not do this; nothing was applied. An ACL
    granting it (`laminar acl add`) makes the same request succeed."""

    code = ErrorCode.NOT_AUTHORIZED


class UnknownUserError(ServerError):
    code = ErrorCode.UNKNOWN_USER


class UserExistsError(ServerError):
    code = ErrorCode.USER_EXISTS


class LimitReachedError(ServerError):
    """The cluster holds as many users or ACLs as it may."""

    code = ErrorCode.LIMIT_REACHED


_BY_CODE: dict[ErrorCode, type[ServerError]] = {
    ErrorCode.MALFORMED_FRAME: InvalidRequestError,
    ErrorCode.UNSUPPORTED_VERSION: InvalidRequestError,
    ErrorCode.UNKNOWN_OP: InvalidRequestError,
    ErrorCode.FRAME_TOO_LARGE: InvalidRequestError,
    ErrorCode.INVALID_REQUEST: InvalidRequestError,
    ErrorCode.USE_TCP: InvalidRequestError,
    ErrorCode.UNKNOWN_TOPIC: UnknownTopicError,
    ErrorCode.UNKNOWN_PARTITION: UnknownPartitionError,
    ErrorCode.TOPIC_EXISTS: TopicExistsError,
    ErrorCode.OFFSET_OUT_OF_RANGE: OffsetOutOfRangeError,
    ErrorCode.RECORD_TOO_LARGE: RecordTooLargeError,
    ErrorCode.CORRUPT_RECORD: CorruptRecordError,
    ErrorCode.OUT_OF_ORDER_SEQUENCE: OutOfOrderSequenceError,
    ErrorCode.DUPLICATE_SEQUENCE: DuplicateSequenceError,
    ErrorCode.STAGING_FULL: StagingFullError,
    ErrorCode.WRITE_ABORTED: WriteAbortedError,
    ErrorCode.STAGED_DATA_MISSING: StagedDataMissingError,
    ErrorCode.STAGED_DATA_UNREACHABLE: StagedDataUnreachableError,
    ErrorCode.STAGE_OUT_OF_ORDER: StageOutOfOrderError,
    ErrorCode.WRITE_COMMITTED: WriteCommittedError,
    ErrorCode.COMMIT_PENDING: CommitPendingError,
    ErrorCode.NOT_OWNER: NotOwnerError,
    ErrorCode.NOT_ENOUGH_REPLICAS: NotEnoughReplicasError,
    ErrorCode.STORAGE_ERROR: StorageError,
    ErrorCode.SHUTTING_DOWN: ShuttingDownError,
    ErrorCode.TIMEOUT: ServerTimeoutError,
    ErrorCode.NOT_READY: NotReadyError,
    ErrorCode.AUTHENTICATION_FAILED: AuthenticationFailedError,
    ErrorCode.NOT_AUTHORIZED: NotAuthorizedError,
    ErrorCode.UNKNOWN_USER: UnknownUserError,
    ErrorCode.USER_EXISTS: UserExistsError,
    ErrorCode.LIMIT_REACHED: LimitReachedError,
}


def server_error(
    code: ErrorCode, message: str, leader: str | None = None, partition_id: int | None = None
) -> LaminarError:
    """The typed exception for an error response with `code` and `message`.

    OUTCOME_UNKNOWN is not a refusal: the node handed the request on and lost
    its answer, so it may have been applied (`OutcomeUnknownError`).
    TOO_MANY_CONNECTIONS is the node's only word on a connection it refused
    before reading anything (`CannotConnectError`: nothing was applied)."""
    message = message or code.default_message
    if code is ErrorCode.OUTCOME_UNKNOWN:
        return OutcomeUnknownError(message, code=code)
    if code is ErrorCode.TOO_MANY_CONNECTIONS:
        return CannotConnectError(message, code=code)
    if code is ErrorCode.NOT_LEADER:
        return NotLeaderError(message, code=code, leader=leader, partition_id=partition_id)
    if code is ErrorCode.NOT_ENOUGH_REPLICAS:
        return NotEnoughReplicasError(message, code=code, partition_id=partition_id)
    cls = _BY_CODE.get(code, ServerError)
    return cls(message, code=code)


# --- no answer ----------------------------------------------------------------------


class ConnectionLostError(LaminarError):
    """No answer came back: the connection failed or closed."""


class CannotConnectError(ConnectionLostError):
    """No connection could be made; the request was not sent."""


class OutcomeUnknownError(ConnectionLostError):
    """A request that is not safe to repeat (produce, create or delete a topic) was
    sent and no answer came back: it may or may not have been applied."""


class ProtocolViolationError(ConnectionLostError):
    """The peer sent bytes that are not a valid answer; the connection was closed."""


class RequestTimeoutError(LaminarError, TimeoutError):
    """No answer within the client's timeout (an idempotent request: safe to retry)."""
