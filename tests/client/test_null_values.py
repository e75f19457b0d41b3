"""Kafka tombstones (null values) and null headers, stored as the Kafka door
stores them, read as None through laminar's own clients over the wire."""

from __future__ import annotations

import asyncio
import socket

from kafka.record.default_records import DefaultRecordBatchBuilder

from laminar.client import AsyncClient, Client
from laminar.kafka.batches import decode_produce
from laminar.placement import partition_id
from laminar.wire import ProduceRequest, encode_frame
from tests.support import wait_until

from .fakenode import NODE, FakeNode

RECORDS = [  # key, value, headers as a Kafka producer sends them
    (b"user-1", b"alice", [("h", b"x")]),
    (b"user-1", None, []),  # the tombstone
    (None, b"", [("gone", None)]),  # empty value, null header
]
EXPECTED = [
    (b"alice", b"user-1", {"h": b"x"}),
    (None, b"user-1", None),
    (b"", None, {"gone": None}),
]


def store_kafka_batch(node: FakeNode, pid: int) -> None:
    """Produce the blobs the Kafka door makes of a kafka-python batch, as a
    plain laminar produce frame on the node's socket."""
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for k, (key, value, headers) in enumerate(RECORDS):
        builder.append(k, timestamp=None, key=key, value=value, headers=headers)
    blobs = decode_produce(bytes(builder.build()), max_bytes=1 << 20).blobs
    frame = ProduceRequest(pid, blobs).to_frame(1)
    data = encode_frame(frame.op, 1, pid, frame.header, frame.payload, flags=frame.flags)
    with socket.create_connection(("127.0.0.1", node.port(NODE))) as sock:
        sock.sendall(data)
        wait_until(lambda: len(node.records(pid)) == len(RECORDS), "the batch stored")


def test_tombstones_read_as_none_through_both_clients(node: FakeNode) -> None:
    with Client(node.bootstrap) as c:
        topic = c.create_topic("compacted", partitions=1)
        store_kafka_batch(node, partition_id(topic.topic_id, 0))
        got = [(r.value, r.key, r.headers) for r in c.fetch("compacted", 0, 0)]
        assert got == EXPECTED
        batch = c.fetch_batch("compacted", 0, 0)
        assert [(r.value, r.key, r.headers) for r in batch] == EXPECTED
        assert batch.to_arrow().column("value").to_pylist() == [b"alice", None, b""]

    async def read() -> list[tuple[bytes | None, bytes | None, object]]:
        async with AsyncClient(node.bootstrap) as ac:
            return [(r.value, r.key, r.headers) for r in await ac.fetch("compacted", 0, 0)]

    assert asyncio.run(read()) == EXPECTED
