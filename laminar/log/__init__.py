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
from .record import LogBatch, LogRecord
from .segmented_log import SegmentedLog
from .simdisk import Fault, SimulatedDisk
from .storage import Storage, StorageBackend, SyscallBackend

MemoryBackend = SimulatedDisk  # the in-memory backend is the power-cut simulator

__all__ = [
    "AppendTooLarge",
    "Fault",
    "FlushPolicy",
    "IndexOutOfRange",
    "LogBatch",
    "LogClosed",
    "LogConfig",
    "LogCorrupted",
    "LogError",
    "LogFailed",
    "LogRecord",
    "MemoryBackend",
    "RecordCorrupted",
    "SegmentedLog",
    "SimulatedDisk",
    "Storage",
    "StorageBackend",
    "SyscallBackend",
]
