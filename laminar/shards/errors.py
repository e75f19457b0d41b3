"""How failures inside a shard become wire errors: one table, no I/O.

Every request gets an answer: a handler raises, and `error_for` turns the
exception into an `ErrorCode` and a message the client can act on. Anything not
in the table is a bug on the server (INTERNAL) and is logged with its traceback
by the dispatcher; the message sent never leaks internals beyond the type name.
"""

from __future__ import annotations

from laminar.channels.siblings import ChannelError
from laminar.log import (
    AppendTooLarge,
    IndexOutOfRange,
    LogClosed,
    LogCorrupted,
    LogError,
    LogFailed,
    RecordCorrupted,
)
from laminar.log.partitions import PartitionOffline
from laminar.replication.metadata import MetadataError
from laminar.security.errors import Refusal, SecurityRefusal
from laminar.wire import ErrorCode, ProtocolError, RequestError


def error_for(exc: BaseException) -> tuple[ErrorCode, str, bool]:
    """`(code, message, expected)` for an exception raised while serving a
    request; `expected` is False for server bugs (to be logged loudly)."""
    if isinstance(exc, RequestError | MetadataError):
        return exc.code, exc.message, True
    if isinstance(exc, ProtocolError):
        return exc.code, exc.message, True
    if isinstance(exc, SecurityRefusal):
        return _REFUSALS[exc.refusal], exc.message, True
    if isinstance(exc, AppendTooLarge):
        return ErrorCode.RECORD_TOO_LARGE, str(exc), True
    if isinstance(exc, IndexOutOfRange):
        return ErrorCode.OFFSET_OUT_OF_RANGE, str(exc), True
    if isinstance(exc, LogClosed):
        return (
            ErrorCode.SHUTTING_DOWN,
            "the partition was closed (shard draining or topic deleted)",
            True,
        )
    if isinstance(exc, PartitionOffline):
        return ErrorCode.STORAGE_ERROR, str(exc), True
    if isinstance(exc, RecordCorrupted):
        return ErrorCode.STORAGE_ERROR, f"a stored record failed its checksum: {exc}", True
    if isinstance(exc, LogFailed | LogCorrupted | LogError):
        return ErrorCode.STORAGE_ERROR, str(exc), True
    if isinstance(exc, ChannelError):
        return ErrorCode.TIMEOUT, f"{exc}; retry", True
    if isinstance(exc, OSError):
        return ErrorCode.STORAGE_ERROR, f"storage failed: {exc}", True
    return ErrorCode.INTERNAL, f"the server failed unexpectedly ({type(exc).__name__})", False


_REFUSALS = {
    Refusal.INVALID: ErrorCode.INVALID_REQUEST,
    Refusal.EXISTS: ErrorCode.USER_EXISTS,
    Refusal.UNKNOWN: ErrorCode.UNKNOWN_USER,
    Refusal.LIMIT: ErrorCode.LIMIT_REACHED,
}
