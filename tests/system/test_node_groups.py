"""Consumer groups on one node: a group's coordinator is found, and the
positions topic it lives in is the node's own."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from laminar.client import Client
from laminar.groups.errors import GroupError
from laminar.groups.frames import (
    CommitFrame,
    DescribeFrame,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatFrame,
    ListFrame,
    PositionsFrame,
    PositionsQuery,
)
from laminar.groups.messages import (
    JOIN,
    CommitAnswer,
    CommitRequest,
    HeartbeatAnswer,
    HeartbeatRequest,
)
from laminar.groups.positions import POSITIONS_TOPIC, coordinator_partition
from laminar.wire import (
    AlterTopicRequest,
    CreateTopicRequest,
    DeleteTopicRequest,
    ErrorCode,
    FetchRequest,
    ProduceRequest,
)
from tests.support import wait_until
from tests.system.nodes import start_node
from tests.system.routed import metrics, total
from tests.system.test_cli_system import laminar
from tests.system.wireclient import NodeClient, ServerError, WireConnection


def test_a_group_s_coordinator_is_a_partition_of_the_node_s_own_positions_topic(
    tmp_path: Path,
) -> None:
    with start_node(tmp_path, cores=2, flush="never", group_partitions=5) as node:
        client = NodeClient(node.host, node.port)
        found: FindCoordinatorResponse = client.node.call(FindCoordinatorRequest("billing"))
        topic = found.topic
        assert (topic.name, topic.partitions) == (POSITIONS_TOPIC, 5)
        assert topic.config["flush.messages"] == 1  # durable before acknowledged
        assert found.partition == coordinator_partition("billing", 5)
        for group in ("billing", "audit", "é-ü"):  # made once, the same for every group
            again: FindCoordinatorResponse = client.node.call(FindCoordinatorRequest(group))
            assert again.topic.topic_id == topic.topic_id
            assert again.partition == coordinator_partition(group, 5)
        with pytest.raises(ServerError) as bad:
            client.node.call(FindCoordinatorRequest("tab\there"))
        assert bad.value.code is ErrorCode.INVALID_REQUEST
        assert "control characters" in str(bad.value)

        pid = found.partition_id
        refused = [
            CreateTopicRequest("__mine", 1),
            DeleteTopicRequest(POSITIONS_TOPIC),
            AlterTopicRequest(POSITIONS_TOPIC, {"retention.ms": 1}),
        ]
        for request in refused:
            with pytest.raises(ServerError) as caught:
                client.node.call(request)
            assert caught.value.code is ErrorCode.INVALID_REQUEST
            assert "are the node's own" in str(caught.value)
        client.refresh()
        read = client.conn_for(pid).call(FetchRequest(pid, 0))  # reading is allowed (and
        assert read.records == ()  # opens the log: a produce would take the fast path)
        for forged in (
            ProduceRequest.from_values(pid, [b"forged"]),
            ProduceRequest.from_values(pid, [b"forged"], producer_id=7, sequence=0),
        ):
            with pytest.raises(ServerError) as write:
                client.conn_for(pid).call(forged)
            assert write.value.code is ErrorCode.INVALID_REQUEST
        assert client.conn_for(pid).call(FetchRequest(pid, 0)).records == ()
        assert [t.name for t in client.list_topics()] == [POSITIONS_TOPIC]


def _beat(conn: WireConnection, pid: int, request: HeartbeatRequest) -> HeartbeatAnswer:
    answer: HeartbeatAnswer = conn.call(HeartbeatFrame(pid, request)).body
    return answer


def _join(group: str, topics: tuple[str, ...]) -> HeartbeatRequest:
    return HeartbeatRequest(group, None, JOIN, 0, None, topics, frozenset(), 10.0)


def test_members_share_partitions_and_commits_are_durable_fenced_and_monotonic(
    tmp_path: Path,
) -> None:
    with start_node(tmp_path, cores=2, flush="never", group_partitions=3) as node:
        client = NodeClient(node.host, node.port)
        client.create_topic("events", 4)
        found: FindCoordinatorResponse = client.node.call(FindCoordinatorRequest("billing"))
        pid = found.partition_id
        client.refresh()
        conn = client.conn_for(pid)
        a = _beat(conn, pid, _join("billing", ("events",)))
        assert a.error is GroupError.NONE and a.member_id
        everything = frozenset(("events", p) for p in range(4))
        assert a.assignment == everything
        client.produce("events", 0, [b"r0", b"r1", b"r2"])
        commit = CommitRequest("billing", a.member_id, a.epoch, {("events", 0): 3})
        done: CommitAnswer = conn.call(CommitFrame(pid, commit)).body
        assert done.results == {("events", 0): GroupError.NONE}
        for index, refused in (
            (2, GroupError.POSITION_BEHIND),
            (4, GroupError.POSITION_BEYOND_END),
        ):
            again = CommitRequest("billing", a.member_id, a.epoch, {("events", 0): index})
            assert conn.call(CommitFrame(pid, again)).body.results == {("events", 0): refused}
        stale = CommitRequest("billing", a.member_id, a.epoch + 7, {("events", 0): 3})
        assert conn.call(CommitFrame(pid, stale)).body.results == {("events", 0): GroupError.FENCED}

        b = _beat(conn, pid, _join("billing", ("events",)))  # b waits for what a releases
        assert b.error is GroupError.NONE and b.assignment == frozenset()
        told = _beat(
            conn,
            pid,
            HeartbeatRequest(
                "billing", a.member_id, a.epoch, a.revision, None, ("events",), everything, 10.0
            ),
        )
        kept = told.assignment
        assert len(kept) == 2 and kept < everything
        released = _beat(
            conn,
            pid,
            HeartbeatRequest(
                "billing", a.member_id, told.epoch, told.revision, None, ("events",), kept, 10.0
            ),
        )
        assert released.assignment == kept
        b2 = _beat(
            conn,
            pid,
            HeartbeatRequest(
                "billing", b.member_id, b.epoch, b.revision, None, ("events",), frozenset(), 10.0
            ),
        )
        assert b2.assignment == everything - kept

    with node.restart() as again:
        client = NodeClient(again.host, again.port)
        conn = client.conn_for(pid)
        read = conn.call(PositionsFrame(pid, PositionsQuery("billing"))).body
        assert {tp: p.index for tp, p in read.positions.items()} == {("events", 0): 3}
        view = conn.call(DescribeFrame(pid, "billing")).body.group
        assert {m.member_id for m in view.members} == {a.member_id, b.member_id}


def test_the_positions_log_keeps_only_what_its_last_checkpoint_needs(tmp_path: Path) -> None:
    """Every commit appends to the group's positions partition; its core
    restates the state now and then (a checkpoint), and retention drops what
    came before one: the log stays short, and a restart still finds the
    group's position."""
    with (
        start_node(
            tmp_path, cores=1, flush="never", group_partitions=1, retention_check_interval=1
        ) as node,
        Client(node.bootstrap) as client,
    ):
        client.create_topic("events", 1)
        client.produce("events", 0, [b"r%d" % n for n in range(2500)])
        with client.consumer("billing", ["events"], start="earliest") as consumer:
            wait_until(
                lambda: consumer.poll(timeout_s=0.1) is not None and consumer.assignment(),
                "assigned",
            )
            for n in range(1, 2300):  # two checkpoints' worth of records
                consumer.commit({("events", 0): n})
            wait_until(
                lambda: client.offsets(POSITIONS_TOPIC, 0).lowest > 0,
                "retention dropped what the checkpoint restates",
            )
    with node.restart() as again, Client(again.bootstrap) as client:
        assert client.describe_group("billing").partitions[0].committed == 2299


