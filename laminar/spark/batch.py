"""Batch read and batch write: `spark.read.format("laminar")`, `df.write.format("laminar")`.

The reader plans on the driver (everything that can be wrong with the options,
the node or the topic is raised there, before any task starts) and hands each
task a `RangeSplit`. The writer checks the DataFrame and the topic on the
driver too; its tasks produce idempotently (`laminar.spark.writing`), so a
task Spark runs again does not append its records twice.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

from laminar.spark.errors import LaminarSparkError
from laminar.spark.options import ReadOptions, WriteOptions
from laminar.spark.plan import interleave, split
from laminar.spark.reading import TopicState, connect, ranges, read_split, splits
from laminar.spark.schema import WriteColumns
from laminar.spark.writing import WriteTarget, WrittenCounts, batch_producer_id, write_task

logger = logging.getLogger("laminar.spark")


class LaminarBatchReader(DataSourceReader):
    """Reads `[startingIndex, endingIndex)` of each chosen partition."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        with connect(options.bootstrap, options.topic) as client:
            topic = TopicState.fetch(client, options)
            start = topic.starting(client, options, "earliest")
        end = topic.ending(options)
        pieces = split(ranges(topic, start, end), options.max_records_per_split)
        pieces = interleave(pieces, topic.shards)
        self._splits = splits(options.bootstrap, options.topic, pieces)

    def partitions(self) -> Sequence[InputPartition]:
        return self._splits

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_split(partition)


class LaminarBatchWriter(DataSourceArrowWriter):
    """Appends a DataFrame to a topic. Every task is an idempotent producer
    whose id comes from this write's random id and the task's partition, both
    the same in every attempt of the task."""

    def __init__(self, options: WriteOptions, columns: WriteColumns, overwrite: bool) -> None:
        if overwrite:
            raise LaminarSparkError(
                'laminar topics are append-only: use .mode("append"), not "overwrite"'
            )
        self.target = WriteTarget.check(options, columns)
        self.write_id = secrets.randbits(64)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenCounts:
        return write_task(
            self.target, iterator, lambda part: batch_producer_id(self.write_id, part)
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to do: each task's records were durable when it finished."""
        done = [m for m in messages if isinstance(m, WrittenCounts)]
        logger.info(
            "laminar write to %s: %d records (%d of them appended by earlier attempts)",
            self.target.options.topic,
            sum(m.records for m in done),
            sum(m.already_there for m in done),
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """A failed job leaves the records its finished tasks appended (a topic
        has no transactions); running the same job again appends them again."""
        logger.warning(
            "laminar write to %s failed; records of finished tasks stay in the topic",
            self.target.options.topic,
        )
