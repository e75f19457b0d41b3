"""Coalesced writes against a real node: answers leave together, never late.

The node writes every answer completed in one loop iteration in one gathering
send (`laminar.outbox`), and plain produces and fetches skip the per-request
task (`laminar.shards.fastpath`). These tests hold the contract around that:
pipelined requests are each answered once with their own correlation id and
their own records; a lone request is answered without more traffic behind it;
a connection whose client stops reading holds up nobody else.
"""

from __future__ import annotations

import asyncio
import random

from laminar.client import AsyncClient, Client
from laminar.wire import (
    ErrorResponse,
    FetchRequest,
    FetchResponse,
    Ping,
    Pong,
    ProduceRequest,
    ProduceResponse,
    decode_response,
)
from tests.system.nodes import RunningNode
from tests.system.wireclient import NodeClient, WireConnection

ANSWER_TIMEOUT_S = 30.0
"""A liveness bound (an answer that never comes fails the test), not a timing."""


def _shard_conn(client: NodeClient, pid: int) -> WireConnection:
    shard = client.meta.shards[client.owner(pid)]
    conn = WireConnection(shard.host, shard.port, timeout=ANSWER_TIMEOUT_S)
    return conn


def test_pipelined_requests_are_each_answered_with_their_own_id(node: RunningNode) -> None:
    """500 requests written in one burst on one connection (produces and
    fetches taking the fast path, produces to a partition of the other shard
    that must be forwarded, pings taking the general path, one bad produce):
    every correlation id is answered exactly once, with the answer to its own
    request; each produce's record sits at the index its answer names, and each
    fetch answer holds exactly the records stored at its indexes."""
    rng = random.Random(13)
    with NodeClient(node.host, node.port) as client:
        client.create_topic("burst", 2)
        pids = [client.pid("burst", p) for p in range(2)]
        local, other = (pids[0], pids[1])
        if client.owner(local) == client.owner(other):
            other = local  # both on one shard: no forwarding, still a mixed burst
        for p in range(2):  # open the logs: the fast path serves only open ones
            client.produce("burst", p, [b"opening"])
        conn = _shard_conn(client, local)
        try:
            ids = rng.sample(range(1, 1 << 32), 500)
            sent: dict[int, tuple[str, object]] = {}
            burst = []
            for n, corr in enumerate(ids):
                kind = rng.choice(["produce", "produce", "produce", "forward", "ping", "fetch"])
                if n == 250:
                    kind = "bad"
                if kind in ("produce", "forward"):
                    pid = local if kind == "produce" else other
                    value = f"record {n} corr {corr}".encode()
                    burst.append(ProduceRequest.from_values(pid, [value]).encode(corr))
                    sent[corr] = ("produce", (pid, value))
                elif kind == "ping":
                    burst.append(Ping(local).encode(corr))
                    sent[corr] = ("ping", None)
                elif kind == "fetch":
                    burst.append(FetchRequest(local, 0, max_bytes=1 << 16).encode(corr))
                    sent[corr] = ("fetch", None)
                else:  # a produce with no record: refused, and the connection carries on
                    burst.append(ProduceRequest(local, ()).encode(corr))
                    sent[corr] = ("bad", None)
            conn.send_raw(b"".join(burst))
            answers: dict[int, object] = {}
            for _ in ids:
                frame = conn.read_frame()
                assert frame is not None, "the node closed the connection mid-burst"
                assert frame.correlation_id in sent, frame.correlation_id
                assert frame.correlation_id not in answers, "answered twice"
                answers[frame.correlation_id] = decode_response(frame)
        finally:
            conn.close()
        placed: dict[tuple[int, int], bytes] = {}
        fetches: list[FetchResponse] = []
        for corr, (kind, what) in sent.items():
            answer = answers[corr]
            if kind == "produce":
                pid, value = what  # type: ignore[misc]
                assert isinstance(answer, ProduceResponse), answer
                assert answer.partition_id == pid and answer.count == 1
                assert (pid, answer.first_index) not in placed, "two answers name one index"
                placed[(pid, answer.first_index)] = value
            elif kind == "ping":
                assert isinstance(answer, Pong)
            elif kind == "fetch":
                assert isinstance(answer, FetchResponse)
                fetches.append(answer)
            else:
                assert isinstance(answer, ErrorResponse)
        # Identity: every acknowledged record is at its index, once.
        for p, pid in enumerate(pids):
            stored = client.fetch_all("burst", p)
            if pid == local:
                for fetched in fetches:
                    indexes = [r.index for r in fetched.records]
                    assert indexes == list(range(len(indexes))) and indexes
                    assert [r.decode()[0] for r in fetched.records] == stored[: len(indexes)]
            mine = {index: value for (q, index), value in placed.items() if q == pid}
            for index, value in mine.items():
                assert stored[index] == value
            assert stored[0] == b"opening"
            assert sorted(stored[1:]) == sorted(mine.values())


def test_a_lone_request_is_answered_without_more_traffic(node: RunningNode) -> None:
    """One request, nothing after it, on the raw wire and through both client
    libraries: each is answered (a writer that waited for company would hang)."""
    with NodeClient(node.host, node.port) as client:
        client.create_topic("lone", 1)
        pid = client.pid("lone", 0)
        conn = _shard_conn(client, pid)
        try:
            for n in range(3):
                conn.send(ProduceRequest.from_values(pid, [b"alone %d" % n]))
                answer = conn.read_response()
                assert isinstance(answer, ProduceResponse) and answer.first_index == n
        finally:
            conn.close()
    with Client(node.bootstrap, timeout_s=ANSWER_TIMEOUT_S) as sync_client:
        assert sync_client.produce("lone", 0, [b"sync"]) == 3

    async def one_async() -> int:
        async with AsyncClient(node.bootstrap, timeout_s=ANSWER_TIMEOUT_S) as c:
            return await c.produce("lone", 0, [b"async"])

    assert asyncio.run(one_async()) == 4


def test_a_client_that_stops_reading_holds_up_no_other_connection(node: RunningNode) -> None:
    """Connection A asks for 32 MiB of fetch answers and reads none of them; its
    answers back up in the node (bounded) while connection B to the same shard
    produces and fetches normally. Then A reads everything it was owed."""
    with NodeClient(node.host, node.port) as client:
        client.create_topic("slow", 1)
        pid = client.pid("slow", 0)
        value = bytes(range(256)) * 4
        for _ in range(8):
            client.produce("slow", 0, [value] * 128)  # 1 MiB
        slow = _shard_conn(client, pid)
        fast = _shard_conn(client, pid)
        try:
            asked = [slow.send(FetchRequest(pid, 0, max_bytes=1 << 20)) for _ in range(32)]
            for n in range(20):
                fast.send(ProduceRequest.from_values(pid, [b"fast %d" % n]))
                answer = fast.read_response()
                assert isinstance(answer, ProduceResponse), answer
                fetched = fast.call(FetchRequest(pid, answer.first_index, max_bytes=64))
                assert fetched.records[0].decode()[0] == b"fast %d" % n
            got = []
            for _ in asked:
                frame = slow.read_frame()
                assert frame is not None
                response = decode_response(frame)
                assert isinstance(response, FetchResponse) and len(response.records) > 1000
                assert response.records[0].index == 0
                got.append(frame.correlation_id)
            assert sorted(got) == sorted(asked)
        finally:
            slow.close()
            fast.close()