def test_group_ops_are_served_only_on_the_positions_topic(tmp_path: Path) -> None:
    """A group op naming another topic's partition (a forged frame) is refused:
    no coordinator is ever built over, or writes into, a user's partition."""
    with start_node(tmp_path, cores=1, flush="never") as node:
        client = NodeClient(node.host, node.port)
        client.create_topic("events", 1)
        client.produce("events", 0, [b"mine"])
        pid = client.pid("events", 0)
        for forged in (ListFrame(pid, None), DescribeFrame(pid, "g")):
            with pytest.raises(ServerError) as refused:
                client.conn_for(pid).call(forged)
            assert refused.value.code is ErrorCode.INVALID_REQUEST
            assert "is not a partition of __consumer_offsets" in str(refused.value)
        assert client.fetch_all("events", 0) == [b"mine"]


def test_lag_is_in_metrics_and_in_status(tmp_path: Path) -> None:
    """A group commits part of one partition and nothing of the other: the
    node's /metrics and `laminar status` show the records it has not
    committed, per partition and in total."""
    with start_node(tmp_path, cores=2, flush="never") as node, Client(node.bootstrap) as client:
        client.create_topic("orders", 2)
        client.produce("orders", 0, [b"a%d" % n for n in range(10)])
        client.produce("orders", 1, [b"b%d" % n for n in range(5)])
        with client.consumer("billing", ["orders"]) as consumer:
            wait_until(lambda: len(consumer.assignment()) == 2, "both partitions assigned")
            consumer.commit({("orders", 0): 4})

        def lag_samples() -> dict[str, float]:
            samples = metrics(node)
            return {
                dict(labels)["partition"]: value
                for (name, labels), value in samples.items()
                if name == "laminar_group_lag_records"
                and {("group", "billing"), ("topic", "orders")} <= labels
            }

        wait_until(lambda: lag_samples() == {"0": 6, "1": 5}, "lag of both partitions in /metrics")
        assert total(metrics(node), "laminar_group_lag_series_dropped") == 0
        admin = f"{node.admin_host}:{node.admin_port}"
        doc = json.loads(laminar(node, "status", "--json", "--admin", admin).stdout)
        assert doc["groups"] == [{"group": "billing", "state": "empty", "members": 0, "lag": 11}]
        human = laminar(node, "status", "--admin", admin).stdout
        assert "consumer groups (1)" in human
        assert re.search(r"^billing\s+empty\s+0\s+11$", human, re.MULTILINE), human
