"""Bad input: every kind gets a clear error (or a closed connection), and the
node keeps serving everyone else with nothing lost and nothing half-appended.

One node serves the whole module (small frame limit, small segments, short
idle timeout), and every test ends by checking it still serves a well-behaved
client and that the records produced before are intact.
"""

from __future__ import annotations

import random
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from laminar.placement import partition_id
from laminar.wire import (
    MAGIC,
    VERSION,
    CreateTopicRequest,
    DeleteTopicRequest,
    ErrorCode,
    ErrorResponse,
    FetchRequest,
    ForwardRequest,
    ListOffsetsRequest,
    Ping,
    Pong,
    ProduceRequest,
    encode_frame,
)
from laminar.wire.records import check_record
from tests.support import wait_until
from tests.system.nodes import RunningNode, shard_stats, start_node
from tests.system.wireclient import NodeClient, ServerError, WireConnection

MAX_FRAME = 64 << 10
IDLE_S = 1.5
TOPIC = "good"
GOOD_VALUES = [f"kept-{i}".encode() for i in range(20)]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningNode]:
    tmp: Path = tmp_path_factory.mktemp("bad-input")
    with start_node(
        tmp,
        cores=2,
        max_frame_bytes=MAX_FRAME,
        segment_bytes=16384,
        idle_timeout=IDLE_S,
    ) as running:
        with NodeClient(running.host, running.port) as client:
            client.create_topic(TOPIC, 4)
            for p in range(4):
                client.produce(TOPIC, p, GOOD_VALUES)
        yield running
        assert_still_serving(running)


def assert_still_serving(node: RunningNode) -> None:
    """A fresh, well-behaved client is served, and the earlier records are intact."""
    assert node.alive()
    with NodeClient(node.host, node.port, via_node_port=True) as client:
        for p in range(4):
            assert client.fetch_all(TOPIC, p)[: len(GOOD_VALUES)] == GOOD_VALUES


def prefix(frame_len: int, *, magic: int = MAGIC, version: int = VERSION, op: int = 8) -> bytes:
    return struct.pack(">IBBBBIQ", frame_len, magic, version, op, 0, 77, 0)


def error_of(conn: WireConnection) -> ErrorResponse:
    response = conn.read_response()
    assert isinstance(response, ErrorResponse), response
    return response


def topic_id(node: RunningNode) -> int:
    with NodeClient(node.host, node.port) as client:
        return client.topic(TOPIC).topic_id


# -- framing errors: answered, then the connection is closed -------------------------


@pytest.mark.parametrize("port_kind", ["node", "shard"])
def test_malformed_header_length_is_answered_and_closed(node: RunningNode, port_kind: str) -> None:
    port = node.port if port_kind == "node" else node.shard_ports[1]
    with WireConnection(node.host, port) as conn:
        body = struct.pack(">I", 1000) + b"\x80"  # header_len past the frame's end
        conn.send_raw(prefix(16 + len(body)) + body)
        error = error_of(conn)
        assert error.code is ErrorCode.MALFORMED_FRAME and "header_len" in error.message
        assert conn.closed_by_peer()
    assert_still_serving(node)


def test_undecodable_msgpack_header(node: RunningNode) -> None:
    with WireConnection(node.host, node.port) as conn:
        header = b"\xc1\xc1"  # 0xc1 is never used in msgpack
        frame = prefix(16 + 4 + len(header)) + struct.pack(">I", len(header)) + header
        conn.send_raw(frame)
        error = error_of(conn)
        assert error.code is ErrorCode.MALFORMED_FRAME and "msgpack" in error.message
        assert conn.closed_by_peer()


def test_wrong_version_is_refused(node: RunningNode) -> None:
    with WireConnection(node.host, node.port) as conn:
        conn.send_raw(prefix(21, version=9) + struct.pack(">I", 1) + b"\x80")
        error = error_of(conn)
        assert error.code is ErrorCode.UNSUPPORTED_VERSION and "version 9" in error.message
        assert conn.closed_by_peer()


def test_foreign_traffic_is_dropped_without_an_answer(node: RunningNode) -> None:
    with WireConnection(node.host, node.port) as conn:
        conn.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert conn.read_frame() is None  # closed, nothing sent back


