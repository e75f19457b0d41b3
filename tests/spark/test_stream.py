"""Structured Streaming against a real node: availableNow, restarts from the
checkpoint, read limits, and an exactly-once streaming sink."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install 'pyspark[sql]==4.3.0'")

from laminar.client import Client
from tests.delivery import assert_exactly_once
from tests.spark.helpers import all_records, fresh_topic, read
from tests.system.nodes import RunningNode


def _produce(client: Client, topic: str, partitions: int, count: int, tag: str) -> None:
    for p in range(partitions):
        client.produce(topic, p, [f"{tag}-{p}-{i}".encode() for i in range(count)])


def _stream(spark: Any, node: RunningNode, topic: str, **options: object) -> Any:
    r = spark.readStream.format("laminar").option("bootstrap", node.bootstrap)
    r = r.option("topic", topic)
    for name, value in options.items():
        r = r.option(name, str(value))
    return r.load()


def _run_to_parquet(df: Any, out: Path, checkpoint: Path) -> list[int]:
    """Run an availableNow query into parquet; the input rows of each micro-batch."""
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_available_now_and_a_restart_read_each_record_once(
    spark: Any, node: RunningNode, client: Client, tmp_path: Path
) -> None:
    topic = fresh_topic(client, "stream", 3)
    _produce(client, topic, 3, 50, "first")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    df = _stream(spark, node, topic, startingIndex="earliest")
    assert sum(_run_to_parquet(df, out, checkpoint)) == 150
    _produce(client, topic, 3, 20, "second")
    # The same query again (same checkpoint): exactly the 60 new records.
    assert sum(_run_to_parquet(df, out, checkpoint)) == 60
    rows = spark.read.parquet(str(out)).collect()
    seen = [(r.partition, r["index"]) for r in rows]
    assert len(seen) == len(set(seen)) == 210
    assert sorted(seen) == [(p, i) for p in range(3) for i in range(70)]
    assert sum(r.value.startswith(b"second") for r in rows) == 60


def test_a_new_stream_starts_at_latest_by_default(
    spark: Any, node: RunningNode, client: Client, tmp_path: Path
) -> None:
    topic = fresh_topic(client, "latest", 1)
    _produce(client, topic, 1, 10, "before")
    assert sum(_run_to_parquet(_stream(spark, node, topic), tmp_path / "o", tmp_path / "c")) == 0


def test_max_records_per_trigger_bounds_each_micro_batch(
    spark: Any, node: RunningNode, client: Client, tmp_path: Path
) -> None:
    topic = fresh_topic(client, "limited", 2)
    _produce(client, topic, 2, 50, "x")
    df = _stream(spark, node, topic, startingIndex="earliest", maxRecordsPerTrigger=30)
    batches = _run_to_parquet(df, tmp_path / "out", tmp_path / "checkpoint")
    assert sum(batches) == 100
    assert max(batches) <= 30 and len(batches) >= 4


def test_stream_write_is_exactly_once_when_a_batch_runs_again(
    spark: Any, node: RunningNode, client: Client, tmp_path: Path
) -> None:
    source = fresh_topic(client, "pipe-in", 2)
    target = fresh_topic(client, "pipe-out", 2)
    _produce(client, source, 2, 30, "a")
    checkpoint = tmp_path / "checkpoint"

    def run() -> int:
        query = (
            _stream(spark, node, source, startingIndex="earliest")
            .writeStream.format("laminar")
            .option("bootstrap", node.bootstrap)
            .option("topic", target)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return sum(p["numInputRows"] for p in query.recentProgress)

    def target_values() -> list[bytes]:
        return sorted(r.value for p in range(2) for r in all_records(client, target, p))

    assert run() == 60
    expected = sorted(f"a-{p}-{i}".encode() for p in range(2) for i in range(30))
    assert target_values() == expected
    # Forget that the last micro-batch was committed (a driver that died after the
    # sink's commit): the restarted query runs it again (same query id, same batch
    # id), and the node answers that it was committed before.
    commits = sorted((checkpoint / "commits").iterdir(), key=lambda f: f.name)
    last = [f for f in commits if f.name.isdigit()][-1]
    last.unlink()
    (checkpoint / "commits" / f".{last.name}.crc").unlink(missing_ok=True)
    assert run() == 60, "the micro-batch ran again"
    assert target_values() == expected
    _produce(client, source, 2, 5, "b")
    assert run() == 10
    everything = expected + [f"b-{p}-{i}".encode() for p in range(2) for i in range(5)]
    assert_exactly_once([r.value for r in read(spark, node, target).collect()], everything)
