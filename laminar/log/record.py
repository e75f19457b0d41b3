"""The record type the log hands out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple


class LogRecord(NamedTuple):
    """One record of a log. `index` is its position; `timestamp_ms` is when the log
    appended it (never decreasing along the log); `term` is the Raft term given
    to `append`.

    A NamedTuple because read_range builds hundreds of thousands a second and a
    tuple is the cheapest object CPython makes; its `index` field hides
    `tuple.index`, which nobody needs on a record."""

    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose: speed
    term: int
    timestamp_ms: int
    value: bytes


@dataclass(frozen=True, slots=True)
class LogBatch:
    """Consecutive records of one segment in columns, their values back to back.

    `payload` holds the values of records `first_index ...` in order, exactly
    as the store holds them, so a server can send it on without touching each
    record; value `k` is `payload[offsets[k] : offsets[k] + lengths[k]]`.
    Every value was checked against its checksum when the batch was read. The
    columns are sequences of ints; the log hands out `array`s (copied out of the
    index whole, without an int object per record).
    """

    first_index: int
    terms: Sequence[int]
    timestamps_ms: Sequence[int]
    lengths: Sequence[int]
    payload: bytes | bytearray

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def end_index(self) -> int:
        """One past the last record of the batch."""
        return self.first_index + len(self.lengths)

    def head(self, count: int) -> LogBatch:
        """The first `count` records of the batch."""
        size = sum(self.lengths[:count])
        return LogBatch(
            self.first_index,
            self.terms[:count],
            self.timestamps_ms[:count],
            self.lengths[:count],
            self.payload[:size],
        )

    def records(self) -> list[LogRecord]:
        """The batch as `LogRecord`s (copies each value)."""
        out = []
        at = 0
        for k, length in enumerate(self.lengths):
            value = bytes(self.payload[at : at + length])
            out.append(LogRecord(self.first_index + k, self.terms[k], self.timestamps_ms[k], value))
            at += length
        return out
