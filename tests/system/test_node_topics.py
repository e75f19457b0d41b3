"""Topics live in the metadata log: they survive restarts, deletes remove data,
and every shard sees a change before it is acknowledged."""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import time
from pathlib import Path

import pytest

from laminar.client import Client, UnknownTopicError
from laminar.placement import partition_id, shard_for
from laminar.replication.metadata import METADATA_PID
from laminar.wire import (
    CreateTopicRequest,
    CreateTopicResponse,
    DeleteTopicRequest,
    ErrorCode,
    FetchRequest,
    ForwardRequest,
    ListTopicsRequest,
    MetadataTailRequest,
    Ping,
    ProduceRequest,
)
from tests.system.nodes import RunningNode, start_node
from tests.system.wireclient import NodeClient, ServerError, WireConnection


def partition_dirs(node: RunningNode, topic_id: int) -> list[str]:
    root = node.data_dir / "partitions"
    return sorted(p.name for p in root.iterdir() if p.name.startswith(f"{topic_id}-"))


def test_topics_and_records_survive_a_restart(tmp_path: Path) -> None:
    with start_node(tmp_path, cores=2) as node, Client(node.bootstrap) as client:
        kept = client.create_topic("kept", partitions=6)
        gone = client.create_topic("gone", partitions=2)
        other = client.create_topic("other", partitions=3, config={"retention.ms": 1000})
        client.delete_topic("gone")
        for p in range(6):
            client.produce("kept", p, [f"v{p}-{i}".encode() for i in range(p + 1)])
        before = client.list_topics()
    with node.restart() as again, Client(again.bootstrap) as client:
        assert client.list_topics() == before
        assert [t.name for t in before] == ["kept", "other"]
        assert client.describe_topic("other").topic.config == {"retention.ms": 1000}
        for p in range(6):
            values = [r.value for r in client.fetch("kept", p, 0)]
            assert values == [f"v{p}-{i}".encode() for i in range(p + 1)]
        fresh = client.create_topic("fresh", partitions=1)
        # Ids are never reused, not even the deleted topic's.
        assert fresh.topic_id > max(kept.topic_id, gone.topic_id, other.topic_id)


def test_delete_removes_every_partition_and_the_name_can_be_reused(node: RunningNode) -> None:
    with Client(node.bootstrap) as client:
        topic = client.create_topic("doomed", partitions=8)
        for p in range(8):
            client.produce("doomed", p, [b"data"] * 3)
        assert len(partition_dirs(node, topic.topic_id)) == 8
        client.delete_topic("doomed")
        assert partition_dirs(node, topic.topic_id) == []
        assert "doomed" not in [t.name for t in client.list_topics()]
        with pytest.raises(UnknownTopicError):
            client.delete_topic("doomed")
    with NodeClient(node.host, node.port) as raw:  # the old partition ids are gone too
        pid = partition_id(topic.topic_id, 0)
        with pytest.raises(ServerError) as caught:
            raw.conn_for(pid).call(ProduceRequest.from_values(pid, [b"late"]))
        assert caught.value.code is ErrorCode.UNKNOWN_TOPIC
    with Client(node.bootstrap) as client:
        again = client.create_topic("doomed", partitions=2)
        assert again.topic_id != topic.topic_id
        assert client.offsets("doomed", 0) == (0, 0)


def test_a_new_topic_is_usable_at_once_on_every_shard(node: RunningNode) -> None:
    """The owner acknowledges a create only after every live shard applied it.

    Shown with a follower stopped (SIGSTOP) while a create is in flight: no
    answer may come while it cannot have applied the entry (without the barrier
    the answer came in milliseconds, and another shard could then be asked about
    a topic it did not know yet). Once it runs again, the answer comes, and that
    shard lists the topic and takes produces for it straight away."""
    owner = shard_for(METADATA_PID, 2)
    follower = 1 - owner
    with WireConnection(node.host, node.shard_ports[owner], timeout=30) as to_owner:
        assert isinstance(to_owner.call(CreateTopicRequest("warm-up", 1)), CreateTopicResponse)
        for n in range(3):
            name = f"quick-{n}"
            stopped = node.shard_pids()[follower]
            os.kill(stopped, signal.SIGSTOP)
            try:
                to_owner.send(CreateTopicRequest(name, 4))
                readable, _, _ = select.select([to_owner.sock], [], [], 0.8)
                assert not readable, "the create was acknowledged before a live shard applied it"
            finally:
                os.kill(stopped, signal.SIGCONT)
            created = to_owner.read_response()
            assert isinstance(created, CreateTopicResponse) and created.topic.name == name
            with WireConnection(node.host, node.shard_ports[follower]) as to_follower:
                listed = to_follower.call(ListTopicsRequest())
                assert name in {t.name for t in listed.topics}
                for p in range(4):
                    pid = partition_id(created.topic.topic_id, p)
                    if shard_for(pid, 2) == follower:
                        produced = to_follower.call(ProduceRequest.from_values(pid, [b"x"]))
                        assert produced.first_index == 0


