"""Delivery checked by identity: every acknowledged record read back exactly once.

Counting hides errors that cancel out (one record lost and another delivered
twice add up to the right count). Every benchmark record carries its
producer's id and its sequence number (`laminar.bench.records`), so a run can
say exactly which records were lost, duplicated, or came from nowhere:

- a `Ledger` per producer marks the sequence numbers the target acknowledged
  (a bitmap: sequence numbers of one producer are dense from 0);
- `check_delivery` takes the ledgers and the records read back and returns a
  `DeliveryVerdict`: lost (acknowledged, never read), duplicated (read more
  than once), phantom (read, but no producer ever sent that sequence number).
  A record that was sent but not acknowledged (an error, a request still in
  flight at the end) may be read back once or not at all.

Pure: no I/O, driven directly by the harness's tests.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

PRODUCER_SHIFT: Final = 40
"""A record's u64 identity is `producer << 40 | sequence`."""
SEQUENCE_MASK: Final = (1 << PRODUCER_SHIFT) - 1
PREFILL_PRODUCER: Final = 0xFFFF
"""The producer id of the records the coordinator writes before a backlog run."""
SAMPLES_MAX: Final = 5

_IDENTITY: Final = struct.Struct("<Q")
_IDENTITY_OFFSET: Final = 8
"""The identity is the record header's second u64 (after the intended time)."""


def identity(producer: int, sequence: int) -> int:
    return producer << PRODUCER_SHIFT | sequence


def identity_of(record: bytes | memoryview) -> tuple[int, int]:
    """`(producer, sequence)` of a benchmark record."""
    value = identity_value(record)
    return value >> PRODUCER_SHIFT, value & SEQUENCE_MASK


def identity_value(record: bytes | memoryview) -> int:
    """The u64 identity of a benchmark record."""
    value: int = _IDENTITY.unpack_from(record, _IDENTITY_OFFSET)[0]
    return value


def identities_of(records: Sequence[bytes | memoryview], record_bytes: int) -> array[int]:
    """The identities of `records`, in order, so a consumer can check delivery
    after the run without keeping what it read: holding every answer made the
    generator fault in fresh memory for each one, a cost of the generator, not
    of the server. Records of the run's size (all of them, normally) are joined
    and read as one strided column; any other batch one record at a time."""
    out: array[int] = array("Q")
    if record_bytes % 8 == 0 and set(map(len, records)) == {record_bytes}:
        with memoryview(b"".join(records)).cast("Q") as words:
            out.frombytes(words[_IDENTITY_OFFSET // 8 :: record_bytes // 8].tobytes())
        if sys.byteorder != "little":
            out.byteswap()
    else:
        out.extend(map(identity_value, records))
    return out


class Ledger:
    """The sequence numbers one producer sent and which of them were acknowledged."""

    __slots__ = ("_acked", "sent")

    def __init__(self, sent: int = 0, acked: bytes = b"") -> None:
        self.sent = sent
        """Sequence numbers 0..sent-1 were sent (acknowledged or not)."""
        self._acked = bytearray(acked)

    def send(self, count: int) -> int:
        """Reserve `count` sequence numbers; the first of them."""
        first = self.sent
        self.sent += count
        return first

    def ack(self, first: int, count: int) -> None:
        acked = self._acked
        end = first + count
        if len(acked) < end:
            acked.extend(bytes(end - len(acked)))
        acked[first:end] = b"\x01" * count

    def acknowledged(self) -> int:
        return self._acked.count(1)

    def is_acked(self, sequence: int) -> bool:
        return sequence < len(self._acked) and self._acked[sequence] == 1

    def to_wire(self) -> tuple[int, bytes]:
        return self.sent, bytes(self._acked)

    @classmethod
    def from_wire(cls, wire: tuple[int, bytes]) -> Ledger:
        return cls(wire[0], wire[1])


@dataclass(slots=True)
class DeliveryVerdict:
    """What a read-back showed, by identity."""

    acknowledged: int = 0
    read: int = 0
    lost: int = 0
    duplicated: int = 0
    phantom: int = 0
    samples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.phantom)

    def problems(self) -> dict[str, int]:
        """Non-zero problem counts, as the run's error table names them."""
        out = {
            "lost (acknowledged, not read back)": self.lost,
            "duplicated (read back more than once)": self.duplicated,
            "phantom (read back, never sent)": self.phantom,
        }
        return {k: v for k, v in out.items() if v}

    def merge(self, other: DeliveryVerdict) -> None:
        self.acknowledged += other.acknowledged
        self.read += other.read
        self.lost += other.lost
        self.duplicated += other.duplicated
        self.phantom += other.phantom
        self.samples = (self.samples + other.samples)[:SAMPLES_MAX]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeliveryVerdict:
        return cls(**{k: v for k, v in data.items() if k != "ok"})


def check_delivery(
    ledgers: Mapping[int, Ledger], read: Iterable[bytes | memoryview]
) -> DeliveryVerdict:
    """Compare the records `read` back (in any order, from every partition)
    with what `ledgers` say was sent and acknowledged (see the module docstring)."""
    return check_identities(ledgers, map(identity_value, read))


def check_identities(ledgers: Mapping[int, Ledger], identities: Iterable[int]) -> DeliveryVerdict:
    """`check_delivery` for the identities of the records read back."""
    verdict = DeliveryVerdict()
    seen: dict[int, bytearray] = {p: bytearray(ledger.sent) for p, ledger in ledgers.items()}
    for value in identities:
        verdict.read += 1
        producer, sequence = value >> PRODUCER_SHIFT, value & SEQUENCE_MASK
        counts = seen.get(producer)
        if counts is None or sequence >= len(counts):
            verdict.phantom += 1
            _sample(verdict, f"phantom: producer {producer} sequence {sequence}")
            continue
        if counts[sequence]:
            verdict.duplicated += 1
            _sample(verdict, f"duplicated: producer {producer} sequence {sequence}")
        else:
            counts[sequence] = 1
    for producer, ledger in ledgers.items():
        verdict.acknowledged += ledger.acknowledged()
        counts = seen[producer]
        for sequence in range(ledger.sent):
            if not counts[sequence] and ledger.is_acked(sequence):
                verdict.lost += 1
                _sample(verdict, f"lost: producer {producer} sequence {sequence}")
    return verdict


def _sample(verdict: DeliveryVerdict, text: str) -> None:
    if len(verdict.samples) < SAMPLES_MAX:
        verdict.samples.append(text)