def test_oversized_frame_is_refused_before_its_body_arrives(node: RunningNode) -> None:
    with WireConnection(node.host, node.port) as conn:
        conn.send_raw(prefix(50 << 20))  # announces 50 MiB; no body follows
        error = error_of(conn)
        assert error.code is ErrorCode.FRAME_TOO_LARGE and str(MAX_FRAME) in error.message
        assert conn.closed_by_peer()
    assert_still_serving(node)


# -- request errors: answered, and the connection carries on -------------------------


def test_unknown_op_is_answered_and_the_connection_stays_usable(node: RunningNode) -> None:
    with WireConnection(node.host, node.port) as conn:
        conn.send_raw(encode_frame(31, 5, 0, {}))
        error = error_of(conn)
        assert error.code is ErrorCode.UNKNOWN_OP and error.op == 31
        assert isinstance(conn.call(Ping(0)), Pong)


def test_request_errors_name_the_problem(node: RunningNode) -> None:
    tid = topic_id(node)
    good = partition_id(tid, 0)

    def produce(topic: int, idx: int) -> ProduceRequest:
        return ProduceRequest.from_values(partition_id(topic, idx), [b"x"])

    cases: list[tuple[object, ErrorCode, str]] = [
        (produce(tid + 500, 0), ErrorCode.UNKNOWN_TOPIC, "no topic"),
        (produce(tid, 4), ErrorCode.UNKNOWN_PARTITION, "partitions 0..3"),
        (produce(0, 0), ErrorCode.UNKNOWN_TOPIC, "metadata"),
        (ProduceRequest(good, (b"\x0fgarbage",)), ErrorCode.CORRUPT_RECORD, "attrs"),
        (ProduceRequest(good, ()), ErrorCode.INVALID_REQUEST, "record"),
        (FetchRequest(good, 10_000), ErrorCode.OFFSET_OUT_OF_RANGE, "outside"),
        (FetchRequest(good, 0, max_bytes=0), ErrorCode.INVALID_REQUEST, "max_bytes"),
        (ListOffsetsRequest(partition_id(tid + 900, 2)), ErrorCode.UNKNOWN_TOPIC, "no topic"),
        (ForwardRequest(good, 1, Ping(good).encode(1)), ErrorCode.INVALID_REQUEST, "internal"),
        (CreateTopicRequest("bad name!", 3), ErrorCode.INVALID_REQUEST, "topic name"),
        (CreateTopicRequest("..", 3), ErrorCode.INVALID_REQUEST, "not '.' or '..'"),
        (CreateTopicRequest("zero", 0), ErrorCode.INVALID_REQUEST, "partitions"),
        (CreateTopicRequest(TOPIC, 2), ErrorCode.TOPIC_EXISTS, TOPIC),
        (DeleteTopicRequest("never-made"), ErrorCode.UNKNOWN_TOPIC, "never-made"),
    ]  # fmt: skip
    for via_node in (True, False):
        with NodeClient(node.host, node.port, via_node_port=via_node) as client:
            for request, code, words in cases:
                pid = getattr(request, "partition_id", 0)
                conn = client.conn_for(pid) if pid else client.node
                with pytest.raises(ServerError) as caught:
                    conn.call(request)  # type: ignore[arg-type]
                assert caught.value.code is code, (request, caught.value)
                assert words in caught.value.response.message, caught.value.response.message
    assert_still_serving(node)


def test_bad_header_fields_are_invalid_requests(node: RunningNode) -> None:
    good = partition_id(topic_id(node), 1)
    with WireConnection(node.host, node.port) as conn:
        conn.send_raw(
            encode_frame(
                2, 9, good, {"index": "zero", "max_bytes": 1, "max_records": 1, "max_wait_ms": 0}
            )
        )
        error = error_of(conn)
        assert error.code is ErrorCode.INVALID_REQUEST and "'index'" in error.message
        conn.send_raw(encode_frame(1, 10, good, {}, b"\x00\x00\x00\x05"))  # 5 records, no table
        error = error_of(conn)
        assert error.code is ErrorCode.INVALID_REQUEST
        conn.send_raw(encode_frame(8, 11, 0, {}, flags=1))  # a response sent as a request
        assert error_of(conn).code is ErrorCode.INVALID_REQUEST
        assert isinstance(conn.call(Ping(good)), Pong)  # fmt: skip


