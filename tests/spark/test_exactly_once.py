"""Batch writes are exactly once and atomic, whatever Spark's retries do.

Every check is by identity: each row carries a unique id, and the topic must
hold each id exactly once (`tests.delivery`). The node is this module's own,
so its staging gauges show only these tests' staged data.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install 'pyspark[sql]==4.3.0'")

import pyarrow as pa

from laminar.client import Client, new_write_id
from laminar.spark.errors import LaminarSparkError
from laminar.spark.options import WriteOptions
from laminar.spark.schema import WriteColumns
from laminar.spark.writing import WriteTarget, commit_tasks, write_task
from tests.delivery import assert_exactly_once
from tests.spark.helpers import fresh_topic, metric, row_ids
from tests.support import wait_until
from tests.system.nodes import RunningNode, start_node

STAGING_TIMEOUT_MS = 60_000
"""A finished task's staged rows wait for the commit this long (a retried task
and the commit's Python worker start slowly on a busy machine). Losers are
dropped when the commit finishes, not by expiry."""


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningNode]:
    with start_node(tmp_path_factory.mktemp("exactly-once"), cores=2) as running:
        yield running


@pytest.fixture(scope="module")
def client(node: RunningNode) -> Iterator[Client]:
    with Client(node.bootstrap) as c:
        yield c


def _rows(ids: list[int]) -> pa.RecordBatch:
    return pa.record_batch([pa.array([b"row-%05d" % i for i in ids])], names=["value"])


def _staging_metrics(node: RunningNode) -> str:
    names = ("attempts", "batches_total", "dropped_total", "expired_total")
    return "; " + ", ".join(f"{n}={metric(node, 'laminar_staged_' + n)}" for n in names)


def _losers_dropped(node: RunningNode, dropped_before: float) -> None:
    """The failed attempt's staged rows were dropped when the commit finished
    (never published), and nothing else is left staged."""
    wait_until(
        lambda: metric(node, "laminar_staged_dropped_total") > dropped_before,
        lambda: "the losing attempt's rows to be dropped" + _staging_metrics(node),
    )
    _nothing_staged(node)


def _nothing_staged(node: RunningNode) -> None:
    wait_until(lambda: metric(node, "laminar_staged_attempts") == 0, "staged data to be dropped")


def test_a_task_retried_with_its_rows_in_another_order_writes_each_row_once(
    node: RunningNode, client: Client
) -> None:
    """The issue's reproduction: an attempt dies after sending 30 of its 100
    rows; the retry sends the same 100 rows in another order."""
    topic = fresh_topic(client, "reordered", 3)
    options = WriteOptions(node.bootstrap, topic, 40, staging_timeout_s=STAGING_TIMEOUT_MS / 1000)
    target = WriteTarget.check(options, WriteColumns("value"))
    ids = list(range(100))
    write_id = new_write_id()

    def dies_after_30() -> Iterator[pa.RecordBatch]:
        yield _rows(ids[:30])
        raise RuntimeError("the task died")

    with pytest.raises(RuntimeError, match="died"):
        write_task(target, dies_after_30(), write_id, task=5, spark_attempt=0)
    assert metric(node, "laminar_staged_attempts") >= 1, "the first attempt staged rows"
    shuffled = ids[:]
    random.Random(7).shuffle(shuffled)
    winner = write_task(target, iter([_rows(shuffled)]), write_id, task=5, spark_attempt=1)
    assert row_ids(client, topic, 3) == [], "nothing is visible before the commit"
    result = commit_tasks(target, write_id, [winner], "test write")
    assert result is not None and result.first
    assert_exactly_once(row_ids(client, topic, 3), ids)
    again = commit_tasks(target, write_id, [winner], "test write")  # a commit sent again
    assert again is not None and not again.first and again.published == result.published
    _nothing_staged(node)  # the dead attempt's rows were dropped, never published
    assert_exactly_once(row_ids(client, topic, 3), ids)


def _spark_write(df: Any, node: RunningNode, topic: str, **options: object) -> None:
    writer = df.write.format("laminar").option("bootstrap", node.bootstrap).option("topic", topic)
    for name, value in options.items():
        writer = writer.option(name, str(value))
    writer.mode("append").save()


def _shuffled_rows(spark: Any, rows: int, udf: Any) -> Any:
    """`rows` rows with unique ids, through a shuffle (`repartition` by a key),
    then through `udf` (a mapInArrow function), as a `value` column. Values are
    padded to 600 bytes: a Python worker flushes its output every 64 KiB, and
    the failing attempts must hand rows on before they fail."""
    return (
        spark.range(0, rows, 1, 4)
        .selectExpr("id", "id % 7 AS bucket")
        .repartition(3, "bucket")
        .selectExpr("CAST(format_string('row-%05d-', id) || repeat('x', 590) AS BINARY) AS value")
        .mapInArrow(udf, "value BINARY")
    )


def _fail_first_attempt(admin_url: str, witness: Path, task: int, after_batches: int) -> Any:
    """A mapInArrow function: attempt 0 of `task` passes `after_batches` batches,
    waits until the node has staged batches of it, and fails.
    Other tasks start only after that failure, so what was staged until then is
    the failing attempt's. (Rows reach the writer through buffers of several
    hundred KiB: the attempt must pass that much before its rows are staged.)"""

    def udf(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import urllib.request

        from pyspark import TaskContext

        def staged_batches() -> float:
            with urllib.request.urlopen(admin_url + "/metrics") as reply:
                lines = reply.read().decode().splitlines()
            prefix = "laminar_staged_batches_total{"
            return sum(float(ln.split()[-1]) for ln in lines if ln.startswith(prefix))

        def fail(before: float) -> None:
            deadline = time.monotonic() + 30
            while staged_batches() == before and time.monotonic() < deadline:
                time.sleep(0.2)  # the writer stages what it was handed so far
            witness.write_text("failed")
            raise RuntimeError("injected failure of the first attempt")

        ctx = TaskContext.get()
        assert ctx is not None
        first = ctx.partitionId() == task and ctx.attemptNumber() == 0
        before = staged_batches() if first else 0.0
        if not first:
            deadline = time.monotonic() + 60
            while not witness.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        for i, batch in enumerate(batches):
            yield batch
            if first and i + 1 == after_batches:
                fail(before)

    return udf


def test_a_retry_after_a_shuffle_writes_each_row_once(
    spark: Any, node: RunningNode, client: Client, tmp_path: Path
) -> None:
    """A repartition write whose task 0 fails on attempt 0 after staging some
    rows; Spark retries it (spark.task.maxFailures) and the shuffle may hand
    the retry its rows in another order. (Speculation, the other way two
    attempts of a task both stage rows, cannot run here: Spark starts it only
    outside local mode, and never on the host of the running attempt, the only
    host a one-machine cluster has; tests/system/test_atomic_writes.py races
    two attempts of one task at the protocol level instead.)"""
    topic = fresh_topic(client, "shuffled", 4)
    rows = 6000
    witness = tmp_path / "failed-attempt"
    udf = _fail_first_attempt(node.admin_url, witness, task=0, after_batches=12)
    dropped_before = metric(node, "laminar_staged_dropped_total")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        _spark_write(
            _shuffled_rows(spark, rows, udf),
            node,
            topic,
            maxBatchBytes=20000,
            stagingTimeoutMs=STAGING_TIMEOUT_MS,
        )
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert witness.read_text() == "failed", "attempt 0 failed after staging"
    assert_exactly_once(row_ids(client, topic, 4), range(rows))
    _losers_dropped(node, dropped_before)
    assert_exactly_once(row_ids(client, topic, 4), range(rows))


def test_a_failed_job_leaves_nothing_visible_before_or_after_expiry(
    spark: Any, node: RunningNode, client: Client
) -> None:
    """The abort drops what the job staged; nothing is visible then, nor once the
    staging timeout has passed."""
    topic = fresh_topic(client, "failed", 3)
    timeout_ms = 3000

    def task_2_always_fails(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        for i, batch in enumerate(batches):
            yield batch
            if ctx.partitionId() == 2 and i == 3:
                time.sleep(0.5)  # other tasks finish and stage meanwhile
                raise RuntimeError("injected failure, every attempt")

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        df = _shuffled_rows(spark, 3000, task_2_always_fails)
        with pytest.raises(Exception, match="injected failure"):
            _spark_write(df, node, topic, maxBatchBytes=20000, stagingTimeoutMs=timeout_ms)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert row_ids(client, topic, 3) == [], "a failed job leaves no row visible"
    _nothing_staged(node)
    # A witness staged now with the same timeout expires: the timeout has passed
    # since the job, and the node's expiry has run.
    expired_before = metric(node, "laminar_staged_expired_total")
    witness = client.stager(new_write_id(), task=0, timeout_s=timeout_ms / 1000)
    witness.send(fresh_topic(client, "witness", 1), 0, [b"witness"])
    wait_until(
        lambda: metric(node, "laminar_staged_expired_total") > expired_before,
        "the witness's staged rows to expire",
    )
    assert row_ids(client, topic, 3) == [], "nor after its staging timeout passed"


def test_a_commit_after_the_staged_rows_expired_fails_clearly(
    node: RunningNode, client: Client
) -> None:
    topic = fresh_topic(client, "expired", 1)
    options = WriteOptions(node.bootstrap, topic, 1000, staging_timeout_s=0.3)
    target = WriteTarget.check(options, WriteColumns("value"))
    write_id = new_write_id()
    message = write_task(target, iter([_rows(list(range(10)))]), write_id, task=0, spark_attempt=0)
    _nothing_staged(node)
    with pytest.raises(LaminarSparkError, match=r"expired: .* stagingTimeoutMs") as refused:
        commit_tasks(target, write_id, [message], "late write")
    assert str(refused.value).endswith("nothing of it is visible")
    assert row_ids(client, topic, 1) == []
