"""Three nodes in network namespaces under network faults: partitions and packet loss.

The leader of a partition is cut off from its peers (the test process still
reaches every node, as a client on the minority's side would): the majority
elects a new leader and keeps acknowledging writes, the old leader never
acknowledges one, and once the network heals every replica agrees on the
committed prefix with every acknowledged record present exactly once. With 20%
of one node's packets lost while producing, nothing acknowledged is lost either.
With the leader's cable pulled, the client writing to it finds the new leader.

The kernel here has no `netem`, so these faults are cuts and random loss
(nftables), never added delay (`tests.cluster.netns`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from laminar.client import Client, RetryPolicy
from laminar.placement import partition_id
from laminar.wire import (
    ErrorCode,
    ErrorResponse,
    FetchRequest,
    FetchResponse,
    ProduceRequest,
    ProduceResponse,
)
from tests.cluster.failover import same_client_fails_over
from tests.cluster.history import Produce, Read, check
from tests.cluster.netns import TestNetwork, netns_reason
from tests.cluster.nodes import (
    Cluster,
    committed_values,
    host_index,
    leader_of,
    offsets,
    read_answers,
    request,
    wait_committed,
)
from tests.support import wait_until
from tests.system.nodes import RunningNode

pytestmark = pytest.mark.skipif(netns_reason() is not None, reason=str(netns_reason()))

REFUSALS = {ErrorCode.NOT_LEADER: "fail", ErrorCode.NOT_ENOUGH_REPLICAS: "fail"}
"""What a node cut off from its peers may answer a produce with (and what that
means for the history); OUTCOME_UNKNOWN is `info`; a success is a failed test."""


class Producer:
    """One idempotent producer writing unique values to partition 0, recording each
    acknowledged produce (every produce here must be acknowledged)."""

    def __init__(self, client: Client, topic: str, history: list[Produce | Read]) -> None:
        self.client = client
        self.topic = topic
        self.history = history
        self.sequence = 0

    def produce(self, count: int) -> None:
        """`count` values, one at a time: a pipelined idempotent produce retried
        across a leader change can reach the new leader after its successor and
        be refused as out of order (a client limitation, not the subject here)."""
        for _ in range(count):
            value = b"ok-%05d" % self.sequence
            offset = self.client.produce(
                self.topic, 0, [value], producer_id=7, sequence=self.sequence
            )
            self.history.append(Produce(0, value, "ok", offset))
            self.sequence += 1

    @property
    def end(self) -> int:
        return 1 + max(op.offset or 0 for op in self.history if isinstance(op, Produce))


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestNetwork, Cluster]]:
    """One network and cluster for the module; each test makes its own topic."""
    tmp = tmp_path_factory.mktemp("partitions")
    with TestNetwork(3) as net, Cluster.start_on(net, tmp, 3) as cluster:
        yield net, cluster


@pytest.fixture
def cluster(network: tuple[TestNetwork, Cluster]) -> Iterator[tuple[TestNetwork, Cluster]]:
    """The module's cluster, healed after the test whatever it did."""
    try:
        yield network
    finally:
        network[0].heal()


def _final(cluster: Cluster, pid: int) -> dict[str, dict[int, list[tuple[int, bytes]]]]:
    return {name: {0: committed_values(node, pid)} for name, node in cluster.nodes.items()}


def _produce_directly(cluster: Cluster, node_id: str, pid: int, value: bytes) -> Produce:
    """Produce `value` on `node_id` itself (no client routing, no retry)."""
    answer = request(
        cluster.nodes[node_id], pid, ProduceRequest.from_values(pid, [value]), timeout_s=60
    )
    assert not isinstance(answer, ProduceResponse), f"{node_id} acknowledged {value!r}: {answer}"
    assert isinstance(answer, ErrorResponse), answer
    if answer.code is ErrorCode.OUTCOME_UNKNOWN:
        return Produce(0, value, "info")
    assert answer.code in REFUSALS, f"{node_id} answered {answer}"
    return Produce(0, value, "fail")


