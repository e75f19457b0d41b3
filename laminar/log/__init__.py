"""The per-partition segmented log: durable, append-only, group-committed.

log = await SegmentedLog.open(directory, LogConfig(segment_bytes=..., flush="always"))
first = await log.append([b"v1", b"v2"], term=0)
record = await log.read(first)
"""

from .config import FlushPolicy, LogConfig
from .errors import (
    AppendTooLarge,
    IndexOutOfRange,
    LogClosed,
    LogCorrupted,
    LogError,
    LogFailed,
    RecordCorrupted,
)
from .record import Record, RecordBatch
from .segmented_log import SegmentedLog
from .storage import MemoryBackend, Storage, StorageBackend, SyscallBackend

__all__ = [
    "AppendTooLarge",
    "FlushPolicy",
    "IndexOutOfRange",
    "LogClosed",
    "LogConfig",
    "LogCorrupted",
    "LogError",
    "LogFailed",
    "MemoryBackend",
    "Record",
    "RecordBatch",
    "RecordCorrupted",
    "SegmentedLog",
    "Storage",
    "StorageBackend",
    "SyscallBackend",
]
