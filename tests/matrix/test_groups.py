"""Consumer groups on every topology: a group's coordinator is found from any
node, the positions topic is made once and replicated like any topic, and the
same partition serves the group after its leader is killed."""

from __future__ import annotations

from laminar.client import Client, calls
from laminar.groups.frames import FindCoordinatorResponse
from laminar.groups.positions import POSITIONS_TOPIC, coordinator_partition
from tests.matrix.topologies import Topology


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
