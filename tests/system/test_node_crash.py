"""Crashes and drains under load: every acknowledged record survives, exactly once.

A producer process (`tests/system/producer.py`) writes unique records and logs
each acknowledgement before sending the next request. After the failure the
test reads every partition back and checks, per partition:

- every acknowledged record is present, at the index the node acknowledged,
  with its bytes unchanged;
- no record appears twice;
- nothing is present that was not sent (records whose outcome was unknown when
  the node died may be present or absent, once at most).
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from laminar.client import Client, RetryPolicy
from laminar.reactor import uring_unavailable_reason
from tests.system.nodes import RunningNode, start_node
from tests.system.producer import record_value

PARTITIONS = 8
TOPIC = "crash"
RUNTIMES = ["uring", "asyncio"] if uring_unavailable_reason() is None else ["asyncio"]


class Producer:
    """The producer subprocess and its outcome log."""

    def __init__(self, tmp_path: Path, node: RunningNode, tag: str = "p") -> None:
        self.out = tmp_path / f"acks-{tag}.txt"
        self.stop_file = tmp_path / f"stop-{tag}"
        self.tag = tag
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.system.producer",
                "--bootstrap",
                node.bootstrap,
                "--topic",
                TOPIC,
                "--partitions",
                str(PARTITIONS),
                "--out",
                str(self.out),
                "--tag",
                tag,
                "--seconds",
                "60",
                "--stop-file",
                str(self.stop_file),
            ]
        )

    def lines(self) -> list[list[str]]:
        try:
            text = self.out.read_text()
        except FileNotFoundError:
            return []
        return [line.split() for line in text.splitlines() if line.endswith(("\n", "")) and line]

    def acked(self) -> int:
        return sum(1 for parts in self.lines() if parts[0] == "A")

    def wait_acked(self, count: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.acked() < count:
            assert self.proc.poll() is None, "the producer exited early"
            assert time.monotonic() < deadline, f"only {self.acked()} acks in {timeout} s"
            time.sleep(0.02)

    def stop(self) -> None:
        self.stop_file.touch()
        assert self.proc.wait(30) == 0


def verify(bootstrap: str, producer: Producer) -> dict[str, int]:
    """Check the partitions against the producer's log (see the module docstring)."""
    acked: dict[tuple[int, int], int] = {}
    unknown: set[tuple[int, int]] = set()
    for parts in producer.lines():
        if len(parts) < 4:
            continue  # a line torn by a kill of the producer itself
        if parts[0] == "A" and len(parts) == 5:
            p, first, seq, count = map(int, parts[1:])
            for i in range(count):
                acked[(p, seq + i)] = first + i
        elif parts[0] == "U":
            p, seq, count = int(parts[1]), int(parts[2]), int(parts[3])
            unknown.update((p, seq + i) for i in range(count))
    present = 0
    with Client(bootstrap, retry=RetryPolicy(budget_s=20)) as client:
        for p in range(PARTITIONS):
            seen: dict[int, int] = {}
            lowest, highest = client.offsets(TOPIC, p)
            index = lowest
            while index < highest:
                for record in client.fetch(TOPIC, p, index):
                    assert record.index == index
                    tag, part, seq, _ = record.value.split(b":", 3)
                    key = (int(part), int(seq))
                    assert tag.decode() == producer.tag and key[0] == p, record.value[:40]
                    assert record.value == record_value(producer.tag, p, key[1], 64)
                    assert key not in seen, f"record {key} twice: {seen[key]} and {index}"
                    assert key in acked or key in unknown, f"record {key} was never sent"
                    seen[key] = index
                    index += 1
            present += len(seen)
            for key, at in acked.items():
                if key[0] == p:
                    assert seen.get(key) == at, f"acknowledged {key} at {at}, found {seen.get(key)}"
    return {"acked": len(acked), "unknown": len(unknown), "present": present}


def create_topic(node: RunningNode) -> None:
    with Client(node.bootstrap) as client:
        client.create_topic(TOPIC, partitions=PARTITIONS)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_sigkill_of_the_whole_node_loses_no_acknowledged_record(
    tmp_path: Path, runtime: str
) -> None:
    node = start_node(tmp_path, cores=2, runtime=runtime)
    with node:
        create_topic(node)
        producer = Producer(tmp_path, node)
        producer.wait_acked(150)
        node.kill()
        time.sleep(0.2)
        producer.stop()
    with node.restart() as again:
        counts = verify(again.bootstrap, producer)
    assert counts["acked"] >= 150 * 8


def test_sigkill_of_one_shard_mid_production(tmp_path: Path) -> None:
    with start_node(tmp_path, cores=2) as node:
        create_topic(node)
        producer = Producer(tmp_path, node)
        producer.wait_acked(100)
        for shard in (1, 0):  # a data shard, then the metadata owner
            node.kill_shard(shard)
            producer.wait_acked(producer.acked() + 100)
        producer.stop()
        verify(node.bootstrap, producer)
        with urllib.request.urlopen(node.admin_url + "/metrics", timeout=10) as reply:
            metrics = reply.read().decode()
        assert 'laminar_shard_restarts_total{shard="0"} 1' in metrics
        assert 'laminar_shard_restarts_total{shard="1"} 1' in metrics
        assert node.alive()


def test_sigterm_drains_under_load_and_exits_zero(tmp_path: Path) -> None:
    node = start_node(tmp_path, cores=2)
    create_topic(node)
    producer = Producer(tmp_path, node)
    producer.wait_acked(100)
    shard_pids = node.shard_pids()
    assert node.terminate() == 0
    producer.stop()
    log = node.log_text()
    assert "shard 0 drained" in log and "shard 1 drained" in log
    assert "laminar-node stopped (exit 0)" in log
    for pid in shard_pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    assert not (node.data_dir / "run" / "node.json").exists()
    with node.restart() as again:
        counts = verify(again.bootstrap, producer)
    # A drain completes what it accepted: nothing is left unknown but the
    # requests refused or cut off after the drain began.
    assert counts["present"] >= counts["acked"]
