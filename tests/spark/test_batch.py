"""Batch read and write against a real node, through a real SparkSession."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install 'pyspark[sql]==4.3.0'")

from laminar.client import Client, partition_for_key
from laminar.spark.schema import COLUMNS
from tests.delivery import assert_exactly_once
from tests.spark.helpers import all_records, fresh_topic, read, rows_as_tuples
from tests.system.nodes import RunningNode


def _fill(client: Client, topic: str, partitions: int, per_partition: int) -> list[tuple[Any, ...]]:
    """Records with and without keys and headers; the expected rows."""
    expected = []
    for p in range(partitions):
        values = [b"value-%d-%d" % (p, i) for i in range(per_partition)]
        keys = [None if i % 3 == 0 else b"k%d" % i for i in range(per_partition)]
        headers = [{"h": b"%d" % i} if i % 4 == 0 else None for i in range(per_partition)]
        client.produce(topic, p, values, keys, headers)
        expected += [(p, i, keys[i], values[i], headers[i]) for i in range(per_partition)]
    return sorted(expected)


def test_batch_read_returns_every_record_of_every_partition(
    spark: Any, node: RunningNode, client: Client
) -> None:
    topic = fresh_topic(client, "read", 4)
    expected = _fill(client, topic, 4, 250)
    shards = {p.shard_id for p in client.describe_topic(topic).partitions}
    assert shards == {0, 1}, "the topic's partitions should live on both shards"
    df = read(spark, node, topic)
    assert tuple(df.columns) == COLUMNS
    assert df.schema.simpleString() == (
        "struct<partition:int,index:bigint,timestamp:timestamp,key:binary,value:binary,"
        "headers:map<string,binary>>"
    )
    rows = df.collect()
    assert rows_as_tuples(rows) == expected
    appended_ms = {r.timestamp_ms for p in range(4) for r in all_records(client, topic, p)}
    seen_ms = {round(r.timestamp.timestamp() * 1000) for r in rows}
    assert seen_ms == appended_ms


def test_sub_range_splits_and_index_bounds(spark: Any, node: RunningNode, client: Client) -> None:
    topic = fresh_topic(client, "split", 3)
    expected = _fill(client, topic, 3, 100)
    df = read(spark, node, topic, maxRecordsPerSplit=30)
    assert df.rdd.getNumPartitions() == 3 * 4  # 100 records in pieces of 30, 30, 30, 10
    assert rows_as_tuples(df.collect()) == expected
    bounded = read(
        spark,
        node,
        topic,
        partitions="0,2",
        startingIndex='{"0": 10, "2": "latest"}',
        endingIndex='{"0": 55}',
        maxRecordsPerSplit=20,
    )
    assert bounded.rdd.getNumPartitions() == 3  # [10, 30), [30, 50), [50, 55)
    got = [(r.partition, r["index"]) for r in bounded.collect()]
    assert sorted(got) == [(0, i) for i in range(10, 55)]


def test_starting_timestamp_starts_at_the_first_later_record(
    spark: Any, node: RunningNode, client: Client
) -> None:
    topic = fresh_topic(client, "time", 1)
    client.produce(topic, 0, [b"old"])
    ts = all_records(client, topic, 0)[0].timestamp_ms
    import time

    while int(time.time() * 1000) <= ts:
        time.sleep(0.005)
    client.produce(topic, 0, [b"new1", b"new2"])
    later = all_records(client, topic, 0)[1].timestamp_ms
    rows = read(spark, node, topic, startingTimestamp=later).collect()
    assert sorted(r.value for r in rows) == [b"new1", b"new2"]


def test_an_empty_read_is_an_empty_dataframe(spark: Any, node: RunningNode, client: Client) -> None:
    topic = fresh_topic(client, "empty", 2)
    assert read(spark, node, topic).count() == 0


def test_batch_write_then_read_back(spark: Any, node: RunningNode, client: Client) -> None:
    topic = fresh_topic(client, "write", 3)
    data = [
        (b"to-2", None, None, 2),  # named partition
        (b"to-0", b"ignored-key", {"h": b"x"}, 0),
    ]
    data += [(b"keyed-%d" % i, b"key-%d" % (i % 7), None, None) for i in range(40)]
    data += [(b"plain-%d" % i, None, {"n": b"%d" % i}, None) for i in range(30)]
    df = spark.createDataFrame(
        data, "value BINARY, key BINARY, headers MAP<STRING,BINARY>, partition INT"
    ).repartition(2)
    df.write.format("laminar").option("bootstrap", node.bootstrap).option("topic", topic).mode(
        "append"
    ).save()
    rows = read(spark, node, topic).collect()
    assert_exactly_once([r.value for r in rows], [d[0] for d in data])
    back = {r.value: r for r in rows}
    for value, key, headers, partition in data:
        row = back[value]
        assert row.key == key
        assert (None if row.headers is None else dict(row.headers)) == headers
        if partition is not None:
            assert row.partition == partition
        elif key is not None:
            assert row.partition == partition_for_key(key, 3)
    plain = [back[v].partition for v, k, _, p in data if k is None and p is None]
    assert sorted(set(plain)) == [0, 1, 2], "round robin spreads keyless records"
    # The commit's stamps are hidden from the reader, but present in the log.
    assert any(
        r.headers and "laminar.write" in r.headers
        for p in range(3)
        for r in all_records(client, topic, p)
    )


def test_write_of_strings_and_a_copied_topic(spark: Any, node: RunningNode, client: Client) -> None:
    source = fresh_topic(client, "copy-from", 2)
    _fill(client, source, 2, 20)
    target = fresh_topic(client, "copy-to", 2)
    read(spark, node, source).write.format("laminar").option("bootstrap", node.bootstrap).option(
        "topic", target
    ).mode("append").save()
    copied = read(spark, node, target).collect()
    assert_exactly_once(
        [r.value for r in copied], [b"value-%d-%d" % (p, i) for p in range(2) for i in range(20)]
    )
    strings = fresh_topic(client, "strings", 1)
    spark.createDataFrame([("a", "k")], "value STRING, key STRING").write.format("laminar").option(
        "bootstrap", node.bootstrap
    ).option("topic", strings).mode("append").save()
    (row,) = read(spark, node, strings).collect()
    assert (row.value, row.key) == (b"a", b"k")
