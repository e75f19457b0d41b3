"""The Spark sink's default guarantee (exactly once) on a three-node cluster.

A batch write and a streaming write (its input files, so that only the sink is
under test here) commit through the cluster's decisions group; a micro-batch
run again after its commit (the checkpoint forgot it, as after a driver crash)
is answered "committed before" and appends nothing. Checked by identity on
every replica of every partition.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install 'pyspark[sql]==4.3.0'")

from laminar.client import Client
from laminar.placement import partition_id
from tests.cluster.nodes import Cluster, committed_values
from tests.delivery import delivery_problems
from tests.support import wait_until

PARTITIONS = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster.start(tmp_path_factory.mktemp("spark-cluster"), 3, cores=1) as running:
        yield running


def _topic(cluster: Cluster, name: str) -> list[int]:
    with Client(cluster.bootstrap) as client:
        topic = client.create_topic(name, partitions=PARTITIONS, replication_factor=3)
    return [partition_id(topic.topic_id, p) for p in range(PARTITIONS)]


def _on_every_replica(cluster: Cluster, pids: list[int], expected: dict[int, list[bytes]]) -> None:
    """Each partition's three replicas hold exactly `expected[p]`, once each."""
    for p, pid in enumerate(pids):

        def problems(pid: int = pid, p: int = p) -> list[str | None]:
            logs = [committed_values(node, pid) for node in cluster.nodes.values()]
            return [delivery_problems([v for _, v in log], expected[p]) for log in logs]

        try:
            wait_until(lambda f=problems: not any(f()), f"partition {p} on every replica", 30)
        except AssertionError:
            raise AssertionError(f"partition {p}: {problems()}") from None


def test_a_batch_write_publishes_each_row_once_on_every_replica(
    spark: Any, cluster: Cluster
) -> None:
    pids = _topic(cluster, "spark-batch")
    rows = [(p, f"batch-{p}-{i:04d}") for p in range(PARTITIONS) for i in range(40)]
    df = spark.createDataFrame(rows, "partition INT, value STRING")
    df.write.format("laminar").option("bootstrap", cluster.bootstrap).option(
        "topic", "spark-batch"
    ).mode("append").save()
    expected = {p: [v.encode() for q, v in rows if q == p] for p in range(PARTITIONS)}
    _on_every_replica(cluster, pids, expected)


def test_a_stream_commits_each_micro_batch_once_even_when_it_runs_again(
    spark: Any, cluster: Cluster, tmp_path: Path
) -> None:
    pids = _topic(cluster, "spark-stream")
    inputs, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    inputs.mkdir()
    expected: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}

    def add(name: str, count: int) -> None:
        rows = [{"partition": i % PARTITIONS, "value": f"{name}-{i:04d}"} for i in range(count)]
        (inputs / f"{name}.json").write_text("\n".join(json.dumps(r) for r in rows))
        for r in rows:
            expected[r["partition"]].append(r["value"].encode())

    def run() -> int:
        query = (
            spark.readStream.schema("partition INT, value STRING")
            .json(str(inputs))
            .writeStream.format("laminar")
            .option("bootstrap", cluster.bootstrap)
            .option("topic", "spark-stream")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None
        return sum(p["numInputRows"] for p in query.recentProgress)

    add("first", 30)
    assert run() == 30
    # The checkpoint forgets that its last micro-batch committed (a driver that
    # died after the sink's commit): it runs again under the same commit id.
    commits = [f for f in (checkpoint / "commits").iterdir() if f.name.isdigit()]
    last = max(commits, key=lambda f: int(f.name))
    last.unlink()
    (checkpoint / "commits" / f".{last.name}.crc").unlink(missing_ok=True)
    assert run() == 30, "the micro-batch ran again"
    add("second", 20)
    assert run() == 20
    _on_every_replica(cluster, pids, expected)
