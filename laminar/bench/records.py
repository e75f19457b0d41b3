"""The records the load generators write: same size and content for every target.

Each record is `record_bytes` long: a 16-byte header (the intended send time on
CLOCK_MONOTONIC in nanoseconds, and a sequence number, both u64 little
endian) followed by filler. The filler is random bytes drawn once per process
so that no system gains from compressible payloads; the header lets a consumer
in another process compute end-to-end latency from the producer's intended
send time.
"""

from __future__ import annotations

import os
import struct
from typing import Final

from laminar.bench.config import HEADER_BYTES

_HEADER: Final = struct.Struct("<QQ")
_unpack_from = _HEADER.unpack_from
_pack = _HEADER.pack


class RecordMaker:
    """Builds batches of records of one size."""

    def __init__(self, record_bytes: int) -> None:
        if record_bytes < HEADER_BYTES:
            raise ValueError(f"records must be at least {HEADER_BYTES} bytes")
        self.record_bytes = record_bytes
        self._filler = os.urandom(record_bytes - HEADER_BYTES)
        self._seq = 0

    def batch(self, intended_ns: int, count: int) -> list[bytes]:
        filler = self._filler
        seq = self._seq
        self._seq = seq + count
        return [_pack(intended_ns, seq + i) + filler for i in range(count)]


def intended_ns_of(record: bytes) -> int:
    """The intended send time written into `record` by `RecordMaker`."""
    value: int = _unpack_from(record)[0]
    return value


def sequence_of(record: bytes) -> int:
    value: int = _unpack_from(record)[1]
    return value
