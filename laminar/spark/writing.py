"""Writing: a Spark task appends its rows to a topic as an idempotent producer.

Why idempotent. Spark runs a failed task again (and may run a slow one
twice), and the first attempt may have appended some of its records before
it died; `commit()` on the driver runs only after every task has written. So
each task is an idempotent producer (`laminar.shards.idempotence`): its
producer id is derived from something every attempt of the task shares (a
batch write's random id drawn on the driver, or a streaming query's id and
micro-batch id, plus the task's partition id), and it numbers the records it
sends to each partition 0, 1, 2, ... An attempt that repeats what an earlier
one appended gets "already appended" answers and appends nothing; once past
that point it appends the rest. For this the records, their partitions and
their batching must be the same in every attempt: they are functions of the
task's input rows and their order (round robin starts from the task's
partition id, batches are cut by a byte budget), which Spark recomputes the
same way for a deterministic plan.

Where rows go: the `partition` column when set; else the hash of the key
(`laminar.client.partition_for_key`, the client's rule); else round robin,
one record at a time. Each partition's records are sent in batches of up to
`maxBatchBytes`, one request in flight per partition, so a task pipelines
across partitions and shards while a partition's batches stay in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from pyspark import TaskContext
from pyspark.sql.datasource import WriterCommitMessage

from laminar.client import Client, DuplicateSequenceError, LaminarError, Pending, partition_for_key
from laminar.spark.errors import LaminarSparkError, explain
from laminar.spark.options import WriteOptions
from laminar.spark.reading import CONNECT_TIMEOUT_S, connect
from laminar.spark.schema import WriteColumns

BATCH_RECORDS_MAX: Final = 65536


@dataclass(frozen=True, slots=True)
class WriteTarget:
    """A checked write: the options, the DataFrame's columns, the topic's size."""

    options: WriteOptions
    columns: WriteColumns
    partitions: int

    @classmethod
    def check(cls, options: WriteOptions, columns: WriteColumns) -> WriteTarget:
        """On the driver: the node answers and the topic exists."""
        with connect(options.bootstrap, options.topic) as client:
            try:
                topic = client.describe_topic(options.topic).topic
            except LaminarError as exc:
                raise explain(exc, options.bootstrap, options.topic) from None
        return cls(options, columns, topic.partitions)


@dataclass(frozen=True)
class WrittenCounts(WriterCommitMessage):
    """What one task reports to the driver."""

    task: int
    producer_id: int
    records: int
    """Records of the task's input, all durable in the topic now."""
    already_there: int
    """Of those, records the node answered had been appended by an earlier attempt
    (and whose index it no longer remembered)."""


def batch_producer_id(write_id: int, task_partition: int) -> int:
    """The producer id of a batch write's task: the same in every attempt."""
    return int(xxhash.xxh64_intdigest(f"batch/{write_id}/{task_partition}".encode()))


def stream_producer_id(query_id: str, batch_id: int, task_partition: int) -> int:
    """The producer id of a streaming write's task: the same in every attempt and
    when a restarted query runs the micro-batch again."""
    return int(xxhash.xxh64_intdigest(f"stream/{query_id}/{batch_id}/{task_partition}".encode()))


def task_partition() -> int:
    """The Spark partition id of the running task."""
    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("not inside a Spark task")
    return int(ctx.partitionId())


def write_task(
    target: WriteTarget,
    batches: Iterator[pa.RecordBatch],
    producer_id_of: Callable[[int], int],
    task: int | None = None,
) -> WrittenCounts:
    """Write one task's rows (see the module docstring); `task` defaults to the
    running Spark task's partition id."""
    task = task_partition() if task is None else task
    producer_id = producer_id_of(task)
    options = target.options
    with Client(options.bootstrap, connect_timeout_s=CONNECT_TIMEOUT_S) as client:
        producer = TopicProducer(client, target, producer_id, round_robin_start=task)
        for batch in batches:
            producer.add(batch)
        producer.close()
    return WrittenCounts(task, producer_id, producer.records, producer.already_there)


class _Buffer:
    """Records waiting to be sent to one partition, and its producer state."""

    __slots__ = ("bytes", "headers", "in_flight", "keys", "next_sequence", "values")

    def __init__(self, keys: bool, headers: bool) -> None:
        self.values: list[bytes] = []
        # Lists only when the DataFrame has the column: value-only records take
        # the client's fast path (no per-record encoding call).
        self.keys: list[bytes | None] | None = [] if keys else None
        self.headers: list[dict[str, bytes] | None] | None = [] if headers else None
        self.bytes = 0
        self.next_sequence = 0
        self.in_flight: tuple[Pending[int], int] | None = None


