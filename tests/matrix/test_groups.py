"""Consumer groups on every topology: a group's coordinator is found from any
node, the positions topic is made once and replicated like any topic, the
same partition serves the group after its leader is killed, and a group's
members deliver every acknowledged record across that kill."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from laminar.client import AsyncClient, Client, LaminarError, calls
from laminar.groups.frames import FindCoordinatorResponse
from laminar.groups.positions import POSITIONS_TOPIC, coordinator_partition
from tests.matrix.reading import topic_name
from tests.matrix.topologies import Topology
from tests.support import wait_until

PARTITIONS = 4


def _find(bootstrap: str, group: str) -> FindCoordinatorResponse:
    with Client(bootstrap) as client:
        return client._start(calls.find_coordinator(group)).result()


def test_every_node_names_the_same_coordinator_partition_before_and_after_a_kill(
    healed: Topology,
) -> None:
    group = f"billing-{healed.name}"
    first = _find(healed.bootstrap, group)
    topic = first.topic
    assert (topic.name, topic.partitions) == (POSITIONS_TOPIC, 4)
    assert topic.replication_factor == healed.replication_factor
    assert first.partition == coordinator_partition(group, 4)
    for node in healed.nodes.values():  # a node that did not make it knows it too
        assert _find(node.bootstrap, group) == first
    killed = healed.kill_leader(POSITIONS_TOPIC, first.partition)
    assert _find(healed.bootstrap, group) == first
    if healed.clustered:
        assert healed.leader(POSITIONS_TOPIC, first.partition) != killed


class Member(threading.Thread):
    """A group member polling and committing until stopped (then it leaves);
    the sync client's consumer (waited commits), or the asyncio one (unwaited
    commits, Kafka's commitAsync, and a waited one before leaving)."""

    def __init__(self, bootstrap: str, group: str, topic: str, aio: bool) -> None:
        super().__init__(name=f"member-{'async' if aio else 'sync'}", daemon=True)
        self.bootstrap, self.group, self.topic, self.aio = bootstrap, group, topic, aio
        self.seen: list[bytes] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            if self.aio:
                asyncio.run(self._run_async())
            else:
                with (
                    Client(self.bootstrap) as client,
                    client.consumer(self.group, [self.topic]) as consumer,
                ):
                    while not self.stop.is_set():
                        self.seen += [r.value for r in consumer.poll(timeout_s=0.2)]
                        consumer.commit()
        except BaseException as exc:
            self.error = exc

    async def _run_async(self) -> None:
        async with (
            AsyncClient(self.bootstrap) as client,
            client.consumer(self.group, [self.topic]) as consumer,
        ):
            while not self.stop.is_set():
                self.seen += [r.value for r in await consumer.poll(timeout_s=0.2)]
                await consumer.commit(wait=False)
            await consumer.commit()


def _produce(client: Client, topic: str, values: range, acked: list[bytes]) -> None:
    for n in values:
        value = b"%s-%d" % (topic.encode(), n)
        try:
            client.produce(topic, n % PARTITIONS, [value])
        except LaminarError:
            continue  # refused or unknown: not required to be delivered
        acked.append(value)


def test_a_group_delivers_every_acknowledged_record_across_a_coordinator_kill(
    healed: Topology,
) -> None:
    """Two members (one per client) share a topic while a producer writes;
    the node leading the group's positions partition is killed. Every
    acknowledged record is delivered, and the positions committed survive:
    a new member of the group finds nothing left to read."""
    topic, group = topic_name("group"), f"readers-{healed.name}"
    with Client(healed.bootstrap) as client:
        client.create_topic(topic, PARTITIONS, replication_factor=healed.replication_factor)
        found = client._start(calls.find_coordinator(group)).result()
        members = [Member(healed.bootstrap, group, topic, aio) for aio in (False, True)]
        for member in members:
            member.start()
        acked: list[bytes] = []
        _produce(client, topic, range(0, 60), acked)
        healed.kill_leader(POSITIONS_TOPIC, found.partition)
        _produce(client, topic, range(60, 120), acked)

        def delivered() -> bool:
            for member in members:
                if member.error is not None:
                    raise member.error
            return set(acked) <= {v for m in members for v in m.seen}

        wait_until(delivered, "every acknowledged record delivered")
        for member in members:  # they leave at once (through a coordinator that moved)
            member.stop.set()
        for member in members:
            member.join(60)
            assert member.error is None, member.error
        seen = [v for m in members for v in m.seen]
        assert set(seen) <= set(acked) | {b"%s-%d" % (topic.encode(), n) for n in range(120)}
        with client.consumer(group, [topic]) as late:
            wait_until(
                lambda: late.poll(timeout_s=0.1) == [] and len(late.assignment()) == PARTITIONS,
                "the late member holds every partition",
            )
            assert late.poll(timeout_s=0.5) == []


def test_lag_counts_the_records_not_yet_committed_across_a_leader_change(
    healed: Topology,
) -> None:
    """A group commits part of a partition; its leader is killed (a new term:
    Raft writes a no-op into the partition's indexes) and more is produced.
    The lag `describe` shows is the number of records after the committed
    position, by identity, not the index distance with Raft's entries in it."""
    topic, group = topic_name("lag"), f"lagging-{healed.name}"
    with Client(healed.bootstrap) as client:
        client.create_topic(topic, 1, replication_factor=healed.replication_factor)
        produced = [b"lag-%d" % n for n in range(30)]
        for value in produced[:20]:
            client.produce(topic, 0, [value])
        with client.consumer(group, [topic]) as consumer:
            read: list[Any] = []
            wait_until(
                lambda: read.extend(consumer.poll(timeout_s=0.2)) or len(read) >= 12,
                "twelve records read",
            )
            done = read[11]
            consumer.commit({(topic, 0): done.index + 1})
        healed.kill_leader(topic, 0)
        for value in produced[20:]:
            client.produce(topic, 0, [value])
        rest = wait_until(lambda: _values_from(client, topic, done.index + 1, 18), "the rest")
        assert rest == produced[12:]  # by identity: what the group has not committed
        described = client.describe_group(group)
        (lag,) = described.partitions
        assert (lag.committed, lag.lag, described.lag) == (done.index + 1, 18, 18)
        if healed.clustered:  # the new term's no-op lies among them
            assert lag.end - done.index - 1 > 18


def _values_from(client: Client, topic: str, index: int, count: int) -> list[bytes] | None:
    """`count` records of partition 0 from `index` on, reading as a reader does."""
    values: list[bytes] = []
    while len(values) < count:
        batch = client.fetch_batch(topic, 0, index, max_records=count)
        if not len(batch):
            return None
        values += [bytes(r.value) for r in batch]
        index = batch.next_index
    return values
