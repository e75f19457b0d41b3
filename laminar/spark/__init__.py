"""The `laminar` data source for PySpark: topics as DataFrames, batch and streaming.

    from laminar.spark import LaminarDataSource
    spark.dataSource.register(LaminarDataSource)    # or laminar.spark.register(spark)

    df = (spark.read.format("laminar")
          .option("bootstrap", "127.0.0.1:7070").option("topic", "events").load())
    df.selectExpr("CAST(value AS STRING)").show()

    (df.write.format("laminar").option("topic", "copy").mode("append").save())

    q = (spark.readStream.format("laminar").option("topic", "events")
         .option("startingIndex", "earliest").load()
         .writeStream.format("laminar").option("topic", "copy")
         .option("checkpointLocation", "/tmp/ckpt").trigger(availableNow=True).start())

Importing this package registers the source with the active SparkSession, if
there is one. Layers, each its own module: `options` (what the user may say),
`schema` (the columns), `plan` (ranges, splits, offsets, read limits; no I/O),
`reading` (the driver's view of a topic; a task's shard-direct fetch loop of
`Client.fetch_batch`, each answer converted to Arrow in bulk by
`laminar.client.arrow`), `writing` (a
task as an idempotent producer), `batch` and `stream` (the Spark reader and
writer classes), `source` (`LaminarDataSource`), `errors`.

Guarantees. Reads see exactly the records between their start and end
indexes; a streaming query resumed from its checkpoint reads every record
after its last committed offset once. Writes are idempotent per task: Spark's
retries of a task, and a restarted streaming query's rerun of an unfinished
micro-batch, do not append records twice (within the limits of
`laminar.shards.idempotence`). A batch job that fails keeps the records its
finished tasks wrote; topics have no transactions.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from laminar.spark.errors import LaminarSparkError
from laminar.spark.source import LaminarDataSource


def register(spark: SparkSession | None = None) -> None:
    """Register `format("laminar")` with `spark` (default: the active session)."""
    session = spark or SparkSession.getActiveSession()
    if session is None:
        raise RuntimeError("no active SparkSession: pass one, or create it first")
    session.dataSource.register(LaminarDataSource)


if SparkSession.getActiveSession() is not None:
    register()

__all__ = ["LaminarDataSource", "LaminarSparkError", "register"]
