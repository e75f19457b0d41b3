"""Client against the fake node: API, shard-direct routing, retries, typed errors."""

from __future__ import annotations

import threading
import time

import pytest

from laminar.client import (
    CannotConnectError,
    Client,
    NotReadyError,
    OffsetOutOfRangeError,
    OutcomeUnknownError,
    RetryPolicy,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)
from laminar.client.protocol import PROBE_AFTER_S
from laminar.placement import partition_id, shard_for
from laminar.wire import ErrorCode, Op, producer_stamp
from tests.support import wait_until

from .fakenode import NODE, FakeNode, Fault


def test_round_trip_with_keys_and_headers(node: FakeNode) -> None:
    with Client(node.bootstrap) as c:
        topic = c.create_topic("events", partitions=8)
        assert (topic.name, topic.partitions) == ("events", 8)
        first = c.produce("events", partition=3, values=[b"a", b"b"], keys=None)
        assert first == 0
        second = c.produce("events", 3, [b"c", b""], keys=[b"k", None], headers=[None, {"h": b"v"}])
        assert second == 2
        recs = c.fetch("events", partition=3, index=first, max_bytes=1 << 20)
        assert [(r.index, r.value, r.key, r.headers) for r in recs] == [
            (0, b"a", None, None),
            (1, b"b", None, None),
            (2, b"c", b"k", None),
            (3, b"", None, {"h": b"v"}),
        ]
        assert all(r.timestamp_ms > 0 for r in recs)
        assert c.offsets("events", partition=3) == (0, 4)
        assert c.fetch("events", 3, 1, max_records=2)[-1].index == 2
        assert c.fetch("events", 3, 4) == []


def test_every_partition_request_goes_to_its_owner(node: FakeNode) -> None:
    with Client(node.bootstrap) as c:
        info = c.create_topic("t", partitions=16)
        for p in range(16):
            c.produce("t", p, [b"x"])
            c.fetch("t", p, 0)
            c.offsets("t", p)
            assert c.ping("t", p).shard_id == shard_for(partition_id(info.topic_id, p), 2)
        requests = node.partition_requests()
        assert len(requests) == 64
        assert {r.listener for r in requests} == {0, 1}  # both shards served
        for r in requests:
            assert r.listener == shard_for(r.partition_id, 2)
        # Node-level requests after bootstrap go to a shard, not the node port.
        assert node.received[0].listener == NODE and node.received[0].op == Op.METADATA
        create = next(r for r in node.received if r.op == Op.CREATE_TOPIC)
        assert create.listener == shard_for(0, 2)


def test_pipelined_produce_and_fetch_across_shards(node: FakeNode) -> None:
    node.reverse_pipelined = True  # answers to one read come back newest first
    with Client(node.bootstrap) as c:
        c.create_topic("t", partitions=8)
        pending = [c.produce_nowait("t", p % 8, [b"%d" % p] * 3) for p in range(64)]
        firsts = [w.result() for w in pending]
        for p in range(8):
            assert sorted(firsts[p::8]) == [0, 3, 6, 9, 12, 15, 18, 21]
        fetches = [c.fetch_nowait("t", p, 0) for p in range(8)]
        assert [len(f.result()) for f in fetches] == [24] * 8
        assert fetches[0].result() is fetches[0].result()  # the result is kept


def test_threads_share_one_client(node: FakeNode) -> None:
    with Client(node.bootstrap) as c:
        c.create_topic("t", partitions=4)
        errors: list[BaseException] = []

        def worker(n: int) -> None:
            try:
                for i in range(25):
                    c.produce("t", n % 4, [f"{n}-{i}".encode()])
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors
        values = [r.value for p in range(4) for r in c.fetch("t", p, 0)]
        assert sorted(values) == sorted(f"{n}-{i}".encode() for n in range(8) for i in range(25))


def test_describe_list_delete(node: FakeNode) -> None:
    with Client(node.bootstrap) as c:
        c.create_topic("a", partitions=3)
        c.create_topic("b")
        c.produce("a", 1, [b"x", b"y"])
        assert sorted(t.name for t in c.list_topics()) == ["a", "b"]
        desc = c.describe_topic("a")
        assert [p.records for p in desc.partitions] == [0, 2, 0]
        for part in desc.partitions:
            assert part.shard_id == shard_for(part.partition_id, 2)
            assert part.port == node.port(part.shard_id)
        c.delete_topic("b")
        assert [t.name for t in c.list_topics()] == ["a"]
        assert c.metadata().routing_mode == "userspace"
        assert c.ping().node_id == "fake-node"
        pong = c.ping(shard=1)
        assert (pong.shard_id, pong.received_by) == (1, 1)  # served by that shard itself


