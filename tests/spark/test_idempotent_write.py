"""A write task that runs again does not append its records twice: first by
running the same task's logic twice, then with a real Spark task failure."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install 'pyspark[sql]==4.3.0'")

import pyarrow as pa

from laminar.client import Client
from laminar.spark.options import WriteOptions
from laminar.spark.schema import WriteColumns
from laminar.spark.writing import WriteTarget, batch_producer_id, write_task
from tests.spark.helpers import all_records, fresh_topic
from tests.system.nodes import RunningNode


def _batches(n: int, per_batch: int) -> list[pa.RecordBatch]:
    return [
        pa.record_batch(
            [pa.array([b"row-%05d" % i for i in range(start, min(start + per_batch, n))])],
            names=["value"],
        )
        for start in range(0, n, per_batch)
    ]


def _values(client: Client, topic: str, partitions: int) -> list[bytes]:
    return sorted(r.value for p in range(partitions) for r in all_records(client, topic, p))


def test_the_same_write_task_run_twice_appends_once(node: RunningNode, client: Client) -> None:
    topic = fresh_topic(client, "twice", 3)
    # Small batches, so each partition gets more batches than the node remembers
    # exactly: resends are answered both ways (original index, or "already there").
    target = WriteTarget.check(WriteOptions(node.bootstrap, topic, 400), WriteColumns("value"))
    batches = _batches(2000, 300)

    def attempt(rows: Iterator[pa.RecordBatch]) -> Any:
        return write_task(target, rows, lambda part: batch_producer_id(42, part), task=5)

    def dies_after(count: int) -> Iterator[pa.RecordBatch]:
        yield from batches[:count]
        raise RuntimeError("the task's input failed")

    # A first attempt dies a third of the way in, after appending some batches...
    with pytest.raises(RuntimeError, match="input failed"):
        attempt(dies_after(2))
    partial = len(_values(client, topic, 3))
    assert 0 < partial < 2000
    # ...and Spark runs the task again from the start, then a third time.
    first = attempt(iter(batches))
    again = attempt(iter(batches))
    expected = sorted(b"row-%05d" % i for i in range(2000))
    assert _values(client, topic, 3) == expected
    assert first.records == again.records == 2000
    # The third attempt resends more batches per partition than the node keeps
    # exactly: the older ones are answered "already there", the rest with their index.
    assert again.already_there > 0
    # Another task (another producer) writing the same rows appends them again.
    write_task(target, iter(batches), lambda part: batch_producer_id(42, part), task=6)
    assert len(_values(client, topic, 3)) == 4000


def test_a_failed_spark_task_is_retried_without_duplicates(
    spark: Any, node: RunningNode, client: Client, tmp_path: Path
) -> None:
    topic = fresh_topic(client, "retried", 2)
    bootstrap = node.bootstrap
    witness = tmp_path / "failed-after"
    rows = 4000

    def fail_once_after_a_partial_write(batches: Iterator[pa.RecordBatch]) -> Iterator[Any]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        for i, batch in enumerate(batches):
            yield batch
            if ctx.partitionId() == 0 and ctx.attemptNumber() == 0 and i == 1:
                with Client(bootstrap) as c:  # wait until the writer has appended some
                    deadline = time.monotonic() + 30
                    written = 0
                    while written == 0 and time.monotonic() < deadline:
                        written = sum(c.offsets(topic, p).highest for p in range(2))
                        time.sleep(0.02)
                witness.write_text(str(written))
                raise RuntimeError("injected failure after a partial write")

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "200")
    try:
        df = (
            spark.range(0, rows, 1, 2)
            .selectExpr("CAST(format_string('row-%05d', id) AS BINARY) AS value")
            .mapInArrow(fail_once_after_a_partial_write, "value BINARY")
        )
        df.write.format("laminar").option("bootstrap", bootstrap).option("topic", topic).option(
            "maxBatchBytes", 1000
        ).mode("append").save()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert int(witness.read_text()) > 0, "the failed attempt appended records first"
    assert _values(client, topic, 2) == sorted(b"row-%05d" % i for i in range(rows))