def test_a_cut_off_leader_steps_down_and_the_majority_carries_on(
    cluster: tuple[TestNetwork, Cluster],
) -> None:
    net, nodes = cluster
    history: list[Produce | Read] = []
    with Client(nodes.bootstrap, retry=RetryPolicy(budget_s=40)) as client:
        topic = client.create_topic("split", partitions=1, replication_factor=3)
        pid = partition_id(topic.topic_id, 0)
        leader_of(nodes, pid)  # every node knows the topic (see `leader_of`)
        producer = Producer(client, "split", history)
        producer.produce(16)
        old = leader_of(nodes, pid)
        majority = [name for name in nodes.nodes if name != old]

        net.split(host_index(old))
        # The old leader may still believe it leads: it takes this produce into its
        # log but can never commit it, so it must not acknowledge it.
        stranded = ThreadPoolExecutor(1).submit(_produce_directly, nodes, old, pid, b"stranded")

        new = wait_until(
            lambda: (leader := leader_of(nodes, pid, among=majority)) != old and leader,
            "the majority electing a new leader",
        )
        wait_until(lambda: offsets(nodes.nodes[old], pid).leader != old, f"{old} stepping down")
        history.append(stranded.result())
        refused = _produce_directly(nodes, old, pid, b"refused")
        assert refused.outcome == "fail"  # a follower refuses at once
        history.append(refused)
        # The client still reaches the old leader, which names no leader and keeps
        # answering NOT_ENOUGH_REPLICAS: the client would retry it until its budget
        # runs out (it does not try another replica yet), so point it at the new one.
        client.cluster.hints.leaders[pid] = new
        producer.produce(16)  # the majority keeps acknowledging writes
        # What a reader of the old leader sees: its committed records only (the
        # stranded value sits uncommitted in its log).
        history += [Read(0, answer) for answer in read_answers(nodes.nodes[old], pid)]

        net.heal()
        producer.produce(8)
        wait_committed(nodes, pid, producer.end)
        report = check(history, _final(nodes, pid))
    assert report.valid, report.summary()
    assert report.acknowledged == 40


def test_a_cut_off_leader_never_answers_a_leader_read_from_its_stale_prefix(
    cluster: tuple[TestNetwork, Cluster],
) -> None:
    """Reads are linearizable by default: the old leader of a partition whose
    majority has moved on (it may still believe it leads: an idle group's
    leader runs no check-quorum) refuses a leader read instead of serving what
    it had; a read that allows any replica gets that, as documented."""
    net, nodes = cluster
    with Client(nodes.bootstrap, retry=RetryPolicy(budget_s=40)) as client:
        topic = client.create_topic("stale", partitions=1, replication_factor=3)
        pid = partition_id(topic.topic_id, 0)
        leader_of(nodes, pid)
        before = [client.produce("stale", 0, [b"before-%d" % i]) for i in range(4)]
        old = leader_of(nodes, pid)
        majority = [name for name in nodes.nodes if name != old]
        net.split(host_index(old))
        new = wait_until(
            lambda: (leader := leader_of(nodes, pid, among=majority)) != old and leader,
            "the majority electing a new leader",
        )
        client.cluster.hints.leaders[pid] = new
        after = client.produce("stale", 0, [b"after"])
        answer = request(nodes.nodes[old], pid, FetchRequest(pid, before[0]), timeout_s=30)
        assert isinstance(answer, ErrorResponse), f"{old} answered a leader read: {answer}"
        assert answer.code in (ErrorCode.NOT_LEADER, ErrorCode.NOT_ENOUGH_REPLICAS), answer
        stale = request(nodes.nodes[old], pid, FetchRequest(pid, before[0], any_replica=True))
        assert isinstance(stale, FetchResponse)
        assert [r.index for r in stale.records] == before  # committed there, behind
        assert stale.next_index <= after


def _read_lossy(node: RunningNode, pid: int) -> list[tuple[tuple[int, bytes], ...]]:
    """`read_answers` from a node whose interface drops packets: a reader's
    connection to it may be reset (seen once in a full run), and a read is an
    observation without effect, so a reset read is made again (three tries)."""
    for _ in range(2):
        with contextlib.suppress(ConnectionResetError):
            return read_answers(node, pid)
    return read_answers(node, pid)


def test_nothing_acknowledged_is_lost_while_a_node_loses_packets(
    cluster: tuple[TestNetwork, Cluster],
) -> None:
    net, nodes = cluster
    history: list[Produce | Read] = []
    with Client(nodes.bootstrap, retry=RetryPolicy(budget_s=40)) as client:
        topic = client.create_topic("lossy", partitions=1, replication_factor=3)
        pid = partition_id(topic.topic_id, 0)
        leader_of(nodes, pid)  # every node knows the topic (see `leader_of`)
        producer = Producer(client, "lossy", history)
        producer.produce(8)
        lossy = leader_of(nodes, pid)  # its heartbeats and appends get lost
        net.loss(host_index(lossy), 20)
        producer.produce(24)
        for name in nodes.nodes:
            history += [Read(0, answer) for answer in _read_lossy(nodes.nodes[name], pid)]
        net.heal()
        wait_committed(nodes, pid, producer.end)
        report = check(history, _final(nodes, pid))
    assert report.valid, report.summary()
    assert report.acknowledged == 32


def test_the_same_client_writes_on_past_a_leader_whose_cable_is_pulled(
    cluster: tuple[TestNetwork, Cluster],
) -> None:
    """The old leader, process up, is reached by nobody (its connections go
    silent): the client writing to it finds the new leader
    (`tests.cluster.failover`)."""
    net, nodes = cluster

    def pull_cable(node_id: str) -> Callable[[], None]:
        net.isolate(host_index(node_id))
        return net.heal

    same_client_fails_over(nodes, "pulled", pull_cable)