def test_typed_errors(node: FakeNode) -> None:
    with Client(node.bootstrap) as c:
        c.create_topic("t", partitions=2)
        with pytest.raises(TopicExistsError) as exists:
            c.create_topic("t")
        assert exists.value.code == ErrorCode.TOPIC_EXISTS
        with pytest.raises(UnknownTopicError):
            c.fetch("missing", 0, 0)
        with pytest.raises(UnknownTopicError):
            c.delete_topic("missing")
        with pytest.raises(UnknownPartitionError):
            c.produce("t", 2, [b"x"])
        with pytest.raises(OffsetOutOfRangeError) as oor:
            c.fetch("t", 0, 5)
        assert oor.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert "index 5" in oor.value.message
        with pytest.raises(ValueError):
            c.produce("t", 0, [])


def test_a_topic_created_elsewhere_is_found(node: FakeNode) -> None:
    with Client(node.bootstrap) as a, Client(node.bootstrap) as b:
        a.create_topic("late", partitions=2)
        assert b.produce("late", 1, [b"x"]) == 0  # not in b's metadata: looked up once


def test_cannot_connect_is_typed_and_says_where() -> None:
    with FakeNode() as fake:
        address = fake.bootstrap
    with pytest.raises(CannotConnectError, match=f"cannot reach {address}"):
        Client(address, retry=RetryPolicy(budget_s=0))


def test_fetch_is_retried_after_a_lost_connection(node: FakeNode) -> None:
    with Client(node.bootstrap) as c:
        c.create_topic("t", partitions=4)
        c.produce("t", 0, [b"x"])
        node.inject(Fault("close_before", op=Op.FETCH))
        assert [r.value for r in c.fetch("t", 0, 0)] == [b"x"]
        node.inject(Fault("close_before", op=Op.LIST_OFFSETS, times=2))
        assert c.offsets("t", 0) == (0, 1)


def test_fetch_is_retried_across_a_shard_restart(node: FakeNode) -> None:
    with Client(node.bootstrap, retry=RetryPolicy(budget_s=5)) as c:
        c.create_topic("t", partitions=8)
        p = next(p for p in range(8) if c.cluster.route("t", p).shard_id == 1)
        c.produce("t", p, [b"before"])
        node.stop(1)
        timer = threading.Timer(0.4, node.start, args=(1,))
        timer.start()
        try:
            assert [r.value for r in c.fetch("t", p, 0)] == [b"before"]
        finally:
            timer.join()
        assert c.produce("t", p, [b"after"]) == 1


def test_produce_is_not_repeated_after_a_lost_answer(node: FakeNode) -> None:
    with Client(node.bootstrap, idempotent=False) as c:
        info = c.create_topic("t", partitions=1)
        node.inject(Fault("close_after", op=Op.PRODUCE))
        with pytest.raises(OutcomeUnknownError, match="may or may not have been applied"):
            c.produce("t", 0, [b"once"])
        assert node.records(partition_id(info.topic_id, 0)) == [b"\x00once"]  # not twice
        node.inject(Fault("close_before", op=Op.PRODUCE))
        with pytest.raises(OutcomeUnknownError):  # the client cannot tell the two apart
            c.produce("t", 0, [b"never"])
        assert c.offsets("t", 0) == (0, 1)


def test_an_idempotent_produce_is_resent_with_its_stamp_after_a_lost_answer(
    node: FakeNode,
) -> None:
    """The default client sends a produce whose answer was lost again, byte for
    byte (the same producer stamp, so a real node appends it once: see
    `tests/idempotence`); this fake node appends both."""
    with Client(node.bootstrap) as c:
        info = c.create_topic("t", partitions=1)
        node.inject(Fault("close_after", op=Op.PRODUCE))
        assert c.produce("t", 0, [b"once"]) == 1  # the fake's index for the resend
        first, resent = node.records(partition_id(info.topic_id, 0))
        assert first == resent
        stamp = producer_stamp(first)
        assert stamp is not None and (stamp.first_sequence, stamp.record_count) == (0, 1)
        assert c.produce("t", 0, [b"next"]) == 2
        after = producer_stamp(node.records(partition_id(info.topic_id, 0))[2])
        assert after == (stamp.producer_id, 1, 1)


