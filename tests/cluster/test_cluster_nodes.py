"""Three real nodes on loopback: every partition a Raft group, surviving SIGKILL.

Delivery is checked by identity with the history checker: every record the
client was told is appended must be on every replica, once, at the index it
was acknowledged at; nothing refused may be anywhere.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from laminar.client import (
    Client,
    NotEnoughReplicasError,
    NotLeaderError,
    OutcomeUnknownError,
    RetryPolicy,
)
from laminar.placement import partition_id
from laminar.wire import ErrorCode, ErrorResponse, ListTopicsRequest
from laminar.wire.records import decode_record
from tests.cluster.history import Produce, check
from tests.cluster.nodes import Cluster, offsets, read_replica, request
from tests.support import wait_until


def _values(records: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    return [(index, decode_record(blob)[0]) for index, blob in records]


def _leader(cluster: Cluster, pid: int) -> str:
    def known() -> str | None:
        leaders = {offsets(node, pid).leader for node in cluster.live().values()}
        leaders.discard(None)
        return leaders.pop() if len(leaders) == 1 else None

    leader: str = wait_until(known, f"one leader of partition {pid}")
    return leader


def _replicas_caught_up(cluster: Cluster, pid: int, end: int) -> None:
    for name, node in cluster.live().items():
        wait_until(lambda n=node: offsets(n, pid).committed_index >= end, f"{name} at {end}")


def _secret(path: Path, text: bytes) -> Path:
    path.write_bytes(text)
    os.chmod(path, 0o600)
    return path


def test_every_acknowledged_record_survives_the_leaders_sigkill(tmp_path: Path) -> None:
    with (
        Cluster.start(tmp_path, 3) as cluster,
        Client(cluster.bootstrap, retry=RetryPolicy(budget_s=30)) as client,
    ):
        topic = client.create_topic("events", partitions=2, replication_factor=3)
        assert topic.replication_factor == 3
        pid = partition_id(topic.topic_id, 0)
        history: list[Produce] = []
        sequence = 0

        def produce(count: int, pipelined: bool) -> None:
            nonlocal sequence
            pending = []
            for _ in range(count):
                value = b"v%05d" % sequence
                call = client.produce_nowait(
                    "events", 0, [value], producer_id=42, sequence=sequence
                )
                sequence += 1
                if pipelined:
                    pending.append((value, call))
                else:
                    history.append(Produce(0, value, "ok", call.result()))
            for value, call in pending:
                history.append(Produce(0, value, "ok", call.result()))

        produce(30, pipelined=False)
        leader = _leader(cluster, pid)
        produce(0, pipelined=True)
        in_flight = [
            client.produce_nowait(
                "events", 0, [b"f%05d" % (sequence + i)], producer_id=42, sequence=sequence + i
            )
            for i in range(10)
        ]
        cluster.nodes[leader].kill()  # with produces in flight
        for i, call in enumerate(in_flight):
            history.append(Produce(0, b"f%05d" % (sequence + i), "ok", call.result()))
        sequence += 10
        produce(40, pipelined=False)
        new_leader = _leader(cluster, pid)
        assert new_leader != leader

        cluster.restart(leader)  # it must catch up on what it missed
        end = max(p.offset or 0 for p in history) + 1
        _replicas_caught_up(cluster, pid, end)
        final = {
            name: {0: _values(read_replica(node, pid))} for name, node in cluster.nodes.items()
        }
        report = check(history, final)
        assert report.valid, report.summary()
        assert report.acknowledged == 80


def test_a_follower_can_be_read_and_refuses_writes_naming_the_leader(tmp_path: Path) -> None:
    with Cluster.start(tmp_path, 3) as cluster, Client(cluster.bootstrap) as client:
        topic = client.create_topic("t", partitions=1, replication_factor=3)
        pid = partition_id(topic.topic_id, 0)
        first = client.produce("t", 0, [b"a", b"b"])
        leader = _leader(cluster, pid)
        follower = next(n for n in cluster.nodes if n != leader)
        _replicas_caught_up(cluster, pid, first + 2)
        assert _values(read_replica(cluster.nodes[follower], pid)) == [
            (first, b"a"),
            (first + 1, b"b"),
        ]
        described = client.describe_topic("t").partitions[0]
        assert described.leader == leader and sorted(described.replicas) == ["n1", "n2", "n3"]
        with Client(cluster.nodes[follower].bootstrap, retry=RetryPolicy(budget_s=0)) as direct:
            direct.cluster.hints.leaders.clear()  # route to the follower on purpose
            direct.cluster.hints.leaders[pid] = follower
            with pytest.raises(NotLeaderError) as refused:
                direct.produce("t", 0, [b"c"])
        assert refused.value.leader == leader


def test_a_node_without_the_cluster_secret_is_refused(tmp_path: Path) -> None:
    secret = _secret(tmp_path / "secret", b"the cluster secret, 32 bytes long")
    wrong = _secret(tmp_path / "wrong", b"not the cluster secret, but long")
    with Cluster.start(tmp_path, 3, secret=secret) as cluster:
        with Client(cluster.bootstrap) as client:
            client.create_topic("before", partitions=1, replication_factor=3)
        cluster.restart("n3", cluster_secret_file=wrong)
        for name in ("n1", "n2"):
            wait_until(
                lambda n=name: any(
                    "'n3'" in line and "cluster secret" in line
                    for line in cluster.nodes[n].log_text().splitlines()
                ),
                f"{name} refusing n3",
            )
        with Client(f"127.0.0.1:{cluster.ports['n1']}") as client:
            client.create_topic("after", partitions=1, replication_factor=2)  # n1 + n2 agree
            names = [t.name for t in client.list_topics()]
        assert "after" in names
        # n3 never hears a metadata leader, so it never answers from its stale
        # state (it would lack "after"): the topic list is NOT_READY (retriable).
        answer = request(cluster.nodes["n3"], 0, ListTopicsRequest())
        assert isinstance(answer, ErrorResponse) and answer.code is ErrorCode.NOT_READY


def test_a_topic_deleted_while_a_replica_is_down_is_deleted_there_on_return(
    tmp_path: Path,
) -> None:
    with Cluster.start(tmp_path, 3) as cluster, Client(cluster.bootstrap) as client:
        topic = client.create_topic("doomed", partitions=2, replication_factor=3)
        client.produce("doomed", 0, [b"x"])
        directory = cluster.nodes["n3"].data_dir / "partitions" / f"{topic.topic_id}-0"
        wait_until(directory.exists, "n3's replica directory")
        cluster.nodes["n3"].kill()
        client.delete_topic("doomed")
        cluster.restart("n3")
        wait_until(lambda: not directory.exists(), "n3 deleting the topic's files")


def test_an_append_is_acknowledged_only_once_a_majority_has_it(tmp_path: Path) -> None:
    """With both followers frozen the leader cannot commit: the produce must not
    be acknowledged (its outcome is unknown), and once the leader dies and the
    followers elect another, nothing acknowledged may be missing."""
    with (
        Cluster.start(tmp_path, 3) as cluster,
        Client(cluster.bootstrap, retry=RetryPolicy(budget_s=30), idempotent=True) as setup,
    ):
        topic = setup.create_topic("q", partitions=1, replication_factor=3)
        pid = partition_id(topic.topic_id, 0)
        history = [Produce(0, b"before", "ok", setup.produce("q", 0, [b"before"]))]
        leader = _leader(cluster, pid)
        followers = [n for n in cluster.nodes if n != leader]
        client = Client(cluster.bootstrap, retry=RetryPolicy(budget_s=0))
        client.cluster.hints.leaders[pid] = leader
        for name in followers:
            os.killpg(cluster.nodes[name].pid, signal.SIGSTOP)
        try:
            history.append(Produce(0, b"frozen", "ok", client.produce("q", 0, [b"frozen"])))
        except OutcomeUnknownError:
            history.append(Produce(0, b"frozen", "info"))
        client.cluster.hints.leaders[pid] = leader  # not to a frozen node: it would hang
        try:  # by now the old leader has not heard from either follower for seconds
            history.append(Produce(0, b"refused", "ok", client.produce("q", 0, [b"refused"])))
        except NotEnoughReplicasError:
            history.append(Produce(0, b"refused", "fail"))
        finally:
            client.close()
            cluster.nodes[leader].kill()
            for name in followers:
                os.killpg(cluster.nodes[name].pid, signal.SIGCONT)
        assert [h.outcome for h in history[-2:]] == ["info", "fail"]
        history.append(Produce(0, b"after", "ok", setup.produce("q", 0, [b"after"])))
        cluster.restart(leader)
        _replicas_caught_up(cluster, pid, max(p.offset or 0 for p in history) + 1)
        final = {
            name: {0: _values(read_replica(node, pid))} for name, node in cluster.nodes.items()
        }
        report = check(history, final)
        assert report.valid, report.summary()


def test_sigterm_hands_a_nodes_leaderships_over_before_it_stops(tmp_path: Path) -> None:
    """A drained node moves every leadership it holds to an up-to-date follower
    (its log says how many moved), exits 0, and loses nothing acknowledged."""
    with (
        Cluster.start(tmp_path, 3) as cluster,
        Client(cluster.bootstrap, retry=RetryPolicy(budget_s=30)) as client,
    ):
        topic = client.create_topic("drained", partitions=6, replication_factor=3)
        pids = [partition_id(topic.topic_id, p) for p in range(6)]
        history = [
            Produce(p, b"before-%d" % p, "ok", client.produce("drained", p, [b"before-%d" % p]))
            for p in range(6)
        ]
        leaders = {pid: _leader(cluster, pid) for pid in pids}
        name = max(cluster.nodes, key=lambda n: sum(leader == n for leader in leaders.values()))
        led = sum(leader == name for leader in leaders.values())
        assert led >= 1  # six partitions over three nodes
        assert cluster.nodes[name].terminate(signal.SIGTERM) == 0
        handed = [
            line for line in cluster.nodes[name].log_text().splitlines() if "handed over" in line
        ]
        moved = [line for line in handed if "handed over 0 of" not in line]
        assert moved, f"no leadership was handed over: {handed}"
        assert all(
            line.split("handed over ")[1].split(" of ")[0] == line.split(" of ")[1].split()[0]
            for line in handed
        ), handed  # every transfer completed
        for pid in pids:
            wait_until(lambda p=pid: _leader(cluster, p) != name, f"a new leader of {pid}")
        history += [
            Produce(p, b"after-%d" % p, "ok", client.produce("drained", p, [b"after-%d" % p]))
            for p in range(6)
        ]
        cluster.restart(name)
        final: dict[str, dict[int, list[tuple[int, bytes]]]] = {n: {} for n in cluster.nodes}
        for p, pid in enumerate(pids):
            _replicas_caught_up(
                cluster, pid, max(h.offset or 0 for h in history if h.partition == p) + 1
            )
            for n, node in cluster.nodes.items():
                final[n][p] = _values(read_replica(node, pid))
        report = check(history, final)
        assert report.valid, report.summary()


def test_a_follower_behind_the_leaders_retained_log_catches_up(tmp_path: Path) -> None:
    """While a follower is down the leader's retention removes records it never
    got: it must catch up from an install (its log restarts at the leader's),
    and from there hold exactly the leader's records."""
    with (
        Cluster.start(tmp_path, 3, cores=1, retention_check_interval=0.2) as cluster,
        Client(cluster.bootstrap, retry=RetryPolicy(budget_s=30)) as client,
    ):
        topic = client.create_topic(
            "short",
            partitions=1,
            replication_factor=3,
            config={"segment.bytes": 4096, "retention.bytes": 8192},
        )
        pid = partition_id(topic.topic_id, 0)
        history = [
            Produce(0, b"early-%d" % n, "ok", client.produce("short", 0, [b"early-%d" % n]))
            for n in range(5)
        ]
        leader = _leader(cluster, pid)
        behind = next(n for n in cluster.nodes if n != leader)
        _replicas_caught_up(cluster, pid, (history[-1].offset or 0) + 1)
        behind_end = offsets(cluster.nodes[behind], pid).highest_index
        cluster.nodes[behind].kill()
        for n in range(300):
            value = b"late-%03d-" % n + b"x" * 200
            history.append(Produce(0, value, "ok", client.produce("short", 0, [value])))
        wait_until(
            lambda: offsets(cluster.nodes[leader], pid).lowest_index > behind_end,
            "the leader's retention passing the stopped follower",
        )
        cluster.restart(behind)
        end = max(h.offset or 0 for h in history) + 1
        _replicas_caught_up(cluster, pid, end)
        logs = {n: dict(_values(read_replica(node, pid))) for n, node in cluster.nodes.items()}
        floor = max(offsets(node, pid).lowest_index for node in cluster.nodes.values())
        assert floor > behind_end
        for name, log in logs.items():
            kept = {h.value: h.offset for h in history if (h.offset or 0) >= floor}
            assert {v: i for i, v in log.items() if i >= floor} == kept, name


def test_retention_on_a_replicated_partition_keeps_what_raft_still_needs(tmp_path: Path) -> None:
    """Time retention with segment.ms rolls every record's segment away, but a
    replicated partition keeps its last committed record (Raft anchors its log
    on it): the group keeps working and every replica agrees."""
    with (
        Cluster.start(tmp_path, 3, cores=1, retention_check_interval=0.1) as cluster,
        Client(cluster.bootstrap, retry=RetryPolicy(budget_s=30)) as client,
    ):
        topic = client.create_topic(
            "brief", partitions=1, replication_factor=3, config={"segment.ms": 1, "retention.ms": 1}
        )
        pid = partition_id(topic.topic_id, 0)
        acked = []
        for n in range(3):
            acked.append((client.produce("brief", 0, [b"r%d" % n]), b"r%d" % n))
            _replicas_caught_up(cluster, pid, acked[-1][0] + 1)
            time.sleep(0.5)  # pacing, as before: retention passes between the records
        # Retention has run: a replica lost r0 (the others run on the same timer;
        # they may keep more, and must keep the last).
        wait_until(
            lambda: any(
                acked[0] not in _values(read_replica(n, pid)) for n in cluster.nodes.values()
            ),
            "retention of r0 at a replica",
        )
        for name, node in cluster.nodes.items():
            kept = _values(read_replica(node, pid))
            assert kept and kept[-1] == acked[-1], name
            assert all(record in acked for record in kept), name


def test_a_client_can_read_from_followers(tmp_path: Path) -> None:
    with Cluster.start(tmp_path, 3, cores=1) as cluster:
        with Client(cluster.bootstrap) as writer:
            topic = writer.create_topic("spread", partitions=3, replication_factor=3)
            firsts = [writer.produce("spread", p, [b"p%d" % p]) for p in range(3)]
        pids = [partition_id(topic.topic_id, p) for p in range(3)]
        for pid, first in zip(pids, firsts, strict=True):
            _replicas_caught_up(cluster, pid, first + 1)
        leaders = {pid: _leader(cluster, pid) for pid in pids}
        with Client(cluster.bootstrap, read_from="follower") as reader:
            reader.describe_topic("spread")  # learns the leaders
            for p, pid in enumerate(pids):
                route = reader.cluster.route_read("spread", p)
                node = next(  # a shard port, or the node port until shard ports are known
                    n
                    for n, node in cluster.nodes.items()
                    if route.address[1] in (node.port, *node.shard_ports)
                )
                assert node != leaders[pid]
                assert [r.value for r in reader.fetch("spread", p, firsts[p])] == [b"p%d" % p]