def test_batch_larger_than_a_segment_allows_is_refused_whole(node: RunningNode) -> None:
    with NodeClient(node.host, node.port) as client:
        before = client.offsets(TOPIC, 2).highest_index
        with pytest.raises(ServerError) as caught:
            client.produce(TOPIC, 2, [b"y" * 1000] * 40)  # 40 KB > 16 KiB segment + half
        assert caught.value.code is ErrorCode.RECORD_TOO_LARGE
        assert client.offsets(TOPIC, 2).highest_index == before


# -- clients that stall or vanish ----------------------------------------------------


def test_idle_and_half_frame_clients_are_disconnected(node: RunningNode) -> None:
    silent = socket.create_connection((node.host, node.port))
    half = socket.create_connection((node.host, node.shard_ports[0]))
    frame = ProduceRequest.from_values(partition_id(topic_id(node), 3), [b"z" * 100]).encode(1)
    half.sendall(frame[: len(frame) // 2])
    for sock in (silent, half):
        sock.settimeout(IDLE_S * 6)  # a liveness bound, not a measurement
        assert sock.recv(100) == b""  # closed by the node
        sock.close()
    with NodeClient(node.host, node.port) as client:
        assert client.fetch_all(TOPIC, 3) == GOOD_VALUES  # the half frame appended nothing


def test_disconnect_mid_request_appends_nothing(node: RunningNode) -> None:
    tid = topic_id(node)
    frame = ProduceRequest.from_values(partition_id(tid, 1), [b"cut" * 300] * 10).encode(4)
    for cut in (5, 20, 24, 100, len(frame) - 1):
        with socket.create_connection((node.host, node.port)) as sock:
            sock.sendall(frame[:cut])
    # Every shard has seen its cut connections end: whatever they could append, they did.
    wait_until(
        lambda: all(
            shard_stats(node, s)["client_connections"] == 0 for s in range(len(node.shard_ports))
        ),
        "the cut connections closed at the node",
    )
    with NodeClient(node.host, node.port) as client:
        assert client.fetch_all(TOPIC, 1) == GOOD_VALUES


# -- a small fuzz ----------------------------------------------------------------------


def _fuzz_frames(rng: random.Random, tid: int) -> Iterator[bytes]:
    valid = [
        ProduceRequest.from_values(partition_id(tid, rng.randrange(6)), [b"fz"] * 3).encode(1),
        FetchRequest(partition_id(tid, rng.randrange(6)), rng.randrange(50)).encode(2),
        ListOffsetsRequest(partition_id(tid, 1), timestamp_ms=5).encode(3),
        Ping(rng.getrandbits(64)).encode(4),
        encode_frame(4, 5, 0, {}),
        encode_frame(rng.randrange(256), 6, rng.getrandbits(64), {"a": [1, {"b": None}]}),
    ]
    for _ in range(40):
        kind = rng.randrange(4)
        if kind == 0:
            yield bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 80)))
        elif kind == 1:
            data = bytearray(rng.choice(valid))
            for _ in range(rng.randrange(1, 6)):
                data[rng.randrange(len(data))] = rng.getrandbits(8)
            yield bytes(data)
        elif kind == 2:
            header = msgpack.packb({"index": rng.choice([-1, 2**64 - 1, 1.5, "x", None, 3])})
            pid = partition_id(tid, rng.randrange(6))
            yield (
                prefix(20 + len(header), op=rng.choice([1, 2, 3]))[:12]
                + pid.to_bytes(8, "big")
                + struct.pack(">I", len(header))
                + header
            )
        else:
            data = rng.choice(valid)
            yield data[: rng.randrange(len(data))]


def test_random_frames_never_break_the_node(node: RunningNode) -> None:
    rng = random.Random(4)
    tid = topic_id(node)
    for round_ in range(60):
        port = rng.choice([node.port, *node.shard_ports])
        with socket.create_connection((node.host, port)) as sock:
            sock.settimeout(2)
            for data in _fuzz_frames(rng, tid):
                try:
                    sock.sendall(data)
                except OSError:
                    break  # the node closed it after a fatal framing error
            try:
                sock.shutdown(socket.SHUT_WR)
                while sock.recv(65536):
                    pass
            except OSError:
                pass  # reset, or already closed by the node
        if round_ % 10 == 9:
            assert_still_serving(node)
    # Whatever was appended by a mutated-but-valid produce is a whole, valid batch.
    with NodeClient(node.host, node.port) as client:
        for p in range(4):
            response = client.fetch(TOPIC, p, 0, max_bytes=1 << 20)
            for record in response.records:
                check_record(record.blob)
