"""Structured Streaming: `spark.readStream.format("laminar")`, `df.writeStream.format("laminar")`.

Reading. An offset is the next index of every partition read (`laminar.spark.plan`),
so a micro-batch is the ranges `[start, end)` between two offsets. Spark
writes the end offset to the checkpoint before the micro-batch runs and marks
it committed after, and a restarted query starts from the last offset it
committed: the records after it are read once, none skipped, none repeated.
laminar keeps no consumer positions of its own (`commit` has nothing to
store), so the checkpoint is the only truth. `latestOffset` honours the read
limit Spark passes (`maxRecordsPerTrigger` becomes `ReadMaxRows`) and, under
`Trigger.AvailableNow`, stops at the indexes that were latest when the query
started. Records removed by retention before the query read them are an
error, not a silent skip.

Writing. Each micro-batch is one atomic write (`laminar.spark.writing`): its
tasks stage their rows, and the driver's `commit(messages, batchId)` commits
the successful attempts under `stream_commit_id(query id, batchId)`. A
restarted query that runs an unfinished micro-batch again commits under the
same id: if the first run had committed (the driver died before Spark
recorded it), the node answers "committed before" and nothing is appended
twice; if it had not, the first run's staged rows are never published.

Spark gives the batch id to `commit` (public API) but tells a writer nothing
about its query; the query id comes from the task property Spark sets for
streaming tasks (`sql.streaming.queryId`, an internal name, checked: a task
without it fails with an error saying so).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from laminar.client import Client, new_write_id
from laminar.spark.errors import LaminarSparkError
from laminar.spark.options import ReadOptions, WriteOptions
from laminar.spark.plan import (
    LOST_KEY,
    from_offset,
    interleave,
    limit_records,
    lost_of,
    split,
    to_offset,
    topics_from_offset,
    topics_to_offset,
)
from laminar.spark.reading import (
    TopicState,
    connect,
    ranges,
    read_split,
    splits,
    subscribed_topics,
)
from laminar.spark.schema import WriteColumns
from laminar.spark.writing import (
    ProducedTask,
    StagedTask,
    WriteTarget,
    abort_tasks,
    commit_tasks,
    stream_commit_id,
    write_task,
)

logger = logging.getLogger("laminar.spark")

QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""Spark's task property naming the streaming query (`StreamExecution.QUERY_ID_KEY`)."""


Positions = dict[str, dict[int, int]]
"""The next index to read of every partition of every topic."""


class LaminarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads topics as a stream (see the module docstring)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._client: Client | None = None
        self._topics: list[str] | None = None
        self._available_now: Positions | None = None
        self._states()  # unknown topic or partitions, unreachable node: fail at start

    def __getstate__(self) -> dict[str, Any]:
        # The reader is pickled to the tasks that run read(); a client is not.
        return {"options": self.options, "_client": None, "_topics": None, "_available_now": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _connected(self) -> Client:
        if self._client is None:
            self._client = connect(
                self.options.bootstrap, self.options.topic, self.options.security
            )
        return self._client

    def _states(self) -> dict[str, TopicState]:
        """Each topic's partitions and ranges now (topics of a pattern are
        resolved once, when the query starts)."""
        client = self._connected()
        if self._topics is None:
            self._topics = subscribed_topics(client, self.options)
        return {t: TopicState.fetch(client, self.options.for_topic(t)) for t in self._topics}

    def _offset(self, positions: Positions, lost: int) -> dict[str, Any]:
        if self.options.several_topics:
            return topics_to_offset(positions, lost)
        (only,) = positions.values()
        return to_offset(only, lost)

    def _positions(self, offset: dict[str, Any]) -> Positions:
        if self.options.several_topics:
            return topics_from_offset(offset)
        return {self.options.topic: from_offset(offset)}

    def initialOffset(self) -> dict[str, Any]:
        client = self._connected()
        positions = {
            name: state.starting(client, self.options.for_topic(name), "latest")
            for name, state in self._states().items()
        }
        return self._offset(positions, 0)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_records_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read up to what is there now, then stop."""
        self._available_now = {t: dict(s.highest) for t, s in self._states().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        states = self._states()
        lost = lost_of(start)
        begin: dict[tuple[str, int], int] = {}
        latest: dict[tuple[str, int], int] = {}
        for name, positions in self._checked_topics(self._positions(start), states).items():
            checked, skipped = self._checked(positions, states[name])
            lost += skipped
            for p, index in checked.items():
                begin[(name, p)] = index
                highest = states[name].highest[p]
                if self._available_now is not None:
                    highest = max(index, self._available_now[name][p])
                latest[(name, p)] = highest
        if isinstance(limit, ReadMaxRows):
            end = limit_records(begin, latest, limit.max_rows)
        elif isinstance(limit, ReadMinRows):
            backlog = sum(latest[k] - begin[k] for k in begin)
            end = latest if backlog >= limit.min_rows else begin
        else:
            end = dict(latest)
        out: Positions = {name: {} for name in states}
        for (name, p), index in end.items():
            out[name][p] = index
        return self._offset(out, lost)

    def reportLatestOffset(self) -> dict[str, Any]:
        return self._offset({t: dict(s.highest) for t, s in self._states().items()}, 0)

    def _checked_topics(self, begin: Positions, states: dict[str, TopicState]) -> Positions:
        if sorted(begin) != sorted(states):
            raise LaminarSparkError(
                f"the checkpoint reads topics {sorted(begin)} but the options choose "
                f"{sorted(states)}; use a new checkpointLocation to change them"
            )
        return begin

    def _checked(self, begin: dict[int, int], topic: TopicState) -> tuple[dict[int, int], int]:
        """`begin` checked against the topic now, and the records retention removed
        before the query read them (skipped, with failOnDataLoss=false)."""
        if sorted(begin) != sorted(topic.partitions):
            raise LaminarSparkError(
                f"the checkpoint reads partitions {sorted(begin)} of {topic.topic!r} but the "
                f"options choose {list(topic.partitions)}; use a new checkpointLocation to "
                "change them"
            )
        ahead = [p for p in begin if begin[p] > topic.highest[p]]
        if ahead:
            p = ahead[0]
            raise LaminarSparkError(
                f"the checkpoint has read {topic.topic}/{p} up to index {begin[p]}, but the "
                f"partition ends at {topic.highest[p]} (was the topic deleted and created "
                "again?); use a new checkpointLocation"
            )
        lost = {p: (begin[p], topic.lowest[p]) for p in begin if begin[p] < topic.lowest[p]}
        if not lost:
            return begin, 0
        if self.options.fail_on_data_loss:
            p, (want, lowest) = next(iter(sorted(lost.items())))
            raise LaminarSparkError(
                f"records {want}..{lowest - 1} of {topic.topic}/{p} were removed (retention) "
                "before this query read them (failOnDataLoss=false skips them)"
            )
        skipped = sum(lowest - want for want, lowest in lost.values())
        logger.warning(
            "failOnDataLoss=false: skipping %d records of %s that retention removed before "
            "this query read them (partitions %s); the offset's %r counts them",
            skipped,
            topic.topic,
            sorted(lost),
            LOST_KEY,
        )
        return {p: max(i, topic.lowest[p]) for p, i in begin.items()}, skipped

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = self._positions(start), self._positions(end)
        view = self._connected().cluster  # cached metadata: no request per micro-batch
        pieces = []
        shards: dict[tuple[str, int], int] = {}
        for name, ends in stop.items():
            owners = {p: view.route(name, p).shard_id for p in ends}
            shards.update({(name, p): s for p, s in owners.items()})
            topic = TopicState(name, tuple(sorted(ends)), {}, {}, owners)
            starts = begin.get(name, {})
            pieces += split(
                ranges(topic, {p: starts.get(p, i) for p, i in ends.items()}, ends, "end offset"),
                self.options.max_records_per_split,
            )
        pieces = interleave(pieces, lambda r: shards.get((r.topic, r.partition), 0))
        return splits(self.options, pieces)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_split(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to store: the query's checkpoint holds its position."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class LaminarStreamWriter(DataSourceStreamArrowWriter):
    """Appends each micro-batch to a topic, exactly once (module docstring)."""

    def __init__(self, options: WriteOptions, columns: WriteColumns, overwrite: bool) -> None:
        if overwrite:
            raise LaminarSparkError(
                'laminar topics are append-only: use outputMode("append") or "update"'
            )
        self.target = WriteTarget.check(options, columns)
        self.run_id = new_write_id()
        """Tasks of this run of the query stage under it."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedTask | ProducedTask:
        ctx = TaskContext.get()
        query_id = None if ctx is None else ctx.getLocalProperty(QUERY_ID_PROPERTY)
        if query_id is None and self.target.options.guarantee == "exactly-once":
            raise LaminarSparkError(
                "a laminar stream writer task sees no streaming query id (Spark's task property "
                f"{QUERY_ID_PROPERTY!r} is missing: has this Spark version renamed it?); "
                'exactly-once needs it. Use guarantee="at-least-once" to write without it.'
            )
        return write_task(self.target, iterator, self.run_id, query_id=query_id)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Commit the micro-batch once, under an id its re-runs share."""
        query_id = _query_id(messages)
        if query_id is None:
            return  # at-least-once, or no task ran
        commit_id = stream_commit_id(query_id, batchId)
        commit_tasks(self.target, commit_id, messages, f"laminar stream batch {batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Drop what the micro-batch staged; not for good, since the query may run
        the batch again under the same commit id."""
        query_id = _query_id(messages)
        if query_id is not None:
            commit_id = stream_commit_id(query_id, batchId)
            abort_tasks(self.target, commit_id, messages, final=False)


def _query_id(messages: list[WriterCommitMessage | None]) -> str | None:
    ids = {m.query_id for m in messages if isinstance(m, StagedTask) and m.query_id}
    if len(ids) > 1:
        raise LaminarSparkError(f"one micro-batch's tasks name several query ids: {sorted(ids)}")
    return next(iter(ids), None)
