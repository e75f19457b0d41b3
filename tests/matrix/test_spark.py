"""The Spark source and sink on every topology, a leader killed in the middle of
each check, checked by identity (each record once, at its index)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install 'pyspark[sql]==4.3.0'")

from laminar.client import Client
from tests.matrix.reading import check_once, read_partition, topic_name
from tests.matrix.topologies import Topology

PARTITIONS = 2


def _topic(client: Client, topology: Topology, check: str) -> str:
    topic = topic_name(check)
    client.create_topic(
        topic, partitions=PARTITIONS, replication_factor=topology.replication_factor
    )
    topology.leader(topic, 0)  # every node applied the creation
    return topic


def _produce(client: Client, topic: str, tag: str, count: int) -> dict[int, dict[bytes, int]]:
    """`count` records per partition, one produce each; {partition: {value: index}}."""
    acked: dict[int, dict[bytes, int]] = {}
    for p in range(PARTITIONS):
        values = [f"{tag}-{p}-{i}".encode() for i in range(count)]
        acked[p] = {v: client.produce(topic, p, [v]) for v in values}
    return acked


def _rows(df: Any) -> dict[int, list[tuple[int, bytes]]]:
    """A DataFrame's rows as each partition's (index, value), in index order."""
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for row in df.select("partition", "index", "value").collect():
        out[row.partition].append((row["index"], bytes(row.value)))
    return {p: sorted(rows) for p, rows in out.items()}


def test_a_batch_read_returns_each_record_once(spark: Any, healed: Topology) -> None:
    """Written, then the leader killed: on a cluster the partition then ends in
    the new leader's own entry (a gap at the end), which a read must step over."""
    with Client(healed.bootstrap) as client:
        topic = _topic(client, healed, "spark-read")
        acked = _produce(client, topic, "a", 20)
        healed.kill_leader(topic, 0)
        more = _produce(client, topic, "b", 5)
        df = spark.read.format("laminar").option("bootstrap", healed.bootstrap)
        rows = _rows(df.option("topic", topic).load())
        for p in range(PARTITIONS):
            assert rows[p] == read_partition(client, topic, p)
            check_once(rows[p], {**acked[p], **more[p]})


def test_a_batch_write_publishes_each_row_once(spark: Any, healed: Topology) -> None:
    """Two jobs with the default guarantee (exactly once), the leader of a
    partition they write killed between them."""
    with Client(healed.bootstrap) as client:
        topic = _topic(client, healed, "spark-write")
        wrote: dict[int, dict[bytes, int | None]] = {p: {} for p in range(PARTITIONS)}
        for job in ("first", "second"):
            rows = [(p, f"{job}-{p}-{i}") for p in range(PARTITIONS) for i in range(30)]
            for p, value in rows:
                wrote[p][value.encode()] = None
            df = spark.createDataFrame(rows, "partition INT, value STRING")
            df.write.format("laminar").option("bootstrap", healed.bootstrap).option(
                "topic", topic
            ).mode("append").save()
            if job == "first":
                healed.kill_leader(topic, 0)
        for p in range(PARTITIONS):
            check_once(read_partition(client, topic, p), wrote[p])


def test_a_stream_restarted_from_its_checkpoint_copies_each_record_once(
    spark: Any, healed: Topology, tmp_path: Path
) -> None:
    """A streaming copy (source and sink laminar, availableNow), run, the leader
    of its input killed while more records arrive, run again from the checkpoint."""
    with Client(healed.bootstrap) as client:
        source = _topic(client, healed, "stream-in")
        sink = _topic(client, healed, "stream-out")
        produced = _produce(client, source, "a", 20)

        def run() -> None:
            query = (
                spark.readStream.format("laminar")
                .option("bootstrap", healed.bootstrap)
                .option("topic", source)
                .option("startingIndex", "earliest")
                .option("maxRecordsPerTrigger", 15)
                .load()
                .selectExpr("partition", "value")
                .writeStream.format("laminar")
                .option("bootstrap", healed.bootstrap)
                .option("topic", sink)
                .option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            assert query.exception() is None

        run()
        healed.kill_leader(source, 0)
        more = _produce(client, source, "b", 10)
        run()
        for p in range(PARTITIONS):
            every: dict[bytes, int | None] = dict.fromkeys([*produced[p], *more[p]])
            check_once(read_partition(client, sink, p), every)