def test_produce_after_the_shard_dropped_an_idle_connection(node: FakeNode) -> None:
    with Client(node.bootstrap) as c:
        c.create_topic("t", partitions=1)
        route = c.cluster.route("t", 0)
        c.produce("t", 0, [b"a"])
        conn = c._conns[route.address]
        node.drop_connections(route.shard_id)
        wait_until(conn.peer_closed, "the FIN")
        assert c.produce("t", 0, [b"b"]) == 1  # a fresh connection, no false alarm


def test_produce_is_retried_when_the_node_refused_it(node: FakeNode) -> None:
    """Even a plain produce is sent again when the node said it applied nothing."""
    with Client(node.bootstrap, idempotent=False) as c:
        info = c.create_topic("t", partitions=1)
        node.inject(Fault("error", op=Op.PRODUCE, code=ErrorCode.NOT_OWNER))
        assert c.produce("t", 0, [b"x"]) == 0
        assert node.records(partition_id(info.topic_id, 0)) == [b"\x00x"]
        node.inject(Fault("error", op=Op.PRODUCE, code=ErrorCode.STORAGE_ERROR))
        with pytest.raises(Exception, match="STORAGE_ERROR"):
            c.produce("t", 0, [b"y"])


def test_metadata_from_a_node_still_loading_is_asked_again(node: FakeNode) -> None:
    """A node that has not finished loading its metadata answers NOT_READY
    (a restart): the client asks again within its retry budget, from its
    first request on, instead of failing or believing a topic unknown."""
    with Client(node.bootstrap) as c:
        c.create_topic("t", partitions=1)
    node.inject(Fault("error", op=Op.METADATA, code=ErrorCode.NOT_READY, times=3))
    with Client(node.bootstrap) as c:
        assert c.describe_topic("t").topic.name == "t"
    node.inject(Fault("error", op=Op.METADATA, code=ErrorCode.NOT_READY, times=1000))
    with pytest.raises(NotReadyError):
        Client(node.bootstrap, retry=RetryPolicy(budget_s=0.2))


def test_a_request_that_times_out_is_sent_again_only_if_that_is_safe(node: FakeNode) -> None:
    """A timeout counts as a lost answer: idempotent requests (a fetch, a
    default produce) are sent again, a plain produce's outcome is unknown."""
    with Client(node.bootstrap, timeout_s=0.3) as c:
        info = c.create_topic("t", partitions=1)
        c.produce("t", 0, [b"a"])
        node.inject(Fault("ignore", op=Op.FETCH))
        ignored = c.fetch_nowait("t", 0, 0)
        assert c.offsets("t", 0) == (0, 1)  # answered after the fetch was sent: not silent
        assert [r.value for r in ignored.result()] == [b"a"]  # timed out, then asked again
        node.inject(Fault("ignore", op=Op.PRODUCE))  # alone on its connection: silent
        assert c.produce("t", 0, [b"b"]) == 1
        assert len(node.records(partition_id(info.topic_id, 0))) == 2  # the ignored one was not
    with Client(node.bootstrap, timeout_s=0.3, idempotent=False) as c:
        node.inject(Fault("ignore", op=Op.PRODUCE))
        with pytest.raises(OutcomeUnknownError, match="no answer"):
            c.produce("t", 0, [b"x"])
        assert c.offsets("t", 0) == (0, 2)  # on a new connection (ignored: not applied)


def test_a_frozen_node_fails_every_request_on_the_connection_at_once(node: FakeNode) -> None:
    """A node that stops (SIGSTOP) takes requests in and answers nothing: at the
    first deadline the connection is closed and the requests behind it fail
    too, plain produces with an unknown outcome (a thawed node may still apply
    them: it read them before it stopped answering)."""
    with Client(node.bootstrap, timeout_s=0.5, idempotent=False) as c:
        info = c.create_topic("t", partitions=1)
        node.freeze()
        first = c.produce_nowait("t", 0, [b"first"])
        time.sleep(0.2)  # pacing: `second`'s own deadline comes 0.2 s later
        second = c.produce_nowait("t", 0, [b"second"])
        for pending in (first, second):
            with pytest.raises(OutcomeUnknownError, match="nothing else from it"):
                pending.result()  # `second` by `first`'s deadline, not its own
        node.thaw()
        pid = partition_id(info.topic_id, 0)
        wait_until(lambda: node.records(pid) == [b"\x00first", b"\x00second"], "thawed")
        assert c.produce("t", 0, [b"after"]) == 2  # a new connection


