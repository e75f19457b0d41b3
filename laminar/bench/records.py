"""The records the load generators write: same size and content for every target.

Each record is `record_bytes` long: a 16-byte header (the intended send time on
CLOCK_MONOTONIC in nanoseconds, and the record's id, both u64 little endian)
followed by filler. A record id is unique in a run: the writer's number
(`source`: a producer's index, or `PREFILL_SOURCE`) in the top bits, its own
count below, so delivery is checked by identity (`laminar.bench.delivery`).
The filler is random bytes drawn once per process so that no system gains
from compressible payloads; the header lets a consumer
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


SOURCE_SHIFT: Final = 40
"""Bits of a record id below its writer's number (a trillion records each)."""
PREFILL_SOURCE: Final = (1 << (64 - SOURCE_SHIFT)) - 1
"""The writer number of the records a backlog run prefills."""


class RecordMaker:
    """Builds batches of records of one size, with ids unique in a run."""

    def __init__(self, record_bytes: int, source: int = 0) -> None:
        if record_bytes < HEADER_BYTES:
            raise ValueError(f"records must be at least {HEADER_BYTES} bytes")
        if not 0 <= source <= PREFILL_SOURCE:
            raise ValueError(f"a record source is 0..{PREFILL_SOURCE}, not {source}")
        self.record_bytes = record_bytes
        self._filler = os.urandom(record_bytes - HEADER_BYTES)
        self._seq = source << SOURCE_SHIFT

    @property
    def next_id(self) -> int:
        """The id the next record will get."""
        return self._seq

    def batch(self, intended_ns: int, count: int) -> list[bytes]:
        filler = self._filler
        seq = self._seq
        self._seq = seq + count
        return [_pack(intended_ns, seq + i) + filler for i in range(count)]


def intended_ns_of(record: bytes) -> int:
    """The intended send time written into `record` by `RecordMaker`."""
    value: int = _unpack_from(record)[0]
    return value


def record_id(record: bytes) -> int:
    """The id written into `record` by `RecordMaker`."""
    value: int = _unpack_from(record)[1]
    return value
