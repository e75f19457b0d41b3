"""A Spark driver that dies at a chosen point of a streaming write (for crash tests).

    python -m tests.spark.stream_driver --bootstrap H:P --source IN --target OUT \\
        --checkpoint DIR --crash before-commit|after-commit

Runs `readStream(laminar IN) -> writeStream(OUT)` with `Trigger.AvailableNow`
through the format "laminar_crashing": the laminar sink, except that its
driver-side `commit` SIGKILLs the driver's whole process group (this Python
process, the JVM, its Python workers) at the first micro-batch:

- before-commit: after every task has staged its rows, before the commit is
  sent (the driver dies between the task writes and the commit);
- after-commit: once the node has committed the micro-batch, before Spark
  records that it did (the driver dies between the commit and its answer
  reaching Spark's commit log).

The test runs it in a session of its own (`start_new_session`), so the kill
takes exactly this driver; then it runs the same query again from the
checkpoint.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from laminar.spark.options import write_options
from laminar.spark.schema import write_columns
from laminar.spark.source import LaminarDataSource
from laminar.spark.stream import LaminarStreamWriter

CRASH_OPTION = "crashAt"


def _die() -> None:
    """SIGKILL the driver: the process group that leads this session (the test
    started the driver with a session of its own). Spark's Python workers sit
    in a group of their own; this one then exits too."""
    os.killpg(os.getsid(0), signal.SIGKILL)
    os._exit(1)


class CrashingStreamWriter(LaminarStreamWriter):
    """The laminar stream writer, dying at `crash_at` (module docstring)."""

    def __init__(self, crash_at: str, *args: Any) -> None:
        super().__init__(*args)
        self.crash_at = crash_at

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.crash_at == "before-commit":
            _die()
        super().commit(messages, batchId)
        if self.crash_at == "after-commit":
            _die()


class CrashingLaminar(LaminarDataSource):
    @classmethod
    def name(cls) -> str:
        return "laminar_crashing"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = {k: v for k, v in self.options.items() if k.lower() != CRASH_OPTION.lower()}
        crash_at = self.options[CRASH_OPTION]
        return CrashingStreamWriter(
            crash_at, write_options(options), write_columns(schema), overwrite
        )


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--crash", choices=("before-commit", "after-commit"), required=True)
    p.add_argument("--local-dir", required=True)
    args = p.parse_args()
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.local.dir", args.local_dir)
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(LaminarDataSource)
    spark.dataSource.register(CrashingLaminar)
    query = (
        spark.readStream.format("laminar")
        .option("bootstrap", args.bootstrap)
        .option("topic", args.source)
        .option("startingIndex", "earliest")
        .load()
        .writeStream.format("laminar_crashing")
        .option("bootstrap", args.bootstrap)
        .option("topic", args.target)
        .option(CRASH_OPTION, args.crash)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return 3  # the driver was meant to die before it got here


if __name__ == "__main__":
    sys.exit(main())
