"""Reads with the options and columns of Spark's Kafka source, through a real
SparkSession against a real node. Rows are checked by identity."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install 'pyspark[sql]==4.3.0'")

from laminar.client import Client
from laminar.spark.options import read_options
from laminar.spark.reading import TopicState
from laminar.spark.stream import LaminarStreamReader
from tests.delivery import assert_exactly_once
from tests.spark.helpers import all_records, fresh_topic
from tests.system.nodes import RunningNode, start_node


def _fill(client: Client, topic: str, partitions: int, count: int) -> list[tuple[str, int, int]]:
    """Records `<topic>-<p>-<i>`; their identities (topic, partition, index)."""
    out = []
    for p in range(partitions):
        client.produce(topic, p, [f"{topic}-{p}-{i}".encode() for i in range(count)])
        out += [(topic, p, i) for i in range(count)]
    return out


def _kafka_read(spark: Any, bootstrap: str, **options: object) -> Any:
    r = spark.read.format("laminar").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        r = r.option(name, str(value))
    return r.load()


def _dead_address() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_subscribe_several_topics_with_a_topic_column_and_a_bootstrap_list(
    spark: Any, node: RunningNode, client: Client
) -> None:
    a, b = fresh_topic(client, "sub-a", 2), fresh_topic(client, "sub-b", 3)
    expected = _fill(client, a, 2, 15) + _fill(client, b, 3, 10)
    bootstrap = f"{_dead_address()},{node.bootstrap}"  # the first is down: the next is used
    df = _kafka_read(spark, bootstrap, subscribe=f"{a},{b}", **{"kafka.group.id": "ignored"})
    assert df.columns[-1] == "topic"
    rows = df.collect()
    assert_exactly_once([(r.topic, r.partition, r["index"]) for r in rows], expected)
    assert all(r.value == f"{r.topic}-{r.partition}-{r['index']}".encode() for r in rows)
    pattern = _kafka_read(spark, node.bootstrap, subscribePattern=f"({a}|{b})")
    assert_exactly_once([(r.topic, r.partition, r["index"]) for r in pattern.collect()], expected)


def test_kafka_compatible_schema(spark: Any, node: RunningNode, client: Client) -> None:
    topic = fresh_topic(client, "kafka-shape", 2)
    client.produce(topic, 1, [b"v0", b"v1"], [b"k0", None], [{"h": b"x", "g": b"y"}, None])
    df = _kafka_read(spark, node.bootstrap, subscribe=topic, kafkaCompatibleSchema="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    rows = sorted(df.collect(), key=lambda r: r.offset)
    assert [(r.key, r.value, r.topic, r.partition, r.offset) for r in rows] == [
        (b"k0", b"v0", topic, 1, 0),
        (None, b"v1", topic, 1, 1),
    ]
    assert sorted((h.key, h.value) for h in rows[0].headers) == [("g", b"y"), ("h", b"x")]
    assert rows[1].headers is None and {r.timestampType for r in rows} == {1}


def test_starting_offsets_and_timestamps_per_partition_and_an_ending_timestamp(
    spark: Any, node: RunningNode, client: Client
) -> None:
    topic = fresh_topic(client, "times", 2)
    _fill(client, topic, 2, 5)
    time.sleep(0.05)  # pacing: the records' timestamps fall before `middle`...
    middle = int(time.time() * 1000)
    time.sleep(0.05)  # ...and the late ones after it
    client.produce(topic, 0, [b"late-0"])
    client.produce(topic, 1, [b"late-1"])
    offsets = _kafka_read(
        spark,
        node.bootstrap,
        subscribe=topic,
        startingOffsets=f'{{"{topic}": {{"0": 3, "1": -1}}}}',
    )
    assert sorted((r.partition, r["index"]) for r in offsets.collect()) == [(0, 3), (0, 4), (0, 5)]
    by_time = _kafka_read(
        spark,
        node.bootstrap,
        subscribe=topic,
        startingOffsetsByTimestamp=f'{{"{topic}": {{"1": {middle}}}}}',
    )
    got = sorted((r.partition, r["index"]) for r in by_time.collect())
    assert got == [(0, i) for i in range(6)] + [(1, 5)]
    before = _kafka_read(spark, node.bootstrap, subscribe=topic, endingTimestamp=middle)
    assert sorted((r.partition, r["index"]) for r in before.collect()) == [
        (p, i) for p in range(2) for i in range(5)
    ]


def test_a_stream_of_several_topics_resumes_from_its_checkpoint(
    spark: Any, node: RunningNode, client: Client, tmp_path: Path
) -> None:
    a, b = fresh_topic(client, "ssub-a", 2), fresh_topic(client, "ssub-b", 1)
    first = _fill(client, a, 2, 10) + _fill(client, b, 1, 10)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> None:
        query = (
            spark.readStream.format("laminar")
            .option("kafka.bootstrap.servers", node.bootstrap)
            .option("subscribe", f"{a},{b}")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 12)
            .load()
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    run()
    client.produce(b, 0, [f"{b}-0-{i}".encode() for i in range(10, 15)])
    run()
    rows = spark.read.parquet(str(out)).collect()
    expected = first + [(b, 0, i) for i in range(10, 15)]
    assert_exactly_once([(r.topic, r.partition, r["index"]) for r in rows], expected)


@pytest.fixture(scope="module")
def retaining_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningNode]:
    """A node whose retention passes run often."""
    with start_node(
        tmp_path_factory.mktemp("retention"), cores=2, retention_check_interval=0.2
    ) as running:
        yield running


def test_a_stream_behind_retention_fails_or_with_fail_on_data_loss_false_skips_and_counts(
    spark: Any, retaining_node: RunningNode, tmp_path: Path
) -> None:
    node = retaining_node
    with Client(node.bootstrap) as client:
        topic = "lossy"
        client.create_topic(
            topic, partitions=1, config={"segment.bytes": 4096, "retention.bytes": 8192}
        )
        value = lambda i: f"r{i:05d}-".encode() + b"x" * 90  # noqa: E731
        client.produce(topic, 0, [value(i) for i in range(40)])
        checkpoint = tmp_path / "checkpoint"

        out = tmp_path / "out"

        def run(fail_on_data_loss: str) -> Any:
            query = (
                spark.readStream.format("laminar")
                .option("bootstrap", node.bootstrap)
                .option("topic", topic)
                .option("startingIndex", "earliest")
                .option("failOnDataLoss", fail_on_data_loss)
                .load()
                .writeStream.format("parquet")
                .option("path", str(out))
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            return query

        run("true")
        for start in range(40, 400, 40):  # retention removes what the stream has not read
            client.produce(topic, 0, [value(i) for i in range(start, start + 40)])
        deadline = time.monotonic() + 30
        settled = None
        while True:  # until retention removed unread records and removes no more
            assert time.monotonic() < deadline, "retention did not run"
            now = client.offsets(topic, 0)
            if now == settled and now.lowest > 40:
                break
            settled = now
            time.sleep(1.0)  # five retention passes
        lowest, highest = settled
        with pytest.raises(Exception, match="were removed \\(retention\\)"):
            run("true")
        query = run("false")
        rows = spark.read.parquet(str(out)).collect()
        assert_exactly_once([r["index"] for r in rows], [*range(40), *range(lowest, highest)])
        offsets = [p["sources"][0]["endOffset"] for p in query.recentProgress]
        assert any(json.loads(o).get("lostRecords") == lowest - 40 for o in offsets if o)


def test_fail_on_data_loss_false_skips_removed_records_and_counts_them(
    node: RunningNode, client: Client
) -> None:
    """The reader's check alone, against ranges as retention leaves them."""
    topic = fresh_topic(client, "lossy", 2)
    _fill(client, topic, 2, 10)
    for fail, expect_error in (("true", True), ("false", False)):
        options = read_options(
            {"bootstrap": node.bootstrap, "topic": topic, "failOnDataLoss": fail}
        )
        reader = LaminarStreamReader(options)
        try:
            state = TopicState.fetch(reader._connected(), options)
            retained = TopicState(state.topic, state.partitions, {0: 4, 1: 0}, state.highest, {})
            if expect_error:
                with pytest.raises(Exception, match=r"records 1..3 of .* were removed"):
                    reader._checked({0: 1, 1: 2}, retained)
            else:
                begin, lost = reader._checked({0: 1, 1: 2}, retained)
                assert begin == {0: 4, 1: 2} and lost == 3
        finally:
            reader.stop()
    assert len(all_records(client, topic, 0)) == 10
