"""Crashes and drains under load: every acknowledged record survives, exactly once.

A producer process (`tests/system/producer.py`) writes unique records and logs
each acknowledgement before sending the next request. After the failure the
test reads every partition back and checks, per partition:

- every acknowledged record is present, at the index the node acknowledged,
  with its bytes unchanged;
- no record appears twice;
- nothing is present that was not sent (records whose outcome was unknown when
  the node died may be present or absent, once at most);
- nothing is present that the node refused: an error that says "not applied"
  must be true (the producer logs refusals apart from unknown outcomes).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from laminar.client import Client, RetryPolicy
from laminar.placement import partition_id, shard_for
from laminar.reactor import uring_unavailable_reason
from laminar.wire import (
    ErrorCode,
    ErrorResponse,
    FetchRequest,
    Ping,
    ProduceRequest,
    decode_response,
)
from tests.support import wait_until
from tests.system.nodes import RunningNode, start_node
from tests.system.producer import record_value
from tests.system.wireclient import NodeClient, WireConnection

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
    refused: set[tuple[int, int]] = set()
    for parts in producer.lines():
        if len(parts) < 4:
            continue  # a line torn by a kill of the producer itself
        if parts[0] == "A" and len(parts) == 5:
            p, first, seq, count = map(int, parts[1:])
            for i in range(count):
                acked[(p, seq + i)] = first + i
        elif parts[0] in ("U", "R"):
            p, seq, count = int(parts[1]), int(parts[2]), int(parts[3])
            (unknown if parts[0] == "U" else refused).update((p, seq + i) for i in range(count))
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
                    assert key not in refused, f"record {key} was refused, yet it is at {index}"
                    assert key in acked or key in unknown, f"record {key} was never sent"
                    seen[key] = index
                    index += 1
            present += len(seen)
            for key, at in acked.items():
                if key[0] == p:
                    assert seen.get(key) == at, f"acknowledged {key} at {at}, found {seen.get(key)}"
    return {
        "acked": len(acked),
        "unknown": len(unknown),
        "refused": len(refused),
        "present": present,
    }


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
        wait_until(  # with requests in flight to a dead node
            lambda: any(parts[0] in ("U", "R") for parts in producer.lines()),
            "the producer's first failure",
        )
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


def wait_forwarded(node: RunningNode, shard: int, count: int) -> None:
    """Wait until `shard` has forwarded `count` requests (it counts one as it sends it)."""
    name = f'laminar_forwarded_out_total{{shard="{shard}"}} '

    def forwarded() -> bool:
        with urllib.request.urlopen(node.admin_url + "/metrics", timeout=10) as reply:
            lines = [line for line in reply.read().decode().splitlines() if line.startswith(name)]
        return bool(lines) and float(lines[0].split()[-1]) >= count

    wait_until(forwarded, f"shard {shard} to forward {count} requests")


def test_a_forwarded_produce_whose_owner_dies_is_answered_outcome_unknown(
    tmp_path: Path,
) -> None:
    """The shard a produce was forwarded to dies with it in hand: the forwarder
    cannot know whether it was applied, and says so (it used to answer TIMEOUT,
    which a client reads as a refusal). A read forwarded the same way is TIMEOUT:
    safe to repeat."""
    with start_node(tmp_path, cores=2) as node:
        with NodeClient(node.host, node.port) as client:
            topic = client.create_topic("lost", 4)
        pid = next(
            partition_id(topic.topic_id, p)
            for p in range(4)
            if shard_for(partition_id(topic.topic_id, p), 2) == 1
        )
        owner = node.shard_pids()[1]
        with WireConnection(node.host, node.shard_ports[0], timeout=30) as conn:  # not the owner
            # A forwarded ping opens shard 0's channel to the owner (a request on a
            # channel not accepted yet would wait in the backlog for the restart).
            assert conn.call(Ping(pid)).shard_id == 1
            os.kill(owner, signal.SIGSTOP)
            try:
                produce = conn.send(ProduceRequest.from_values(pid, [b"maybe"]))
                fetch = conn.send(FetchRequest(pid, 0))
                wait_forwarded(node, shard=0, count=3)  # both are in the stopped owner's channel
            finally:
                os.kill(owner, signal.SIGKILL)
            answers = {}
            for _ in range(2):
                frame = conn.read_frame()
                assert frame is not None
                answers[frame.correlation_id] = decode_response(frame)
        assert isinstance(answers[produce], ErrorResponse)
        assert answers[produce].code is ErrorCode.OUTCOME_UNKNOWN, answers[produce]
        assert "may or may not have been applied" in answers[produce].message
        assert isinstance(answers[fetch], ErrorResponse)
        assert answers[fetch].code is ErrorCode.TIMEOUT
        node.wait_shard_restarted(1, owner)
