"""A streaming driver killed inside a micro-batch's commit, then the query run
again from its checkpoint: every row in the target exactly once.

The driver is a process of its own (`tests.spark.stream_driver`, its own
SparkSession) that SIGKILLs its whole process group, JVM included, either
after its tasks staged and before the commit, or after the node committed and
before Spark recorded it. The re-run happens in the tests' shared session.
Both drivers run at once, each on its own topics.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install 'pyspark[sql]==4.3.0'")

from laminar.client import Client
from tests.delivery import assert_exactly_once
from tests.spark.helpers import all_records, fresh_topic, metric
from tests.system.nodes import RunningNode

REPO = Path(__file__).resolve().parents[2]
DRIVER_TIMEOUT_S = 240


def _values(client: Client, topic: str, partitions: int) -> list[bytes]:
    return [r.value for p in range(partitions) for r in all_records(client, topic, p)]


def _fill(client: Client, topic: str, tag: str, partitions: int, count: int) -> list[bytes]:
    out = []
    for p in range(partitions):
        values = [f"{tag}-{p}-{i}".encode() for i in range(count)]
        client.produce(topic, p, values)
        out += values
    return out


def _rerun(spark: Any, node: RunningNode, source: str, target: str, checkpoint: Path) -> None:
    query = (
        spark.readStream.format("laminar")
        .option("bootstrap", node.bootstrap)
        .option("topic", source)
        .option("startingIndex", "earliest")
        .load()
        .writeStream.format("laminar")
        .option("bootstrap", node.bootstrap)
        .option("topic", target)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


@pytest.mark.soak  # two more JVMs for a minute
def test_a_driver_killed_inside_the_commit_leaves_every_row_once_after_a_rerun(
    spark: Any, node: RunningNode, client: Client, tmp_path: Path
) -> None:
    cases = {}
    for crash in ("before-commit", "after-commit"):
        source = fresh_topic(client, f"crash-in-{crash}", 2)
        target = fresh_topic(client, f"crash-out-{crash}", 2)
        rows = _fill(client, source, "first", 2, 40)
        checkpoint = tmp_path / crash / "checkpoint"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        driver = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.spark.stream_driver",
                "--bootstrap",
                node.bootstrap,
                "--source",
                source,
                "--target",
                target,
                "--checkpoint",
                str(checkpoint),
                "--crash",
                crash,
                "--local-dir",
                str(tmp_path / crash / "spark"),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / f"{crash}.log", "wb"),  # noqa: SIM115
            start_new_session=True,
        )
        cases[crash] = (driver, source, target, rows, checkpoint)
    for crash, (driver, _, _, _, _) in cases.items():
        try:
            code = driver.wait(DRIVER_TIMEOUT_S)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
        log = (tmp_path / f"{crash}.log").read_text(errors="replace")[-3000:]
        assert code == -signal.SIGKILL, f"the {crash} driver was not killed (exit {code}):\n{log}"

    before, after = cases["before-commit"], cases["after-commit"]
    assert _values(client, before[2], 2) == [], "uncommitted rows are not visible"
    assert_exactly_once(_values(client, after[2], 2), after[3])  # committed, unrecorded
    assert metric(node, "laminar_staged_attempts") >= 1, "the first run's staged rows wait"

    for _, (_, source, target, rows, checkpoint) in cases.items():
        more = _fill(client, source, "second", 2, 5)  # a further micro-batch after the re-run
        _rerun(spark, node, source, target, checkpoint)
        assert_exactly_once(_values(client, target, 2), rows + more)
