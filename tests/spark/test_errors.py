"""Bad inputs fail on the driver, before any task starts, with words that say
what to fix."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install 'pyspark[sql]==4.3.0'")

from laminar.client import Client
from tests.spark.helpers import fresh_topic, read
from tests.system.nodes import RunningNode


def _fails_before_any_task(spark: Any, action: Callable[[], object], match: str) -> None:
    sc = spark.sparkContext
    group = f"bad-input-{id(action)}"
    sc.setJobGroup(group, "a query that must fail while planning")
    try:
        with pytest.raises(Exception, match=match):
            action()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert list(sc.statusTracker().getJobIdsForGroup(group)) == [], "a task ran"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unknown_topic(spark: Any, node: RunningNode) -> None:
    _fails_before_any_task(
        spark, lambda: read(spark, node, "no-such-topic").collect(), "does not exist"
    )
    _fails_before_any_task(
        spark,
        lambda: (
            spark.readStream.format("laminar")
            .option("bootstrap", node.bootstrap)
            .option("topic", "no-such-topic")
            .load()
            .writeStream.format("console")
            .start()
            .awaitTermination()
        ),
        "does not exist",
    )


def test_unreachable_bootstrap(spark: Any) -> None:
    port = _closed_port()
    _fails_before_any_task(
        spark,
        lambda: (
            spark.read.format("laminar")
            .option("bootstrap", f"127.0.0.1:{port}")
            .option("topic", "t")
            .load()
            .collect()
        ),
        f"cannot reach the laminar node at bootstrap='127.0.0.1:{port}'",
    )


def test_out_of_range_indexes(spark: Any, node: RunningNode, client: Client) -> None:
    topic = fresh_topic(client, "range", 2)
    client.produce(topic, 1, [b"a", b"b", b"c"])
    _fails_before_any_task(
        spark,
        lambda: read(spark, node, topic, startingIndex='{"1": 7}').collect(),
        r"startingIndex=7 for partition 1 is out of range: the partition holds indexes \[0, 3\)",
    )
    _fails_before_any_task(
        spark,
        lambda: read(spark, node, topic, startingIndex=2, endingIndex=1).collect(),
        "out of range|before its starting index",
    )
    _fails_before_any_task(
        spark, lambda: read(spark, node, topic, partitions="1,5").collect(), "not \\[5\\]"
    )


def test_options_laminar_does_not_have_are_named(
    spark: Any, node: RunningNode, client: Client
) -> None:
    topic = fresh_topic(client, "kafkaish", 1)
    _fails_before_any_task(
        spark,
        lambda: read(spark, node, topic, assign='{"t": [0]}').collect(),
        "laminar calls it 'topic and partitions'",
    )
    _fails_before_any_task(
        spark, lambda: spark.read.format("laminar").load().collect(), '"topic" option is required'
    )


def test_a_dataframe_without_value_cannot_be_written(
    spark: Any, node: RunningNode, client: Client
) -> None:
    topic = fresh_topic(client, "novalue", 1)
    df = spark.createDataFrame([(b"k",)], "key BINARY")
    _fails_before_any_task(
        spark,
        lambda: (
            df.write.format("laminar")
            .option("bootstrap", node.bootstrap)
            .option("topic", topic)
            .mode("append")
            .save()
        ),
        "needs a `value` column",
    )
    ok = spark.createDataFrame([(b"v",)], "value BINARY")
    _fails_before_any_task(
        spark,
        lambda: (
            ok.write.format("laminar")
            .option("bootstrap", node.bootstrap)
            .option("topic", topic)
            .mode("overwrite")
            .save()
        ),
        "append-only",
    )
    _fails_before_any_task(
        spark,
        lambda: (
            ok.write.format("laminar")
            .option("bootstrap", node.bootstrap)
            .option("topic", "no-such-topic")
            .mode("append")
            .save()
        ),
        "does not exist",
    )


def test_a_user_schema_must_be_the_topic_schema(spark: Any, node: RunningNode) -> None:
    _fails_before_any_task(
        spark,
        lambda: (
            spark.read.format("laminar")
            .schema("value STRING")
            .option("bootstrap", node.bootstrap)
            .option("topic", "t")
            .load()
            .collect()
        ),
        "Leave .schema\\(\\) out",
    )


def test_a_row_naming_a_missing_partition_fails_its_task(
    spark: Any, node: RunningNode, client: Client
) -> None:
    topic = fresh_topic(client, "badpart", 2)
    df = spark.createDataFrame([(b"v", 7)], "value BINARY, partition INT")
    with pytest.raises(Exception, match="names partition 7, but topic"):
        df.write.format("laminar").option("bootstrap", node.bootstrap).option("topic", topic).mode(
            "append"
        ).save()
