"""Finding 3 of issue 24: partitions scale by design, not by the fd limit.

A node with a small budget of open segment files serves a few hundred
partitions: its shards hold no more segment files than the budget, every
record is read back by identity, partitions whose files were closed take
appends and reads again, a restart recovers all, and creates past the
partition caps are refused with nothing half-made."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from laminar.client import Client, InvalidRequestError
from tests.system.nodes import RunningNode, start_node

PARTITIONS = 300
OPEN_FILES_MAX = 32  # 16 per shard
IN_FLIGHT = 4  # produces at once: 8 files pinned by their flushes, within a shard's 16


def segment_fds(node: RunningNode) -> dict[int, int]:
    """Per shard process: descriptors open on partition segment files."""
    root = str(node.data_dir / "partitions")
    counts: dict[int, int] = {}
    for pid in node.shard_pids():
        count = 0
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except FileNotFoundError:
                continue
            count += target.startswith(root) and target.endswith((".store", ".index"))
        counts[pid] = count
    return counts


def record(partition: int, round_no: int) -> bytes:
    return f"p{partition}-r{round_no}".encode()


def produce_round(client: Client, node: RunningNode, round_no: int) -> None:
    """One record to every partition, `IN_FLIGHT` at a time, checking the
    shards' segment descriptors as it goes."""
    per_shard = OPEN_FILES_MAX // 2
    for start in range(0, PARTITIONS, IN_FLIGHT):
        batch = range(start, min(PARTITIONS, start + IN_FLIGHT))
        pending = [client.produce_nowait("many", p, [record(p, round_no)]) for p in batch]
        for waiting in pending:
            waiting.result()
        if start % 40 == 0:
            # The budget is soft while files are in use; the pool trims back after.
            deadline = time.monotonic() + 5
            while over := {pid: n for pid, n in segment_fds(node).items() if n > per_shard}:
                assert time.monotonic() < deadline, (
                    f"shards over their budget of {per_shard} segment files: {over}"
                )
                time.sleep(0.05)


def check_every_record(client: Client, rounds: int) -> None:
    for p in range(PARTITIONS):
        got = [r.value for r in client.fetch("many", p, 0)]
        assert got == [record(p, n) for n in range(rounds)], f"partition {p}"


@pytest.mark.timeout(300)
def test_hundreds_of_partitions_within_a_small_file_budget(tmp_path: Path) -> None:
    flags = {
        "max_open_files": OPEN_FILES_MAX,
        "max_partitions": 2 * PARTITIONS,
        "max_topic_partitions": PARTITIONS + 10,
    }
    with start_node(tmp_path, cores=2, **flags) as node, Client(node.bootstrap) as client:
        client.create_topic("many", partitions=PARTITIONS)
        produce_round(client, node, 0)
        check_every_record(client, 1)  # reads reopen closed files
        produce_round(client, node, 1)  # so do appends
        check_every_record(client, 2)
        # Creates past either cap are refused, and leave nothing behind.
        with pytest.raises(InvalidRequestError, match="at most 310 partitions"):
            client.create_topic("wide", partitions=PARTITIONS + 11)
        with pytest.raises(InvalidRequestError, match="--max-partitions 600"):
            client.create_topic("more", partitions=PARTITIONS + 1)
        assert [t.name for t in client.list_topics()] == ["many"]
        dirs = os.listdir(node.data_dir / "partitions")
        assert len([d for d in dirs if not d.startswith("0-")]) == PARTITIONS
        status, text = node.admin_get("/metrics")
        assert status == 200 and "laminar_segment_file_evictions_total" in text
    with node.restart() as again, Client(again.bootstrap) as client:
        check_every_record(client, 2)
        produce_round(client, again, 2)
        check_every_record(client, 3)
