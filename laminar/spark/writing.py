"""Writing: each Spark task attempt stages its rows; the driver commits the winners.

Why staging. Spark runs a failed task again and may run a slow one twice
(speculation), and a retried task may see its rows in another order (after
a shuffle, a join, a distinct). Only the driver's `commit()` knows which
attempts won: Spark hands it the commit message of exactly one successful
attempt per task. So a task appends nothing: it stages its rows on the
owning shard of each target partition (`laminar.client.writes.Stager`:
durable, invisible, keyed by write id, task and a random attempt id) and
reports what it staged (`StagedTask`); the driver commits exactly those
parts in one decision (`Client.commit_write`), and the node publishes each
record once, or nothing if the job fails. Staged data of losing or failed
attempts is dropped when the commit finishes or expires.

Ids. A batch write's write id, drawn on the driver, is also its commit id.
A streaming query stages under a write id drawn when the query starts, and
commits micro-batch `b` under `stream_commit_id(query id, b)`: a micro-batch
run again after a driver crash commits under the same id, so if its first
run had committed, the node answers "committed before" and publishes
nothing new.

Where rows go: the `partition` column when set; else the hash of the key
(`laminar.client.partition_for_key`, the client's rule); else round robin,
one record at a time. Each partition's records are sent in batches of up to
`maxBatchBytes`, one request in flight per partition, so a task pipelines
across partitions and shards while a partition's batches stay in order.

`guarantee="at-least-once"` skips staging: tasks append as they go (plain
produces), so a retried or speculative task appends its rows again
(duplicates, never a loss), and a failed job leaves what its tasks wrote.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from pyspark import TaskContext
from pyspark.sql.datasource import WriterCommitMessage

from laminar.client import (
    Client,
    CommitPendingError,
    ConnectionLostError,
    LaminarError,
    Produced,
    RequestTimeoutError,
    partition_for_key,
)
from laminar.client.writes import CommitResult
from laminar.spark.errors import LaminarSparkError, explain
from laminar.spark.options import WriteOptions
from laminar.spark.reading import connect, open_client
from laminar.spark.schema import WriteColumns
from laminar.wire.writes import StagedPart

BATCH_RECORDS_MAX: Final = 65536

logger = logging.getLogger("laminar.spark")


@dataclass(frozen=True, slots=True)
class WriteTarget:
    """A checked write: the options, the DataFrame's columns, the topic's size."""

    options: WriteOptions
    columns: WriteColumns
    partitions: int

    @classmethod
    def check(cls, options: WriteOptions, columns: WriteColumns) -> WriteTarget:
        """On the driver: the node answers and the topic exists."""
        with connect(options.bootstrap, options.topic, options.security) as client:
            try:
                topic = client.describe_topic(options.topic).topic
            except LaminarError as exc:
                raise explain(exc, options.bootstrap, options.topic) from None
        return cls(options, columns, topic.partitions)


@dataclass(frozen=True)
class StagedTask(WriterCommitMessage):
    """What one successful task attempt reports to the driver."""

    task: int
    spark_attempt: int
    parts: tuple[StagedPart, ...]
    """What it staged, per partition (empty for a task without rows)."""
    records: int
    query_id: str | None = None
    """A streaming task's query id (`stream_commit_id`)."""


@dataclass(frozen=True)
class ProducedTask(WriterCommitMessage):
    """What a task of an at-least-once write reports: records appended."""

    task: int
    records: int


def stream_commit_id(query_id: str, batch_id: int) -> int:
    """The commit id of a streaming micro-batch: the same every time it runs."""
    return int(xxhash.xxh64_intdigest(f"laminar-stream/{query_id}/{batch_id}".encode()))


def task_context() -> tuple[int, int]:
    """The running Spark task's partition id and attempt number."""
    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("not inside a Spark task")
    return int(ctx.partitionId()), int(ctx.attemptNumber())


class _Sink(Protocol):
    def send_nowait(
        self,
        topic: str,
        partition: int,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None,
        headers: Sequence[Mapping[str, bytes] | None] | None,
    ) -> None: ...


class _Producer:
    """The at-least-once sink: plain produces, one in flight per partition."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._in_flight: dict[int, Produced] = {}

    def send_nowait(
        self,
        topic: str,
        partition: int,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None,
        headers: Sequence[Mapping[str, bytes] | None] | None,
    ) -> None:
        previous = self._in_flight.pop(partition, None)
        if previous is not None:
            previous.result()
        self._in_flight[partition] = self.client.produce_nowait(
            topic, partition, values, keys, headers
        )

    def finish(self) -> None:
        for pending in self._in_flight.values():
            pending.result()
        self._in_flight.clear()


def write_task(
    target: WriteTarget,
    batches: Iterator[pa.RecordBatch],
    write_id: int,
    task: int | None = None,
    spark_attempt: int | None = None,
    query_id: str | None = None,
) -> StagedTask | ProducedTask:
    """Write one task's rows (see the module docstring); `task` and
    `spark_attempt` default to the running Spark task's."""
    if task is None or spark_attempt is None:
        task, spark_attempt = task_context()
    options = target.options
    with open_client(options.bootstrap, options.security) as client:
        if options.guarantee == "at-least-once":
            producer = _Producer(client)
            writer = TopicWriter(producer, target, round_robin_start=task)
            for batch in batches:
                writer.add(batch)
            writer.close()
            producer.finish()
            return ProducedTask(task, writer.records)
        stager = client.stager(write_id, task, timeout_s=options.staging_timeout_s)
        writer = TopicWriter(stager, target, round_robin_start=task)
        for batch in batches:
            writer.add(batch)
        writer.close()
        parts = stager.finish()
    return StagedTask(task, spark_attempt, parts, writer.records, query_id)


