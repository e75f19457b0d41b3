"""A node starts, reports itself, and serves topics across its shards."""

from __future__ import annotations

import json
import urllib.request

from laminar.placement import partition_id, shard_for
from laminar.wire import ListOffsetsRequest
from tests.system.bpf_env import AUTO_ROUTING
from tests.system.nodes import RunningNode
from tests.system.wireclient import NodeClient


def test_node_reports_ports_shards_and_routing_mode(node: RunningNode) -> None:
    with NodeClient(node.host, node.port) as client:
        meta = client.meta
        assert meta.port == node.port
        assert [s.port for s in meta.shards] == node.shard_ports
        assert [s.shard_id for s in meta.shards] == [0, 1]
        assert meta.routing_mode == AUTO_ROUTING == node.routing_mode
        assert meta.topics == ()
    with urllib.request.urlopen(node.admin_url + "/health", timeout=10) as reply:
        health = json.load(reply)
    assert health["status"] == "ok" and health["shards_down"] == []


def test_ping_is_answered_by_the_owning_shard_on_every_port(node: RunningNode) -> None:
    """Shard-direct and node-port pings alike are served by the partition's owner."""
    with (
        NodeClient(node.host, node.port, via_node_port=True) as via_node,
        NodeClient(node.host, node.port) as direct,
    ):
        for topic_id in range(1, 40):
            pid = partition_id(topic_id, topic_id % 7)
            owner = shard_for(pid, 2)
            assert via_node.ping(pid).shard_id == owner
            pong = direct.ping(pid)
            assert pong.shard_id == owner == pong.received_by


def test_produce_and_fetch_across_partitions_and_shards(node: RunningNode) -> None:
    with NodeClient(node.host, node.port) as client:
        client.create_topic("events", 16)
        owners = {client.owner(client.pid("events", p)) for p in range(16)}
        assert owners == {0, 1}
        for p in range(16):
            values = [f"{p}-{i}".encode() for i in range(25)]
            first = client.produce("events", p, values[:10]).first_index
            assert first == 0
            assert client.produce("events", p, values[10:]).first_index == 10
        for p in range(16):
            assert client.fetch_all("events", p) == [f"{p}-{i}".encode() for i in range(25)]
            offsets = client.offsets("events", p)
            assert (offsets.lowest_index, offsets.highest_index) == (0, 25)


def test_offsets_by_timestamp_and_broker_timestamps(node: RunningNode) -> None:
    with NodeClient(node.host, node.port) as client:
        client.create_topic("times", 1)
        first = client.produce("times", 0, [b"a", b"b"])
        second = client.produce("times", 0, [b"c"])
        assert second.timestamp_ms >= first.timestamp_ms > 0
        records = client.fetch("times", 0, 0).records
        assert [r.timestamp_ms for r in records] == [first.timestamp_ms] * 2 + [second.timestamp_ms]
        pid = client.pid("times", 0)
        conn = client.conn_for(pid)
        at_first = conn.call(ListOffsetsRequest(pid, timestamp_ms=first.timestamp_ms))
        assert (at_first.lowest_index, at_first.highest_index, at_first.committed_index) == (
            0,
            3,
            3,
        )
        assert at_first.timestamp_index == 0
        later = conn.call(ListOffsetsRequest(pid, timestamp_ms=second.timestamp_ms + 60_000))
        assert later.timestamp_index == 3
