"""The records the load generators write: same size and content for every target.

Each record is `record_bytes` long: a 16-byte header (the intended send time on
CLOCK_MONOTONIC in nanoseconds, and the record's identity, its producer's id
and sequence number as `laminar.bench.delivery` packs them, both u64 little
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
from laminar.bench.delivery import Ledger, identity, identity_of

_HEADER: Final = struct.Struct("<QQ")
_unpack_from = _HEADER.unpack_from
_pack = _HEADER.pack


class RecordMaker:
    """Builds batches of records of one size for one producer, numbering them
    0, 1, 2, ... in the order they are made."""

    def __init__(self, record_bytes: int, producer: int = 0) -> None:
        if record_bytes < HEADER_BYTES:
            raise ValueError(f"records must be at least {HEADER_BYTES} bytes")
        self.record_bytes = record_bytes
        self.producer = producer
        self.ledger = Ledger()
        """Which of this maker's records were acknowledged (the caller marks them)."""
        self._filler = os.urandom(record_bytes - HEADER_BYTES)

    def batch(self, intended_ns: int, count: int) -> list[bytes]:
        """`count` new records; their sequence numbers start at `ledger.sent`
        as it was before the call."""
        filler = self._filler
        first = identity(self.producer, self.ledger.send(count))
        return [_pack(intended_ns, first + i) + filler for i in range(count)]


def intended_ns_of(record: bytes | memoryview) -> int:
    """The intended send time written into `record` by `RecordMaker`."""
    value: int = _unpack_from(record)[0]
    return value


def sequence_of(record: bytes | memoryview) -> int:
    """The record's sequence number within its producer."""
    return identity_of(record)[1]
