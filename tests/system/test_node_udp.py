"""Requests over UDP on the node port, in the routing mode `auto` picks (the
owner serves whichever shard receives; test_routing_*.py covers each mode).

UDP serves reads by default: a datagram's source can be forged, so writes need
`--udp-writes`, answers fit one Ethernet frame, and nothing long-polls."""

from __future__ import annotations

import socket
from pathlib import Path

from laminar.client.udp import padded
from laminar.placement import partition_id, shard_for
from laminar.wire import (
    CreateTopicRequest,
    ErrorCode,
    ErrorResponse,
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    Ping,
    Pong,
    ProduceRequest,
    ProduceResponse,
    decode_frame,
    decode_response,
)
from tests.system.nodes import RunningNode, start_node
from tests.system.wireclient import NodeClient


def udp_call(sock: socket.socket, node: RunningNode, data: bytes) -> object:
    sock.sendto(data, (node.host, node.port))
    reply, _ = sock.recvfrom(65536)
    assert len(reply) <= 1472  # one Ethernet frame, whatever was asked
    return decode_response(decode_frame(reply))


def use_tcp(answer: object, words: str) -> bool:
    return (
        isinstance(answer, ErrorResponse)
        and answer.code is ErrorCode.USE_TCP
        and words in answer.message
    )


def test_udp_serves_reads_from_the_owning_shard(node: RunningNode) -> None:
    with NodeClient(node.host, node.port) as client:
        topic = client.create_topic("udp", 8)
        for p in range(8):
            client.produce("udp", p, [b"u1", b"u2"])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(10)
        for p in range(8):
            pid = partition_id(topic.topic_id, p)
            pong = udp_call(sock, node, Ping(pid).encode(p))
            assert isinstance(pong, Pong) and pong.shard_id == shard_for(pid, 2)
            fetched = udp_call(sock, node, FetchRequest(pid, 0).encode(2))
            assert isinstance(fetched, FetchResponse)
            assert [r.decode()[0] for r in fetched.records] == [b"u1", b"u2"]
        # An answer bigger than one frame is refused with USE_TCP: a request
        # can no longer draw 64 KiB.
        big = partition_id(topic.topic_id, 0)
        with NodeClient(node.host, node.port) as client:
            client.produce("udp", 0, [b"b" * 3000] * 3)
        refused = udp_call(sock, node, padded(FetchRequest(big, 2).to_frame(3), 600))
        assert use_tcp(refused, "does not fit a datagram")
        # Foreign datagrams are dropped; the socket keeps serving.
        sock.sendto(b"\x00\x00\x00\x10\x00garbage", (node.host, node.port))
        assert isinstance(udp_call(sock, node, Ping(0).encode(9)), Pong)


def test_an_answer_is_at_most_three_times_its_request(node: RunningNode) -> None:
    """A forged 73-byte fetch drew 1,472 bytes at its victim (20x; 59x at its
    smallest): now an answer over 3x the request (or 100 bytes) is a short
    USE_TCP, and a client that wants the records pads its request."""
    with NodeClient(node.host, node.port) as client:
        topic = client.create_topic("amplify", 1)
        client.produce("amplify", 0, [b"a" * 1000])
    request = FetchRequest(partition_id(topic.topic_id, 0), 0, max_bytes=1200)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(10)
        for data in (request.encode(5), padded(request.to_frame(5), 200)):
            sock.sendto(data, (node.host, node.port))
            reply, _ = sock.recvfrom(65536)
            assert len(reply) <= 3 * len(data)
            assert use_tcp(decode_response(decode_frame(reply)), "pad the request")
        fetched = udp_call(sock, node, padded(request.to_frame(6), -(-1472 // 3)))
    assert isinstance(fetched, FetchResponse)
    assert [r.decode()[0] for r in fetched.records] == [b"a" * 1000]


def test_udp_refuses_writes_and_long_polls_by_default(node: RunningNode) -> None:
    with NodeClient(node.host, node.port) as client:
        topic = client.create_topic("udp-ro", 2)
    pid = partition_id(topic.topic_id, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(10)
        produce = ProduceRequest.from_values(pid, [b"forged"]).encode(1)
        assert use_tcp(udp_call(sock, node, produce), "--udp-writes")
        create = CreateTopicRequest("from-udp", 1).encode(2)
        assert use_tcp(udp_call(sock, node, create), "--udp-writes")
        poll = FetchRequest(pid, 0, max_wait_ms=30_000).encode(3)
        assert use_tcp(udp_call(sock, node, poll), "long-poll over TCP")
        metadata = udp_call(sock, node, padded(MetadataRequest().to_frame(4), 491))  # served
        assert isinstance(metadata, MetadataResponse) and metadata.port == node.port
    with NodeClient(node.host, node.port) as client:
        assert client.fetch_all("udp-ro", 1) == []
        assert "from-udp" not in {t.name for t in client.list_topics()}


def test_udp_writes_when_the_node_allows_them(tmp_path: Path) -> None:
    with start_node(tmp_path, cores=2, udp_writes=True) as node:
        with NodeClient(node.host, node.port) as client:
            topic = client.create_topic("udp-rw", 4)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(10)
            for p in range(4):
                pid = partition_id(topic.topic_id, p)
                request = ProduceRequest.from_values(pid, [b"u1", b"u2"]).encode(1)
                produced = udp_call(sock, node, request)
                assert isinstance(produced, ProduceResponse) and produced.count == 2
        with NodeClient(node.host, node.port) as client:
            assert client.fetch_all("udp-rw", 3) == [b"u1", b"u2"]
