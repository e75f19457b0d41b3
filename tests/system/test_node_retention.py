"""Retention runs: topic configs (Kafka's keys) are applied by the node on a timer.

Topic configs used to be stored and shown but never applied, and nothing ever
called the log's retention: disk use grew without bound. Each test checks by
identity what is left (the newest records, intact) and what /metrics says
was removed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from laminar.client import Client, InvalidRequestError
from tests.support import wait_until
from tests.system.nodes import RunningNode, start_node
from tests.system.routed import laminar_cli, metrics, total

CHECK_S = 0.3
RETENTION_WAIT_S = 20.0


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningNode]:
    with start_node(
        tmp_path_factory.mktemp("retention"), cores=2, retention_check_interval=CHECK_S
    ) as running:
        yield running


def deleted(node: RunningNode) -> tuple[float, float]:
    """(segments, bytes) retention removed, over every shard."""
    samples = metrics(node)
    return (
        total(samples, "laminar_retention_deleted_segments_total"),
        total(samples, "laminar_retention_deleted_bytes_total"),
    )


def expired(client: Client, topic: str, end: int) -> bool:
    """Have both partitions of `topic`, `end` records each, lost every record?"""
    return all(client.offsets(topic, p) == (end, end) for p in range(2))


def values(client: Client, topic: str, partition: int) -> list[bytes]:
    lowest, highest = client.offsets(topic, partition)
    out: list[bytes] = []
    while lowest + len(out) < highest:
        out += [r.value for r in client.fetch(topic, partition, lowest + len(out))]
    return out


def test_retention_bytes_keeps_the_newest_segments(node: RunningNode) -> None:
    with Client(node.bootstrap) as client:
        client.create_topic(
            "sized", partitions=2, config={"segment.bytes": 4096, "retention.bytes": 8192}
        )
        sent = {p: [f"{p}-{i:04}-".encode() + b"x" * 490 for i in range(100)] for p in range(2)}
        for p in range(2):
            for i in range(0, 100, 10):
                client.produce("sized", p, sent[p][i : i + 10])
        limit = 8192 + 4096 + 1024  # retention keeps whole segments: at most one more

        def within_limit() -> bool:
            return all(
                (hi - lo) * 500 <= limit
                for lo, hi in (client.offsets("sized", p) for p in range(2))
            )

        wait_until(within_limit, "retention", RETENTION_WAIT_S)
        for p in range(2):
            kept = values(client, "sized", p)
            assert kept == sent[p][-len(kept) :]  # the newest records, intact and in order
            assert 8192 <= sum(map(len, kept)) <= limit
    segments, freed = deleted(node)
    assert segments > 0 and freed >= 2 * (50_000 - 8192 - 2 * 4096)


def test_retention_ms_empties_a_quiet_partition(node: RunningNode) -> None:
    """No append, so no rollover: only the timer (rolling the segment at segment.ms,
    then applying retention.ms) can remove these records."""
    with Client(node.bootstrap) as client:
        client.create_topic("aged", partitions=2, config={"retention.ms": 500, "segment.ms": 300})
        for p in range(2):
            client.produce("aged", p, [b"old-1", b"old-2"])
        wait_until(lambda: expired(client, "aged", 2), "expiry", RETENTION_WAIT_S)
        first = client.produce("aged", 1, [b"new"])
        assert first == 2 and values(client, "aged", 1) == [b"new"]


def test_topic_alter_applies_to_a_live_topic(node: RunningNode) -> None:
    with Client(node.bootstrap) as client:
        client.create_topic("altered", partitions=2)
        client.create_topic(
            "witness", partitions=2, config={"retention.ms": 500, "segment.ms": 300}
        )
        for p in range(2):
            client.produce("altered", p, [b"a", b"b", b"c"])  # the logs are open now
            client.produce("witness", p, [b"a", b"b", b"c"])
        # Retention has run long enough to remove records that expire (the witness's)...
        wait_until(lambda: expired(client, "witness", 3), "the witness's expiry", RETENTION_WAIT_S)
        # ...and kept those of a topic without retention.ms.
        assert all(client.offsets("altered", p).lowest == 0 for p in range(2))
    result = laminar_cli(
        node,
        "topic", "alter", "altered", "--config", "retention.ms=500", "--config", "segment.ms=300",
        "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["config"] == {"retention.ms": 500, "segment.ms": 300}
    with Client(node.bootstrap) as client:
        wait_until(lambda: expired(client, "altered", 3), "expiry", RETENTION_WAIT_S)
        topic = client.alter_topic("altered", remove=["retention.ms", "segment.ms"])
        assert topic.config == {}
        assert client.describe_topic("altered").topic.config == {}
        # A new segment size reaches the open logs too.
        client.alter_topic("altered", config={"segment.bytes": 4096})
        for p in range(2):
            for _ in range(5):
                client.produce("altered", p, [b"s" * 1000] * 4)
    for p in range(2):
        stores = list((node.data_dir / "partitions").glob(f"{topic.topic_id}-{p}/*.store"))
        assert len(stores) >= 4, stores


def test_unknown_or_ill_typed_configs_are_refused(node: RunningNode) -> None:
    with Client(node.bootstrap) as client:
        client.create_topic("strict", partitions=1)
        with pytest.raises(InvalidRequestError, match=r"unknown topic config 'cleanup\.policy'"):
            client.alter_topic("strict", config={"cleanup.policy": "compact"})
        with pytest.raises(InvalidRequestError, match="must be an integer"):
            client.create_topic("loose", partitions=1, config={"retention.ms": "1d"})
    result = laminar_cli(node, "topic", "alter", "strict", "--config", "retention.bytes=-5")
    assert result.returncode == 1 and "retention.bytes must be an integer" in result.stderr
    result = laminar_cli(node, "topic", "alter", "strict")
    assert result.returncode == 2 and "--config KEY=VALUE" in result.stderr
