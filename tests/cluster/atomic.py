"""Atomic writes on a cluster, checked by identity: the same checks for any topology.

Each check takes the cluster's bootstrap list and what it needs to break and
inspect it (the composition matrix's topologies offer the same):

- `kill_leader(topic, partition)` SIGKILLs the node leading that partition
  and returns its name; `heal()` restarts whatever was killed, same data;
- `replicas(pid)` reads every live replica of a partition: {node: committed
  (index, value)}.

A check passes only if, in the end, every replica of every partition it
wrote holds each record of a committed write exactly once, in the order
staged, and nothing of a write that did not commit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from laminar.client import (
    Client,
    LaminarError,
    RetryPolicy,
    StagedDataUnreachableError,
    new_write_id,
)
from laminar.placement import partition_id
from laminar.wire.writes import StagedPart
from tests.delivery import delivery_problems
from tests.support import wait_until

Kill = Callable[[str, int], str]
Heal = Callable[[], None]
Replicas = Callable[[int], dict[str, list[tuple[int, bytes]]]]

PARTITIONS = 2
SETTLE_S = 60.0


def make_topic(client: Client, name: str, replicas: Replicas) -> list[int]:
    """Create `name` (replication factor 3) and wait until every partition has
    a leader its replicas follow (one produce each, committed on every
    replica); the partition ids."""
    topic = client.create_topic(name, partitions=PARTITIONS, replication_factor=3)
    pids = [partition_id(topic.topic_id, p) for p in range(PARTITIONS)]
    for p, pid in enumerate(pids):
        client.produce(name, p, [b"first"])
        wait_until(
            lambda pid=pid: [len(log) for log in replicas(pid).values()] == [1, 1, 1],
            f"{name}/{p} on its three replicas",
        )
    return pids


def values(tag: str, partition: int, count: int, size: int = 16) -> list[bytes]:
    """`count` unique values for one partition of one write."""
    return [f"{tag}-{partition}-{i:06d}-".encode().ljust(size, b".") for i in range(count)]


def tagged(log: list[tuple[int, bytes]], tag: str) -> list[bytes]:
    prefix = f"{tag}-".encode()
    return [value for _, value in log if value.startswith(prefix)]


def nothing_visible(replicas: Replicas, pids: list[int], tag: str) -> None:
    """No replica holds a record of write `tag`."""
    for pid in pids:
        for node, log in replicas(pid).items():
            assert not tagged(log, tag), f"{node} shows records of an uncommitted write"


def exactly_once_everywhere(
    replicas: Replicas, pids: list[int], tag: str, expected: dict[int, list[bytes]]
) -> None:
    """Wait until every replica of each partition holds exactly `expected[p]`
    of write `tag`, once each and in order (every replica at its place)."""
    for p, pid in enumerate(pids):
        deadline = time.monotonic() + SETTLE_S
        while True:
            logs = replicas(pid)
            problems = {
                node: delivery_problems(tagged(log, tag), expected[p]) for node, log in logs.items()
            }
            in_order = all(tagged(log, tag) == expected[p] for log in logs.values())
            if len(logs) >= 3 and in_order:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"partition {p}: {len(logs)} replicas, {problems}")
            time.sleep(0.1)


def check_commits_from_every_node(bootstraps: list[str], replicas: Replicas, topic: str) -> None:
    """`Client.begin_write()` commits through each node alone as bootstrap."""
    with Client(bootstraps[0]) as client:
        pids = make_topic(client, topic, replicas)
    expected: dict[str, dict[int, list[bytes]]] = {}
    for n, bootstrap in enumerate(bootstraps):
        tag = f"via{n}"
        expected[tag] = {p: values(tag, p, 20) for p in range(PARTITIONS)}
        with Client(bootstrap) as client, client.begin_write() as write:
            for p in range(PARTITIONS):
                write.send(topic, p, expected[tag][p][:10])
                write.send(topic, p, expected[tag][p][10:])
            result = write.commit()
        assert result.first and result.records == 20 * PARTITIONS
    for tag, wanted in expected.items():
        exactly_once_everywhere(replicas, pids, tag, wanted)


def check_leader_killed_between_staging_and_commit(
    bootstrap: str, kill_leader: Kill, heal: Heal, replicas: Replicas, topic: str
) -> None:
    """The node that staged a partition's records dies before the commit: the
    commit fails naming it and nothing is visible; once it is back, the same
    commit publishes every record once."""
    with Client(bootstrap, retry=RetryPolicy(budget_s=30)) as client:
        pids = make_topic(client, topic, replicas)
        expected = {p: values("staged", p, 30) for p in range(PARTITIONS)}
        write_id = new_write_id()
        stager = client.stager(write_id)
        for p in range(PARTITIONS):
            stager.send(topic, p, expected[p])
        parts = stager.finish()
        victim = kill_leader(topic, 0)
        assert victim == parts[0].node, "the leader when staging holds the staged records"

        def refused() -> StagedDataUnreachableError | None:
            with Client(bootstrap, retry=RetryPolicy(budget_s=1)) as impatient:
                try:
                    impatient.commit_write(write_id, parts)
                except StagedDataUnreachableError as exc:
                    return exc
                except LaminarError:
                    return None  # the coordinator itself may be electing a new leader
            raise AssertionError("a commit whose staged data is unreachable committed")

        error = wait_until(refused, "the commit refused for its unreachable staging node")
        assert f"node {victim}" in str(error) and "nothing was decided" in str(error)
        nothing_visible(replicas, pids, "staged")
        heal()
        result = client.commit_write(write_id, parts)
        assert result.records == 30 * PARTITIONS
    exactly_once_everywhere(replicas, pids, "staged", expected)


def check_node_killed_during_publish(
    bootstrap: str,
    kill_node: Callable[[str], None],
    heal: Heal,
    replicas: Replicas,
    topic: str,
    published: Callable[[int], int],
    victim: Callable[[tuple[StagedPart, ...]], str] | None = None,
) -> None:
    """A node dies while a commit publishes (`victim(parts)`; by default the
    leader of a written partition, where its records were staged):
    once it is back, every record is there exactly once, on every replica.
    `published(pid)`: the partition's highest committed index on any live
    replica; `kill_node(name)` SIGKILLs a node. Publish chunks must be small
    (the node's --publish-chunk-bytes) so that publishing takes a while."""
    batches, per_batch = 400, 15  # a chunk each: publishing outlasts a poll under load
    expected = {
        p: values("big", p, batches * per_batch if p == 0 else per_batch, size=200)
        for p in range(PARTITIONS)
    }
    with Client(bootstrap, retry=RetryPolicy(budget_s=30)) as client:
        pids = make_topic(client, topic, replicas)
        before = published(pids[0])
        write_id = new_write_id()
        stager = client.stager(write_id)
        for i in range(batches):
            stager.send(topic, 0, expected[0][i * per_batch : (i + 1) * per_batch])
        stager.send(topic, 1, expected[1])
        parts = stager.finish()
        dying = parts[0].node if victim is None else victim(parts)
        outcome: list[object] = []

        def commit() -> None:
            with Client(bootstrap, retry=RetryPolicy(budget_s=3)) as committer:
                try:
                    outcome.append(committer.commit_write(write_id, parts))
                except LaminarError as exc:
                    outcome.append(exc)

        thread = threading.Thread(target=commit)
        thread.start()
        deadline = time.monotonic() + 30
        while (at_kill := published(pids[0]) - before) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        kill_node(dying)
        thread.join()
        heal()  # first: the tests after this one share the cluster
        assert 0 < at_kill < len(expected[0]), f"killed with {at_kill} records published"
        result = client.commit_write(write_id, parts)
        assert result.records == sum(len(v) for v in expected.values())
        # Run again under the same commit id with new attempts (a streaming
        # micro-batch after a driver crash): the decision is remembered by
        # whoever coordinates now, and nothing is published twice.
        rerun = client.stager(write_id, task=9)
        rerun.send(topic, 1, expected[1])
        again = client.commit_write(write_id, rerun.finish())
        assert not again.first and again.published == result.published
    exactly_once_everywhere(replicas, pids, "big", expected)


def check_leader_killed_between_batches(
    bootstrap: str, kill_leader: Kill, heal: Heal, replicas: Replicas, topic: str
) -> None:
    """The partition's leader dies after an attempt's first batch and is back
    (a follower now) before its second: the second goes where the first is,
    and the commit publishes both through the new leader, once."""
    with Client(bootstrap, retry=RetryPolicy(budget_s=30)) as client:
        pids = make_topic(client, topic, replicas)
        expected = {p: values("split", p, 20) for p in range(PARTITIONS)}
        write = client.begin_write()
        for p in range(PARTITIONS):
            write.send(topic, p, expected[p][:10])
        write._stager.finish()  # the first batches are staged
        victim = kill_leader(topic, 0)
        heal()
        for p in range(PARTITIONS):
            write.send(topic, p, expected[p][10:])
        parts = write._stager.finish()
        assert parts[0].node == victim
        assert write.commit().records == 20 * PARTITIONS
    exactly_once_everywhere(replicas, pids, "split", expected)
