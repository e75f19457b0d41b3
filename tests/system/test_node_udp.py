"""Requests over UDP on the node port, in the routing mode `auto` picks (the
owner serves whichever shard receives; test_routing_*.py covers each mode)."""

from __future__ import annotations

import socket

from laminar.placement import partition_id, shard_for
from laminar.wire import (
    ErrorCode,
    ErrorResponse,
    FetchRequest,
    FetchResponse,
    Ping,
    Pong,
    ProduceRequest,
    ProduceResponse,
    decode_frame,
    decode_response,
)
from tests.system.nodes import RunningNode
from tests.system.wireclient import NodeClient


def udp_call(sock: socket.socket, node: RunningNode, data: bytes) -> object:
    sock.sendto(data, (node.host, node.port))
    reply, _ = sock.recvfrom(65536)
    return decode_response(decode_frame(reply))


def test_udp_requests_are_served_by_the_owning_shard(node: RunningNode) -> None:
    with NodeClient(node.host, node.port) as client:
        topic = client.create_topic("udp", 8)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(10)
        for p in range(8):
            pid = partition_id(topic.topic_id, p)
            pong = udp_call(sock, node, Ping(pid).encode(p))
            assert isinstance(pong, Pong) and pong.shard_id == shard_for(pid, 2)
            produced = udp_call(
                sock, node, ProduceRequest.from_values(pid, [b"u1", b"u2"]).encode(1)
            )
            assert isinstance(produced, ProduceResponse) and produced.count == 2
            fetched = udp_call(sock, node, FetchRequest(pid, 0).encode(2))
            assert isinstance(fetched, FetchResponse)
            assert [r.decode()[0] for r in fetched.records] == [b"u1", b"u2"]
        # An answer too big for a datagram is refused with USE_TCP.
        big = partition_id(topic.topic_id, 0)
        with NodeClient(node.host, node.port) as client:
            client.produce("udp", 0, [b"b" * 30000] * 3)
        refused = udp_call(sock, node, FetchRequest(big, 2).encode(3))
        assert isinstance(refused, ErrorResponse) and refused.code is ErrorCode.USE_TCP
        # Foreign datagrams are dropped; the socket keeps serving.
        sock.sendto(b"\x00\x00\x00\x10\x00garbage", (node.host, node.port))
        assert isinstance(udp_call(sock, node, Ping(0).encode(9)), Pong)
