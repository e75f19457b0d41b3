"""Choosing partitions when the caller names none: `StickyPartitioner` and `send`."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from laminar.client import AsyncClient, Client, Sent, partition_for_key
from laminar.client.partitioner import StickyPartitioner

from .conftest import Runner
from .fakenode import FakeNode


def test_keyed_records_go_to_their_keys_partition_every_time() -> None:
    partitioner = StickyPartitioner(random.Random(1))
    keys = [f"user-{i}".encode() for i in range(50)]
    for _ in range(3):
        groups = partitioner.assign("t", 7, keys, len(keys))
        assert {i: p for p, rows in groups.items() for i in rows} == {
            i: partition_for_key(key, 7) for i, key in enumerate(keys)
        }
    # Stable: the partitions keys went to before (xxh64 modulo the count) stay theirs.
    examples = [(b"user-1", 4), (b"user-1", 7), (b"order-42", 16), (b"", 3)]
    assert [partition_for_key(key, n) for key, n in examples] == [0, 1, 14, 0]


def test_keyless_batches_stick_to_one_partition_and_take_turns() -> None:
    partitioner = StickyPartitioner(random.Random(7))
    chosen = []
    for _ in range(12):
        groups = partitioner.assign("t", 4, None, 5)
        [(partition, rows)] = groups.items()  # the whole batch in one partition
        assert rows == [0, 1, 2, 3, 4]
        chosen.append(partition)
    first = chosen[0]
    assert chosen == [(first + i) % 4 for i in range(12)]
    assert Counter(chosen) == {0: 3, 1: 3, 2: 3, 3: 3}


def test_each_partitioner_starts_at_a_random_partition() -> None:
    """One-shot producers (a CLI call per record) spread too."""
    starts = {next(iter(StickyPartitioner().assign("t", 8, None, 1))) for _ in range(200)}
    assert len(starts) > 4


def test_a_batch_mixing_keys_splits_by_key_and_keeps_order() -> None:
    partitioner = StickyPartitioner(random.Random(3))
    keys = [b"a", None, b"b", None, b"a"]
    groups = partitioner.assign("t", 3, keys, 5)
    sticky = next(p for p, rows in groups.items() if 1 in rows)
    expected: dict[int, list[int]] = {}
    for i, key in enumerate(keys):
        expected.setdefault(sticky if key is None else partition_for_key(key, 3), []).append(i)
    assert groups == expected
    with pytest.raises(ValueError, match="2 keys for 5 values"):
        partitioner.assign("t", 3, [b"a", b"b"], 5)


def _stored(node: FakeNode, client: Client, topic: str) -> dict[int, list[bytes]]:
    """Each partition's values as the node holds them."""
    info = client.cluster.topic(topic)
    return {
        p: [r.value for r in client.fetch(topic, p, 0)]
        for p in range(info.partitions)
        if node.records((info.topic_id << 32) | p)
    }


def test_send_spreads_keyless_batches_and_puts_keyed_records_by_key(node: FakeNode) -> None:
    with Client(node.bootstrap) as client:
        client.create_topic("spread", partitions=4)
        sent = [client.send("spread", [f"b{b}-{i}".encode() for i in range(5)]) for b in range(8)]
        assert all(len(s) == 1 and s[0].records == 5 for s in sent)
        keyed = client.send("spread", [b"k1", b"k2", b"k3"], keys=[b"x", b"y", b"x"])
        stored = _stored(node, client, "spread")
        for s in keyed:  # first_index is where the group starts
            assert client.fetch("spread", s.partition, s.first_index)[0].key == (
                b"x" if partition_for_key(b"x", 4) == s.partition else b"y"
            )
    batches = [s[0].partition for s in sent]
    assert Counter(batches) == {0: 2, 1: 2, 2: 2, 3: 2}
    # By identity: every value once, each batch whole and in order in its partition.
    for b, partition in enumerate(batches):
        values = [f"b{b}-{i}".encode() for i in range(5)]
        at = stored[partition].index(values[0])
        assert stored[partition][at : at + 5] == values
    assert sum(len(v) for v in stored.values()) == 43
    expected: dict[int, list[bytes]] = {}
    for value, key in [(b"k1", b"x"), (b"k2", b"y"), (b"k3", b"x")]:
        expected.setdefault(partition_for_key(key, 4), []).append(value)
    assert {s.partition: s.records for s in keyed} == {p: len(v) for p, v in expected.items()}
    for s in keyed:
        assert stored[s.partition][-s.records :] == expected[s.partition]


def test_async_send_spreads_keyless_batches(node: FakeNode, run: Runner) -> None:
    async def main() -> list[list[Sent]]:
        async with AsyncClient(node.bootstrap) as client:
            await client.create_topic("aspread", partitions=3)
            return [await client.send("aspread", [b"a", b"b"]) for _ in range(6)]

    sent = run(main())
    assert Counter(s[0].partition for s in sent) == {0: 2, 1: 2, 2: 2}
    assert all(s[0].records == 2 for s in sent)
