"""Idempotent produce against a real `laminar-node`: duplicates are answered,
not appended; gaps are refused; the producer table survives restarts."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from laminar.client import Client, DuplicateSequenceError, OutOfOrderSequenceError
from laminar.client.sync import Pending
from laminar.shards.idempotence import BATCHES_MAX
from laminar.wire import ErrorCode, ProduceRequest
from tests.system.nodes import RunningNode, start_node
from tests.system.wireclient import NodeClient, ServerError

PRODUCER = 0x1234_5678_9ABC_DEF0


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningNode]:
    with start_node(tmp_path_factory.mktemp("idem"), cores=2) as running:
        yield running


@pytest.fixture
def client(node: RunningNode) -> Iterator[Client]:
    with Client(node.bootstrap) as c:
        yield c


def _values(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


def test_a_resent_batch_is_answered_with_its_original_index(client: Client) -> None:
    client.create_topic("resend", partitions=2)
    first = client.produce("resend", 1, _values(3, "a"), producer_id=PRODUCER, sequence=0)
    again = client.produce("resend", 1, _values(3, "a"), producer_id=PRODUCER, sequence=0)
    assert again == first
    assert client.offsets("resend", 1).highest == first + 3
    nxt = client.produce("resend", 1, _values(2, "b"), producer_id=PRODUCER, sequence=3)
    assert nxt == first + 3
    values = [r.value for r in client.fetch("resend", 1, 0)]
    assert values == _values(3, "a") + _values(2, "b")
    # The other partition keeps its own sequence for the same producer.
    assert client.produce("resend", 0, [b"x"], producer_id=PRODUCER, sequence=0) == 0


def test_a_gap_is_refused_and_nothing_is_appended(client: Client) -> None:
    client.create_topic("gap", partitions=1)
    client.produce("gap", 0, _values(2, "a"), producer_id=PRODUCER, sequence=0)
    with pytest.raises(OutOfOrderSequenceError, match="must continue at sequence 2"):
        client.produce("gap", 0, [b"late"], producer_id=PRODUCER, sequence=5)
    assert client.offsets("gap", 0).highest == 2


def test_a_forgotten_duplicate_is_reported_not_appended(client: Client) -> None:
    """A caller naming its own producer sends an answered batch again, after
    more than the node remembers: reported, not appended. (The client's own
    resends never get this far: `test_producer_window`.)"""
    client.create_topic("forgotten", partitions=1)
    for i in range(BATCHES_MAX + 2):
        client.produce("forgotten", 0, [b"%d" % i], producer_id=PRODUCER, sequence=i)
    with pytest.raises(DuplicateSequenceError, match="appended before"):
        client.produce("forgotten", 0, [b"0"], producer_id=PRODUCER, sequence=0)
    assert client.offsets("forgotten", 0).highest == BATCHES_MAX + 2


def test_pipelined_batches_of_one_producer_keep_their_order(client: Client) -> None:
    """Twenty batches pipelined (the client's window lets `PRODUCER_WINDOW` =
    `BATCHES_MAX` out at a time), then all twenty sent again although answered:
    the node still knows the last `BATCHES_MAX`, the older ones are reported."""
    client.create_topic("pipelined", partitions=1)
    pending = [
        client.produce_nowait("pipelined", 0, _values(4, f"b{i}"), producer_id=7, sequence=4 * i)
        for i in range(20)
    ]
    firsts = [p.result() for p in pending]
    assert firsts == [4 * i for i in range(20)]
    resent = [
        client.produce_nowait("pipelined", 0, _values(4, f"b{i}"), producer_id=7, sequence=4 * i)
        for i in range(20)
    ]
    for i, p in enumerate(resent[-BATCHES_MAX:], start=20 - BATCHES_MAX):
        assert p.result() == 4 * i
    for p in resent[: 20 - BATCHES_MAX]:
        with pytest.raises(DuplicateSequenceError):
            p.result()
    assert client.offsets("pipelined", 0).highest == 80


def test_a_sliding_window_of_batches_is_applied_in_arrival_order(client: Client) -> None:
    """New batches arrive while earlier ones complete (a pipelining producer
    keeping 64 pending, of which the client's window sends `PRODUCER_WINDOW`):
    each must be decided after every batch that arrived before it, never ahead
    of a waiting one (which would refuse it as out of order)."""
    client.create_topic("window", partitions=1)
    window: list[tuple[int, Pending[int]]] = []
    firsts = []
    for i in range(2000):
        call = client.produce_nowait("window", 0, [b"w%d" % i], producer_id=8, sequence=i)
        window.append((i, call))
        if len(window) == 64:
            firsts.append(window.pop(0)[1].result())
    firsts += [call.result() for _, call in window]
    assert firsts == list(range(2000))
    assert [r.value for r in client.fetch("window", 0, 0, max_records=2000)] == [
        b"w%d" % i for i in range(2000)
    ]


def test_a_stamp_that_does_not_match_the_request_is_refused(node: RunningNode) -> None:
    with NodeClient(node.host, node.port) as wc:
        wc.create_topic("badstamp", 1)
        pid = wc.pid("badstamp", 0)
        conn = wc.conn_for(pid)
        stamped = ProduceRequest.from_values(pid, [b"a", b"b"], producer_id=1, sequence=0)
        lying = ProduceRequest(pid, stamped.blobs, producer_id=1, sequence=5)
        with pytest.raises(ServerError, match="must carry") as refused:
            conn.call(lying)
        assert refused.value.code is ErrorCode.INVALID_REQUEST
        with pytest.raises(ServerError, match="must carry"):
            conn.call(ProduceRequest(pid, (b"\x00a",), producer_id=1, sequence=0))
        twice = ProduceRequest(pid, (stamped.blobs[0], stamped.blobs[0]), 1, 0)
        with pytest.raises(ServerError, match="only the first record"):
            conn.call(twice)
        assert conn.call(stamped).first_index == 0
        # The producer is known now, so its next batches take the fast path:
        # the stamp is checked there too (a count that lies, another sequence).
        following = ProduceRequest.from_values(pid, [b"c"], producer_id=1, sequence=2)
        for lie in (following.blobs[0], stamped.blobs[0]):
            with pytest.raises(ServerError, match="must carry"):
                conn.call(ProduceRequest(pid, (lie, b"\x00d"), producer_id=1, sequence=2))
        assert conn.call(following).first_index == 2
        assert wc.offsets("badstamp", 0).highest_index == 3


def test_the_stamp_header_name_is_reserved_for_the_client(client: Client) -> None:
    client.create_topic("reserved", partitions=1)
    with pytest.raises(ValueError, match="reserved"):
        client.produce(
            "reserved", 0, [b"a"], headers=[{"laminar.producer": b"x"}], producer_id=1, sequence=0
        )


def test_a_plain_produce_cannot_plant_a_stamp(tmp_path: Path) -> None:
    """A plain produce carrying the reserved stamp header used to be stored, and
    the stamp trusted when the table was rebuilt after a restart: the real
    producer's first batch was then answered as a duplicate and never appended.
    Decoding refuses the header in plain produces, so every stamp in a log is
    one the node checked."""
    victim = 0x5EED
    forged = ProduceRequest.from_values(0, [b"forged"], producer_id=victim, sequence=1000)
    node = start_node(tmp_path, cores=2)
    try:
        with NodeClient(node.host, node.port) as wc:
            wc.create_topic("planted", 1)
            pid = wc.pid("planted", 0)
            conn = wc.conn_for(pid)
            conn.call(ProduceRequest.from_values(pid, [b"opens the log"]))  # for the fast path
            with pytest.raises(ServerError, match="reserved") as refused:
                conn.call(ProduceRequest(pid, forged.blobs))
            assert refused.value.code is ErrorCode.INVALID_REQUEST
        node = node.restart()
        with Client(node.bootstrap) as c:
            first = c.produce("planted", 0, [b"real"], producer_id=victim, sequence=0)
            assert [r.value for r in c.fetch("planted", 0, first)] == [b"real"]
    finally:
        node.kill()


@pytest.mark.parametrize("how", ["restart", "crash"])
def test_the_table_survives_a_node_restart(tmp_path: Path, how: str) -> None:
    node = start_node(tmp_path, cores=2)
    try:
        with Client(node.bootstrap) as c:
            c.create_topic("durable", partitions=3)
            c.produce("durable", 2, [b"noise"])
            for i in range(5):
                c.produce("durable", 2, _values(3, f"p{i}"), producer_id=PRODUCER, sequence=3 * i)
                c.produce("durable", 2, [b"other"], producer_id=99, sequence=i)
        if how == "crash":
            node.kill()
        node = node.restart()
        with Client(node.bootstrap) as c:
            # The last batch is answered with its index, not appended again.
            assert (
                c.produce("durable", 2, _values(3, "p4"), producer_id=PRODUCER, sequence=12) == 17
            )
            with pytest.raises(OutOfOrderSequenceError):
                c.produce("durable", 2, [b"gap"], producer_id=PRODUCER, sequence=16)
            assert c.produce("durable", 2, [b"next"], producer_id=PRODUCER, sequence=15) == 21
            assert c.produce("durable", 2, [b"other"], producer_id=99, sequence=4) == 20
            assert c.offsets("durable", 2).highest == 22
    finally:
        node.kill()


@pytest.mark.parametrize("producer", ["named", "automatic"])
def test_produce_is_retried_through_a_shard_crash_without_duplicates(
    tmp_path: Path, producer: str
) -> None:
    """SIGKILL the owning shard while one producer streams batches: the client
    retries what got no answer, and the restarted shard, having rebuilt its
    table from the log, appends each batch exactly once. The producer is named
    by the caller, or numbered by the client (its default)."""
    node = start_node(tmp_path, cores=2)
    automatic = producer == "automatic"

    def produce(c: Client, values: list[bytes], sent: int) -> None:
        if automatic:
            c.produce("crash", 0, values)
        else:
            c.produce("crash", 0, values, producer_id=PRODUCER, sequence=sent)

    try:
        with Client(node.bootstrap) as c:
            c.create_topic("crash", partitions=1)
            owner = c.describe_topic("crash").partitions[0].shard_id
            before = node.shard_pids()[owner]
            killer = threading.Timer(0.3, node.kill_shard, (owner,), {"wait_restart": False})
            killer.start()
            sent = 0
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (killer.is_alive() or sent < 400):
                produce(c, [f"r{sent + i}".encode() for i in range(10)], sent)
                sent += 10
            killer.join()
            assert node.wait_shard_restarted(owner, before) != before
            # At least one batch reaches the restarted shard, however fast the
            # loop above finished: that one makes it rebuild its table.
            produce(c, [f"r{sent + i}".encode() for i in range(10)], sent)
            sent += 10
            values = []
            index, highest = c.offsets("crash", 0)
            while index < highest:
                got = c.fetch("crash", 0, index)
                values += [r.value for r in got]
                index = got[-1].index + 1
        assert values == [f"r{i}".encode() for i in range(sent)]
        assert "producer table rebuilt" in node.log_text()  # by the restarted shard
    finally:
        node.kill()