class TopicProducer:
    """An idempotent producer of Arrow rows to every partition of one topic."""

    def __init__(
        self, client: Client, target: WriteTarget, producer_id: int, round_robin_start: int = 0
    ) -> None:
        self.client = client
        self.target = target
        self.topic = target.options.topic
        self.producer_id = producer_id
        self.max_bytes = target.options.max_batch_bytes
        has_keys, has_headers = target.columns.key is not None, target.columns.headers is not None
        self._buffers = [_Buffer(has_keys, has_headers) for _ in range(target.partitions)]
        self._round_robin = round_robin_start
        self.records = 0
        self.already_there = 0

    def add(self, batch: pa.RecordBatch) -> None:
        """Route a batch's rows to their partitions; send full buffers."""
        if batch.num_rows == 0:
            return
        columns = self.target.columns
        values = _binary(batch, columns.value)
        if values.null_count:
            raise LaminarSparkError("the `value` column has nulls; every record needs a value")
        keys = None if columns.key is None else _binary(batch, columns.key)
        headers = None if columns.headers is None else _headers(batch, columns.headers)
        parts = self._assign(batch, keys)
        lengths = pc.binary_length(values).to_numpy().astype(np.int64)
        for p in np.unique(parts).tolist():
            rows = np.flatnonzero(parts == p)
            take = pa.array(rows)
            self._append(
                p,
                values.take(take).to_pylist(),
                None if keys is None else keys.take(take).to_pylist(),
                None if headers is None else [headers[i] for i in rows.tolist()],
                lengths[rows],
            )

    def close(self) -> None:
        """Send what is buffered and wait until every batch is answered."""
        for p, buf in enumerate(self._buffers):
            if buf.values:
                self._send(p)
        for buf in self._buffers:
            self._settle(buf)

    def _assign(self, batch: pa.RecordBatch, keys: pa.Array | None) -> np.ndarray[Any, Any]:
        n = batch.num_rows
        count = len(self._buffers)
        parts = np.full(n, -1, np.int64)
        if self.target.columns.partition is not None:
            column = batch.column(batch.schema.get_field_index(self.target.columns.partition))
            given = column.to_numpy(zero_copy_only=False)
            valid = ~np.asarray(column.is_null())
            parts[valid] = given[valid]
            bad = valid & ((parts < 0) | (parts >= count))
            if bad.any():
                raise LaminarSparkError(
                    f"a row names partition {int(parts[bad][0])}, but topic {self.topic!r} has "
                    f"partitions 0..{count - 1}"
                )
        if keys is not None and keys.null_count < n:
            key_list = keys.to_pylist()
            for i in np.flatnonzero(parts < 0).tolist():
                key = key_list[i]
                if key is not None:
                    parts[i] = partition_for_key(key, count)
        rest = np.flatnonzero(parts < 0)
        if len(rest):
            parts[rest] = (self._round_robin + np.arange(len(rest))) % count
            self._round_robin += len(rest)
        return parts

    def _append(
        self,
        p: int,
        values: list[bytes],
        keys: list[bytes | None] | None,
        headers: list[dict[str, bytes] | None] | None,
        lengths: np.ndarray[Any, Any],
    ) -> None:
        """Add rows to partition `p`'s buffer, sending it each time it is full:
        batches are cut at the same rows whatever the Arrow batch boundaries."""
        buf = self._buffers[p]
        done = 0
        total = len(values)
        sizes = np.cumsum(lengths)
        while done < total:
            room = self.max_bytes - buf.bytes
            base = int(sizes[done - 1]) if done else 0
            fit = int(np.searchsorted(sizes, base + room, side="right")) - done
            fit = min(fit, BATCH_RECORDS_MAX - len(buf.values), total - done)
            if fit <= 0 and not buf.values:
                fit = 1  # a record larger than the budget goes alone
            if fit > 0:
                end = done + fit
                buf.values += values[done:end]
                if buf.keys is not None and keys is not None:
                    buf.keys += keys[done:end]
                if buf.headers is not None and headers is not None:
                    buf.headers += headers[done:end]
                buf.bytes += int(sizes[end - 1]) - base
                done = end
            if buf.bytes >= self.max_bytes or len(buf.values) >= BATCH_RECORDS_MAX or fit <= 0:
                self._send(p)

    def _send(self, p: int) -> None:
        buf = self._buffers[p]
        self._settle(buf)  # one batch in flight per partition keeps them in order
        pending = self.client.produce_nowait(
            self.topic,
            p,
            buf.values,
            buf.keys,
            buf.headers,
            producer_id=self.producer_id,
            sequence=buf.next_sequence,
        )
        count = len(buf.values)
        buf.in_flight = (pending, count)
        buf.next_sequence += count
        buf.values, buf.bytes = [], 0
        if buf.keys is not None:
            buf.keys = []
        if buf.headers is not None:
            buf.headers = []

    def _settle(self, buf: _Buffer) -> None:
        if buf.in_flight is None:
            return
        pending, count = buf.in_flight
        buf.in_flight = None
        try:
            pending.result()
        except DuplicateSequenceError:
            self.already_there += count
        self.records += count


def _binary(batch: pa.RecordBatch, name: str) -> pa.Array:
    column = batch.column(batch.schema.get_field_index(name))
    if column.type != pa.binary():
        column = pc.cast(column, pa.binary())
    return column


def _headers(batch: pa.RecordBatch, name: str) -> list[dict[str, bytes] | None]:
    column = batch.column(batch.schema.get_field_index(name))
    out: list[dict[str, bytes] | None] = []
    for items in column.to_pylist():
        if not items:
            out.append(None)
            continue
        out.append({k: v.encode() if isinstance(v, str) else v for k, v in items if v is not None})
    return out
