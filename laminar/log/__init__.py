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
from .simdisk import Fault, SimulatedDisk
from .storage import Storage, StorageBackend, SyscallBackend

MemoryBackend = SimulatedDisk  # the in-memory backend is the power-cut simulator

__all__ = [
    "AppendTooLarge",
    "Fault",
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
    "SimulatedDisk",
    "Storage",
    "StorageBackend",
    "SyscallBackend",
]