def test_partitions_of_a_delete_missed_while_down_are_removed(tmp_path: Path) -> None:
    node = start_node(tmp_path, cores=2)
    with node, Client(node.bootstrap) as client:
        topic = client.create_topic("missed", partitions=4)
        for p in range(4):
            client.produce("missed", p, [b"old"])
    backup = tmp_path / "backup"
    shutil.copytree(node.data_dir / "partitions", backup)
    with node.restart() as again, Client(again.bootstrap) as client:
        client.delete_topic("missed")
    # Put the deleted partitions back, as if a shard had been down for the delete,
    # plus a directory with an id the log never assigned (which must be left alone).
    for name in partition_dirs(node, topic.topic_id) or [
        d.name for d in backup.iterdir() if d.name.startswith(f"{topic.topic_id}-")
    ]:
        shutil.copytree(backup / name, node.data_dir / "partitions" / name)
    stray = node.data_dir / "partitions" / "999-0"
    stray.mkdir()
    assert len(partition_dirs(node, topic.topic_id)) == 4
    with again.restart() as third:
        assert partition_dirs(third, topic.topic_id) == []
        assert stray.is_dir()
        assert "belongs to no topic" in third.log_text()


def test_clients_cannot_read_the_metadata_log_or_pose_as_a_follower(node: RunningNode) -> None:
    """The metadata log is internal: a fetch of its partition is UNKNOWN_TOPIC on
    every shard (it used to be served through a non-owner, moving the follower
    position the create barrier relies on), and its tail op is refused."""
    with NodeClient(node.host, node.port) as client:
        client.create_topic("visible", 1)
    for port in node.shard_ports:
        with WireConnection(node.host, port) as conn:
            with pytest.raises(ServerError) as caught:
                conn.call(FetchRequest(METADATA_PID, 0))
            assert caught.value.code is ErrorCode.UNKNOWN_TOPIC
            for shard in range(2):
                with pytest.raises(ServerError) as caught:
                    conn.call(MetadataTailRequest(0, shard, max_wait_ms=0))
                assert caught.value.code is ErrorCode.INVALID_REQUEST
                assert "internal op" in caught.value.response.message


def test_the_channel_serves_only_sibling_shards(node: RunningNode) -> None:
    """Whatever arrives on a shard's channel is trusted as internal (metadata tail,
    forwarded frames). A process that is not a shard of this node gets the
    connection closed unanswered, and the run directory is private."""
    run_dir = node.data_dir / "run"
    assert run_dir.stat().st_mode & 0o777 == 0o700
    for shard in range(2):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(str(run_dir / f"shard-{shard}.sock"))
            try:
                sock.sendall(MetadataTailRequest(0, 1 - shard).encode(1))
                sock.sendall(ForwardRequest(0, 1 - shard, Ping(0).encode(2)).encode(3))
                assert sock.recv(65536) == b""  # closed, nothing served
            except (ConnectionResetError, BrokenPipeError):
                pass  # closed while the request was still arriving (reset, or EPIPE on send)
    with NodeClient(node.host, node.port, via_node_port=True) as client:  # shards still talk
        topic = client.create_topic("after-the-knock", 2)
        for p in range(2):
            assert client.ping(partition_id(topic.topic_id, p)).shard_id == shard_for(
                partition_id(topic.topic_id, p), 2
            )


def test_the_metadata_log_is_compacted_and_a_stalled_follower_catches_up(
    tmp_path: Path,
) -> None:
    """Creating and deleting topics over and over used to grow the metadata log
    for good (and every restart replayed all of it). The owner compacts it into
    snapshots; a follower that was stopped while the entries it missed were
    dropped learns the state from the snapshot."""
    with start_node(tmp_path, cores=2) as node:
        owner = shard_for(METADATA_PID, 2)
        follower = 1 - owner
        stopped = node.shard_pids()[follower]
        with WireConnection(node.host, node.shard_ports[owner], timeout=30) as conn:
            conn.call(CreateTopicRequest("kept-early", 1))
            os.kill(stopped, signal.SIGSTOP)
            try:
                for n in range(100):
                    conn.call(CreateTopicRequest(f"churn-{n}", 1))
                    conn.call(DeleteTopicRequest(f"churn-{n}"))
                conn.call(CreateTopicRequest("kept-late", 2))
            finally:
                os.kill(stopped, signal.SIGCONT)
            expected = {t.name for t in conn.call(ListTopicsRequest()).topics}
        assert expected == {"kept-early", "kept-late"}
        stores = sorted((node.data_dir / "partitions" / "0-0").glob("*.store"))
        assert int(stores[0].stem) > 0, "the metadata log was never compacted"
        assert len(stores) <= 2
        with WireConnection(node.host, node.shard_ports[follower], timeout=30) as conn:
            deadline = time.monotonic() + 20
            while {t.name for t in conn.call(ListTopicsRequest()).topics} != expected:
                assert time.monotonic() < deadline, "the follower never caught up"
                time.sleep(0.1)
    with node.restart() as again, Client(again.bootstrap) as client:
        assert {t.name for t in client.list_topics()} == expected
        assert client.create_topic("after", 1).topic_id == 103  # ids are never reused