def commit_tasks(
    target: WriteTarget, commit_id: int, messages: Sequence[WriterCommitMessage | None], what: str
) -> CommitResult | None:
    """On the driver: commit the staged parts of the tasks in `messages` (one
    successful attempt per task), in task order. None when nothing was staged."""
    staged = sorted((m for m in messages if isinstance(m, StagedTask)), key=lambda m: m.task)
    if len({m.task for m in staged}) != len(staged):
        raise LaminarSparkError(f"{what}: Spark reported two successful attempts of one task")
    parts = [part for m in staged for part in m.parts]
    options = target.options
    if not parts:
        logger.info("%s to %s: no rows, nothing to commit", what, options.topic)
        return None
    with connect(options.bootstrap, options.topic, options.security) as client:
        try:
            result = client.commit_write(commit_id, parts)
        except LaminarError as exc:
            raise LaminarSparkError(
                f"{what} to {options.topic!r} could not commit: {exc}; {_outcome(exc, commit_id)}"
            ) from exc
    if result.first:
        logger.info(
            "%s to %s: committed %d records from %d tasks",
            what,
            options.topic,
            result.records,
            len(staged),
        )
    else:
        logger.warning(
            "%s to %s: it was committed before (a re-run); nothing was appended now",
            what,
            options.topic,
        )
    return result


def abort_tasks(
    target: WriteTarget,
    commit_id: int,
    messages: Sequence[WriterCommitMessage | None],
    *,
    final: bool,
) -> None:
    """On the driver: abort (for good when `final`) and drop what the tasks staged."""
    topic = target.options.topic
    if target.options.guarantee == "at-least-once":
        logger.warning("laminar write to %s failed; what its tasks appended stays", topic)
        return
    parts = [p for m in messages if isinstance(m, StagedTask) for p in m.parts]
    try:
        with connect(target.options.bootstrap, topic, target.options.security) as client:
            state = client.abort_write(commit_id, parts, final=final)
    except (LaminarError, LaminarSparkError) as exc:
        logger.warning("aborting the write to %s failed (staged rows expire): %s", topic, exc)
        return
    logger.warning("laminar write to %s aborted (%s): nothing of it is visible", topic, state)


def _outcome(exc: LaminarError, commit_id: int) -> str:
    """What a failed commit left visible (the node's message says why it failed)."""
    if isinstance(exc, CommitPendingError):
        return "it is committed: the node publishes every row once as soon as it can"
    if isinstance(exc, ConnectionLostError | RequestTimeoutError):
        return (
            f"its outcome is unknown: Client.write_status({commit_id:#x}) says whether it committed"
        )
    return "nothing of it is visible"


class TopicWriter:
    """Routes Arrow rows to the partitions of one topic and sends them in batches."""

    def __init__(self, sink: _Sink, target: WriteTarget, round_robin_start: int = 0) -> None:
        self.sink = sink
        self.target = target
        self.topic = target.options.topic
        self.max_bytes = target.options.max_batch_bytes
        has_keys, has_headers = target.columns.key is not None, target.columns.headers is not None
        self._buffers = [_Buffer(has_keys, has_headers) for _ in range(target.partitions)]
        self._round_robin = round_robin_start
        self.records = 0

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
        """Send what is buffered (the sink waits for the answers)."""
        for p, buf in enumerate(self._buffers):
            if buf.values:
                self._send(p)

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
        self.sink.send_nowait(self.topic, p, buf.values, buf.keys, buf.headers)
        self.records += len(buf.values)
        buf.values, buf.bytes = [], 0
        if buf.keys is not None:
            buf.keys = []
        if buf.headers is not None:
            buf.headers = []


class _Buffer:
    """Records waiting to be sent to one partition."""

    __slots__ = ("bytes", "headers", "keys", "values")

    def __init__(self, keys: bool, headers: bool) -> None:
        self.values: list[bytes] = []
        # Lists only when the DataFrame has the column: value-only records take
        # the client's fast path (no per-record encoding call).
        self.keys: list[bytes | None] | None = [] if keys else None
        self.headers: list[dict[str, bytes] | None] | None = [] if headers else None
        self.bytes = 0


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
