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
byte, an optional key, optional headers, then the value. Every record is
located and checked in one C loop (`laminar.wire.records.locate_fetch_records`),
no Python per record; records with keys or headers other than the producer
stamp an idempotent produce puts on a batch's first record are decoded one
by one when iterated. The stamp is laminar's bookkeeping, never shown as a
header. Lengths are checked once, when the batch is made: a batch that exists
adds up.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Final

from laminar.client.errors import ProtocolViolationError
from laminar.client.results import Record, expect
from laminar.wire import FetchResponse, Flags, Frame, Op, ProtocolError, decode_user_record
from laminar.wire.fields import uint
from laminar.wire.records import locate_fetch_records

if TYPE_CHECKING:
    import pyarrow as pa

_KIND_MASK: Final = Flags.RESPONSE | Flags.ERROR


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
        value_starts: Sequence[int],
        *,
        next_index: int,
        simple: bool,
    ) -> None:
        """Records whose blobs are `payload[starts[i]:ends[i]]` and values
        `payload[value_starts[i]:ends[i]]`; `simple`: each blob is a bare
        value, perhaps stamped (no key, no headers to show)."""
        self.partition = partition
        """The partition (its number in the topic) the records come from."""
        self.next_index = next_index
        """Where the next fetch starts (see the module docstring)."""
        self.indexes = indexes
        self.timestamps_ms = timestamps_ms
        self._payload = payload
        self._starts = starts
        self._ends = ends
        self._bare = simple
        self._value_starts = value_starts

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
        try:
            located = locate_fetch_records(payload)
        except ProtocolError as exc:
            raise _bad(exc.message) from exc
        indexes = located.indexes.tolist()
        if indexes and next_index <= indexes[-1]:
            raise _bad(f"next_index {next_index} is not past the last record ({indexes[-1]})")
        return cls(
            partition,
            payload,
            indexes,
            located.timestamps_ms.tolist(),
            located.starts,
            located.ends,
            located.value_starts,
            next_index=next_index,
            simple=located.simple,
        )

    def __len__(self) -> int:
        return len(self.indexes)

    def values(self) -> list[memoryview]:
        """Every record's value as a memoryview into the answer's one buffer
        (no copies; `bytes(view)` when a copy is wanted). A null value (a
        Kafka tombstone) is an empty view here; iterating tells it (None)."""
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


def _bad(reason: str) -> ProtocolViolationError:
    return ProtocolViolationError(f"the node's fetch answer does not decode: {reason}")
