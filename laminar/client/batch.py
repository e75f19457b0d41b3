"""`RecordBatch`: one fetch answer, kept as the one buffer it arrived in.

`fetch()` returns a `Record` per record, which is what most code wants. A
consumer that only looks at values (a benchmark, a pipe to a file, Spark)
pays for objects it never uses; `fetch_batch()` returns this instead:

    batch = client.fetch_batch("events", 0, index)
    len(batch)                  # records in the answer (0: none there yet)
    batch.next_index            # where the next fetch starts
    for view in batch.values(): # memoryviews into the answer's buffer, no copies
        sink.write(view)
    for record in batch:        # the same Records `fetch()` would have returned
        ...
    table = batch.to_arrow()    # pyarrow RecordBatch (needs the spark extra)

Indexes may have gaps: a replicated partition's log also holds Raft's own
entries, which reads skip. So a reader never computes where to go on
(`index + len(batch)` repeats records after a gap): the node says it,
`next_index`, also in an answer without records (past such entries, or
where it was asked when nothing is there yet).

The answer's layout (`laminar.wire.records`): a count, a table of (index,
timestamp_ms, blob length), then the blobs back to back; a blob is an attrs
byte, an optional key, optional headers, then the value. Bare values (attrs
0, the common case, or a value whose only header is the producer stamp an
idempotent produce puts on a batch's first record) are located with C-level
loops, no Python per record; blobs with keys or headers are parsed one by
one. The stamp is laminar's bookkeeping, never shown as a header. Lengths are checked once,
when the batch is made: a batch that exists adds up.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from itertools import accumulate, repeat
from typing import TYPE_CHECKING, Final

from laminar.client.errors import ProtocolViolationError
from laminar.client.results import Record, expect
from laminar.wire import FetchResponse, Flags, Frame, Op, ProtocolError, decode_user_record
from laminar.wire.fields import uint
from laminar.wire.records import (
    HAS_HEADERS,
    HAS_KEY,
    simple_value_starts,
    unpack_fetch_columns,
)

if TYPE_CHECKING:
    import pyarrow as pa

_KIND_MASK: Final = Flags.RESPONSE | Flags.ERROR
_U32: Final = struct.Struct(">I")
_LENGTH: Final = struct.Struct(">I")


class RecordBatch:
    """The records of one fetch answer (see the module docstring)."""

    __slots__ = (
        "_bare",
        "_ends",
        "_payload",
        "_starts",
        "_value_starts",
        "indexes",
        "next_index",
        "partition",
        "timestamps_ms",
    )

    def __init__(
        self,
        partition: int,
        payload: bytes,
        indexes: list[int],
        timestamps_ms: list[int],
        starts: Sequence[int],
        ends: Sequence[int],
        value_starts: Sequence[int] | None = None,
        *,
        next_index: int,
        simple: bool = False,
    ) -> None:
        """Records whose blobs are `payload[starts[i]:ends[i]]`; `value_starts`
        None means every blob is a bare value (attrs byte 0); `simple`, that
        each is a bare value, perhaps stamped (no key, no headers to show)."""
        self.partition = partition
        """The partition (its number in the topic) the records come from."""
        self.next_index = next_index
        """Where the next fetch starts (see the module docstring)."""
        self.indexes = indexes
        self.timestamps_ms = timestamps_ms
        self._payload = payload
        self._starts = starts
        self._ends = ends
        self._bare = value_starts is None or simple
        self._value_starts = _after_attrs(starts) if value_starts is None else value_starts

    @classmethod
    def from_frame(cls, frame: Frame, partition: int) -> RecordBatch:
        """The batch in a fetch answer frame (or the node's error, raised)."""
        if frame.flags & _KIND_MASK != Flags.RESPONSE or frame.op != Op.FETCH:
            expect(frame, FetchResponse)  # raises the server's error or says what is wrong
        try:
            next_index = uint(frame.header, "next_index")
        except ProtocolError as exc:
            raise _bad(exc.message) from exc
        return cls.from_payload(frame.payload, partition, next_index)

    @classmethod
    def from_payload(cls, payload: bytes, partition: int, next_index: int) -> RecordBatch:
        """The batch in a fetch answer's payload (`next_index`: where the
        answer says to go on); `ProtocolViolationError` if the layout does not
        add up, or if `next_index` is not past the last record."""
        if len(payload) < 4:
            raise _bad(f"payload of {len(payload)} bytes has no record count")
        (count,) = _U32.unpack_from(payload)
        table_end = 4 + 20 * count
        if table_end > len(payload):
            raise _bad(f"{count} records do not fit a payload of {len(payload)} bytes")
        if not count:
            if table_end != len(payload):
                raise _bad(f"an empty batch carries {len(payload) - table_end} stray bytes")
            return cls(partition, payload, [], [], [], [], next_index=next_index)
        index_column, stamp_column, sizes = unpack_fetch_columns(payload, count)
        indexes, stamps = index_column.tolist(), stamp_column.tolist()
        if next_index <= indexes[-1]:
            raise _bad(f"next_index {next_index} is not past the last record ({indexes[-1]})")
        size = sizes[0]
        if (  # records of one size, all bare values (the common case): blobs
            # start every `size` bytes and their attrs bytes are one strided slice
            size
            and sizes.count(size) == count
            and table_end + size * count == len(payload)
            and payload[table_end::size].count(0) == count
        ):
            starts_at = range(table_end, len(payload), size)
            ends_at = range(table_end + size, len(payload) + 1, size)
            return cls(
                partition, payload, indexes, stamps, starts_at, ends_at, next_index=next_index
            )
        starts = list(accumulate(sizes, initial=table_end))
        if starts[-1] != len(payload):
            raise _bad(
                f"record lengths add up to {starts[-1]} bytes, the payload has {len(payload)}"
            )
        ends = starts[1:]
        del starts[-1]
        simple = simple_value_starts(payload, starts, sizes)
        if simple is not None:  # bare values, some stamped: located in bulk
            return cls(
                partition,
                payload,
                indexes,
                stamps,
                starts,
                ends,
                simple,
                next_index=next_index,
                simple=True,
            )
        value_starts = [_value_start(payload, s, e) for s, e in zip(starts, ends, strict=True)]
        return cls(
            partition, payload, indexes, stamps, starts, ends, value_starts, next_index=next_index
        )

    def __len__(self) -> int:
        return len(self.indexes)

    def values(self) -> list[memoryview]:
        """Every record's value as a memoryview into the answer's one buffer
        (no copies; `bytes(view)` when a copy is wanted)."""
        view = memoryview(self._payload)
        return list(map(view.__getitem__, map(slice, self._value_starts, self._ends)))

    def __iter__(self) -> Iterator[Record]:
        """The records as `fetch()` returns them."""
        payload = self._payload
        if self._bare:
            values = map(payload.__getitem__, map(slice, self._value_starts, self._ends))
            rows = zip(self.indexes, self.timestamps_ms, values, repeat(None), repeat(None))
            return map(tuple.__new__, repeat(Record), rows)
        return self._decoded()

    def _decoded(self) -> Iterator[Record]:
        payload = self._payload
        for index, stamp, start, end in zip(
            self.indexes, self.timestamps_ms, self._starts, self._ends, strict=True
        ):
            try:
                value, key, headers = decode_user_record(payload[start:end])
            except ProtocolError as exc:
                raise _bad(exc.message) from exc
            yield tuple.__new__(Record, (index, stamp, value, key, headers))

    def to_arrow(self, end: int | None = None) -> pa.RecordBatch:
        """The records (those with an index below `end`, if given) as a
        pyarrow RecordBatch with the columns partition, index, timestamp, key,
        value, headers (`laminar.client.arrow`); values and keys are gathered
        in bulk. Needs pyarrow and numpy."""
        from laminar.client.arrow import fetch_to_arrow

        return fetch_to_arrow(
            self._payload, self.partition, self.next_index if end is None else end
        )

    def __repr__(self) -> str:
        if not self.indexes:
            return f"RecordBatch(partition={self.partition}, empty)"
        return (
            f"RecordBatch(partition={self.partition}, {len(self)} records, "
            f"indexes {self.indexes[0]}..{self.indexes[-1]})"
        )


def _after_attrs(starts: Sequence[int]) -> Sequence[int]:
    """Where bare values begin: one byte after each blob's start."""
    if isinstance(starts, range):
        return range(starts.start + 1, starts.stop + 1, starts.step)
    return list(map((1).__add__, starts))


def _value_start(payload: bytes, start: int, end: int) -> int:
    """Where the value of the blob `payload[start:end]` begins (after its attrs
    byte, key and headers), checked against the blob's end."""
    if start >= end:
        raise _bad("a record blob is empty (it must start with its attrs byte)")
    attrs = payload[start]
    if attrs & ~(HAS_KEY | HAS_HEADERS):
        raise _bad(f"a record's attrs byte 0x{attrs:02x} has unknown bits")
    pos = start + 1
    for flag in (HAS_KEY, HAS_HEADERS):
        if attrs & flag:
            if pos + 4 > end:
                raise _bad("a record ends inside a key or headers length")
            pos += 4 + _LENGTH.unpack_from(payload, pos)[0]
            if pos > end:
                raise _bad("a record's key or headers run past the record's end")
    return pos


def _bad(reason: str) -> ProtocolViolationError:
    return ProtocolViolationError(f"the node's fetch answer does not decode: {reason}")
