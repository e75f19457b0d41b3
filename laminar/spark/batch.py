"""Batch read and batch write: `spark.read.format("laminar")`, `df.write.format("laminar")`.

The reader plans on the driver (everything that can be wrong with the options,
the node or the topic is raised there, before any task starts) and hands each
task a `RangeSplit`. The writer checks the DataFrame and the topic on the
driver too; its tasks stage their rows and the driver's `commit()` commits
exactly the successful attempts, atomically (`laminar.spark.writing`): every
row once, or nothing if the job fails.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

from laminar.client import new_write_id
from laminar.spark.errors import LaminarSparkError
from laminar.spark.options import ReadOptions, WriteOptions
from laminar.spark.plan import interleave, split
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
    write_task,
)


class LaminarBatchReader(DataSourceReader):
    """Reads `[startingIndex, endingIndex)` of each chosen partition of each topic."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        pieces = []
        shards: dict[tuple[str, int], int] = {}
        with connect(options.bootstrap, options.topic, options.security) as client:
            for name in subscribed_topics(client, options):
                one = options.for_topic(name)
                topic = TopicState.fetch(client, one)
                start = topic.starting(client, one, "earliest")
                end = topic.ending(client, one)
                pieces += split(ranges(topic, start, end), options.max_records_per_split)
                shards.update({(name, p): s for p, s in topic.shards.items()})
        pieces = interleave(pieces, lambda r: shards.get((r.topic, r.partition), 0))
        self._splits = splits(options, pieces)

    def partitions(self) -> Sequence[InputPartition]:
        return self._splits

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_split(partition)


class LaminarBatchWriter(DataSourceArrowWriter):
    """Appends a DataFrame to a topic, exactly once and atomically (or, with
    guarantee="at-least-once", as tasks go)."""

    def __init__(self, options: WriteOptions, columns: WriteColumns, overwrite: bool) -> None:
        if overwrite:
            raise LaminarSparkError(
                'laminar topics are append-only: use .mode("append"), not "overwrite"'
            )
        self.target = WriteTarget.check(options, columns)
        self.write_id = new_write_id()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedTask | ProducedTask:
        return write_task(self.target, iterator, self.write_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Publish exactly the successful attempts' rows, once (the winners Spark
        names here; losers' staged rows are dropped)."""
        commit_tasks(self.target, self.write_id, messages, "laminar write")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """The job failed: nothing of it becomes visible (an at-least-once write
        keeps what its tasks appended)."""
        abort_tasks(self.target, self.write_id, messages, final=True)