def test_a_frozen_node_is_found_silent_by_a_probe_long_before_the_deadline(
    node: FakeNode,
) -> None:
    """With the default `timeout_s` (30 s): a connection quiet for
    `PROBE_AFTER_S` with a request in flight is pinged, and closed as silent
    when the ping goes unanswered as long again."""
    with Client(node.bootstrap, idempotent=False) as c:
        c.create_topic("t", partitions=1)
        node.freeze()
        start = time.monotonic()
        with pytest.raises(OutcomeUnknownError, match="nothing else from it"):
            c.produce("t", 0, [b"frozen"])
        assert time.monotonic() - start < c.timeout_s / 3
        node.thaw()


def test_a_slow_answer_on_a_live_connection_is_not_silence(node: FakeNode) -> None:
    """The node answers the probe while it holds a request: that request runs
    to its own deadline, and the connection stays."""
    with Client(node.bootstrap, timeout_s=3 * PROBE_AFTER_S, idempotent=False) as c:
        c.create_topic("t", partitions=1)
        node.inject(Fault("ignore", op=Op.PRODUCE))
        with pytest.raises(OutcomeUnknownError) as lost:
            c.produce("t", 0, [b"held"])
        assert "nothing else from it" not in str(lost.value)
        assert c.produce("t", 0, [b"next"]) >= 0


def test_a_silent_bootstrap_address_is_passed_over(node: FakeNode, silent_address: str) -> None:
    """A listening socket that never answers (a stopped node) first in the list:
    the client asks the next address after `connect_timeout_s`, not `timeout_s`."""
    start = time.monotonic()
    with Client(f"{silent_address},{node.bootstrap}", timeout_s=60, connect_timeout_s=0.3) as c:
        assert time.monotonic() - start < 30
        c.create_topic("t", partitions=1)
        assert c.produce("t", 0, [b"x"]) == 0
    with pytest.raises(CannotConnectError, match=f"{silent_address}: no answer") as info:
        Client(f"{silent_address},{silent_address}", connect_timeout_s=0.3)
    assert "no node answered" in str(info.value)


def test_a_bootstrap_node_not_ready_yet_is_passed_over(node: FakeNode) -> None:
    """A refusal worth retrying (a restarting node's NOT_READY) sends the
    metadata request to the next address, not back to the caller."""
    with FakeNode() as loading:
        loading.inject(Fault("error", op=Op.METADATA, code=ErrorCode.NOT_READY))
        with Client(f"{loading.bootstrap},{node.bootstrap}") as c:
            c.create_topic("t", partitions=1)
        assert [r.op for r in loading.received] == [Op.METADATA]


def test_long_poll_returns_when_data_arrives(node: FakeNode) -> None:
    with Client(node.bootstrap) as c, Client(node.bootstrap) as writer:
        c.create_topic("t", partitions=1)
        timer = threading.Timer(0.2, writer.produce, args=("t", 0, [b"late"]))
        timer.start()
        start = time.monotonic()
        recs = c.fetch("t", 0, 0, max_wait_ms=10_000)
        timer.join()
        assert [r.value for r in recs] == [b"late"]
        assert time.monotonic() - start < 9  # answered by the append, not the wait
        assert c.fetch("t", 0, 1, max_wait_ms=50) == []  # and empty after max_wait


def test_offset_for_timestamp(node: FakeNode) -> None:
    with Client(node.bootstrap) as c:
        c.create_topic("t", partitions=1)
        c.produce("t", 0, [b"a"])
        ts = c.fetch("t", 0, 0)[0].timestamp_ms
        assert c.offset_for_timestamp("t", 0, ts) == 0
        assert c.offset_for_timestamp("t", 0, ts + 60_000) == 1


def test_closed_client_refuses_work(node: FakeNode) -> None:
    c = Client(node.bootstrap, retry=RetryPolicy(budget_s=0))
    c.close()
    with pytest.raises(Exception, match="closed"):
        c.list_topics()
