"""Addresses, the cluster view, and shard-direct routes agree with placement."""

from __future__ import annotations

from dataclasses import replace

import pytest

from laminar.client import (
    NotEnoughReplicasError,
    NotLeaderError,
    UnknownPartitionError,
    UnknownTopicError,
    parse_address,
)
from laminar.client.routing import (
    ClusterView,
    RouteHints,
    format_address,
    metadata_candidates,
    partition_for_key,
)
from laminar.placement import partition_id, shard_for
from laminar.wire import ErrorCode, MetadataResponse, NodeInfo, ShardInfo, TopicInfo


def metadata(shards: int = 3, host: str = "10.0.0.5") -> MetadataResponse:
    return MetadataResponse(
        "node-1",
        host,
        7070,
        "userspace",
        tuple(ShardInfo(i, host, 7071 + i) for i in reversed(range(shards))),
        (TopicInfo("events", 7, 16), TopicInfo("other", 9, 1)),
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:7070", ("127.0.0.1", 7070)),
        ("localhost", ("localhost", 7070)),
        (":9000", ("127.0.0.1", 9000)),
        ("[::1]:7071", ("::1", 7071)),
        ("[::1]", ("::1", 7070)),
        ("::1", ("::1", 7070)),
        (" host:1 ", ("host", 1)),
    ],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["", "host:port", "host:0", "host:70000", "[::1", "[::1]x"])
def test_parse_address_rejects_with_a_reason(text: str) -> None:
    with pytest.raises(ValueError, match="address"):
        parse_address(text)


def test_format_address_brackets_ipv6() -> None:
    assert format_address(("::1", 1)) == "[::1]:1"
    assert format_address(("h", 2)) == "h:2"


def test_routes_follow_the_placement_function() -> None:
    view = ClusterView.from_metadata(metadata(), ("10.0.0.5", 7070))
    assert view.shard_count == 3
    for p in range(16):
        route = view.route("events", p)
        pid = partition_id(7, p)
        assert route.partition_id == pid
        assert route.shard_id == shard_for(pid, 3)
        assert route.address == ("10.0.0.5", 7071 + route.shard_id)


def test_node_requests_go_to_the_metadata_partition_owner() -> None:
    view = ClusterView.from_metadata(metadata(), ("10.0.0.5", 7070))
    assert view.node_route().shard_id == shard_for(0, 3)


def test_wildcard_shard_hosts_are_reached_where_the_node_was() -> None:
    view = ClusterView.from_metadata(metadata(host="0.0.0.0"), ("192.168.1.9", 7070))
    assert set(view.shard_addresses) == {("192.168.1.9", 7071 + i) for i in range(3)}


def test_unknown_topic_and_partition_are_typed() -> None:
    view = ClusterView.from_metadata(metadata(), ("h", 1))
    with pytest.raises(UnknownTopicError) as info:
        view.route("nope", 0)
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC
    assert "laminar topic create nope" in str(info.value)
    with pytest.raises(UnknownPartitionError, match=r"0\.\.15"):
        view.route("events", 16)


def test_shard_ids_must_be_dense() -> None:
    md = metadata()
    broken = MetadataResponse(
        md.node_id, md.host, md.port, md.routing_mode, md.shards[:1], md.topics
    )
    with pytest.raises(ValueError, match=r"0\.\.N-1"):
        ClusterView.from_metadata(broken, ("h", 1))


def test_topic_changes_without_a_round_trip() -> None:
    view = ClusterView.from_metadata(metadata(), ("h", 1))
    added = view.with_topic(TopicInfo("new", 11, 2))
    assert added.route("new", 1).partition_id == partition_id(11, 1)
    assert "events" not in added.without_topic("events").topics
    assert "new" not in view.topics  # views are values


def test_partition_for_key_is_stable_and_spread() -> None:
    assert partition_for_key(b"user-1", 8) == partition_for_key(b"user-1", 8)
    seen = {partition_for_key(f"k{i}".encode(), 8) for i in range(200)}
    assert seen == set(range(8))
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)


def _cluster_view() -> ClusterView:
    nodes = tuple(NodeInfo(f"n{i}", f"10.0.0.{i}", 7070, (7071,)) for i in (1, 2, 3, 4))
    meta = MetadataResponse(
        "n1", "10.0.0.1", 7070, "userspace", (ShardInfo(0, "10.0.0.1", 7071),),
        (TopicInfo("events", 7, 4, replication_factor=3),), None, nodes,
    )  # fmt: skip
    return ClusterView.from_metadata(meta, ("10.0.0.1", 7070))


def test_refusals_teach_where_a_partitions_writes_go_next() -> None:
    """NOT_LEADER naming the leader sends the retry there; NOT_ENOUGH_REPLICAS
    (the node asked is cut off from most replicas) sends it to the next one."""
    view = _cluster_view()
    pid = partition_id(7, 2)
    replicas = view.replicas(pid)
    view.learn(NotLeaderError("not me", leader=replicas[1], partition_id=pid))
    assert view.leader_of(pid) == replicas[1]
    view.learn(NotEnoughReplicasError("cut off", partition_id=pid))
    assert view.leader_of(pid) == replicas[2]
    view.learn(NotEnoughReplicasError("cut off", partition_id=pid))
    assert view.leader_of(pid) == replicas[0]
    view.learn(NotLeaderError("election", leader=None, partition_id=pid))
    assert view.leader_of(pid) == replicas[0]  # no one named: stay


def test_a_leader_placement_does_not_name_is_followed_after_a_move() -> None:
    """A move puts a partition's group on nodes placement does not name (its
    committed membership decides): a NOT_LEADER naming such a node is followed."""
    view = _cluster_view()
    pid = partition_id(7, 2)
    replicas = view.replicas(pid)
    moved = next(n for n in view.nodes if n not in replicas)
    view.learn(NotLeaderError("not me", leader=moved, partition_id=pid))
    assert view.leader_of(pid) == moved
    view.learn(NotEnoughReplicasError("cut off", partition_id=pid))
    assert view.leader_of(pid) == replicas[0]


def test_a_silent_leader_is_routed_around_even_when_named() -> None:
    """A node that gave no answer is skipped while avoided, though the metadata
    or a NOT_LEADER from a follower still names it (they do until they elect
    another leader); only if every replica is avoided is it asked again."""
    view = _cluster_view()
    pid = partition_id(7, 2)
    first, second, third = view.replicas(pid)
    view.learn_leader(pid, first)
    silent = view.nodes[first]
    view.hints.unreachable((silent.host, silent.shard_ports[0]), view.nodes)
    assert view.leader_of(pid) == second
    view.learn(NotLeaderError("not me", leader=first, partition_id=pid))  # a stale follower
    assert view.leader_of(pid) == second
    assert view.route("events", 2).address == (view.nodes[second].host, 7071)
    view.hints.avoid(second)
    view.hints.avoid(third)
    view.learn_leader(pid, first)
    assert view.leader_of(pid) == first  # everyone avoided: the named leader after all
    view.hints.avoided.clear()
    assert view.leader_of(pid) == first  # the avoidance over: back to the named leader


def test_metadata_is_asked_of_silent_addresses_last() -> None:
    bootstraps = (("10.0.0.9", 7070), ("10.0.0.1", 7070), ("10.0.0.2", 7070))
    hints = RouteHints()
    assert metadata_candidates(bootstraps, None, hints) == list(bootstraps)
    hints.unreachable(bootstraps[0], {})  # before any metadata: the address itself
    assert metadata_candidates(bootstraps, None, hints)[-1] == bootstraps[0]
    view = _cluster_view()
    view.hints.unreachable(("10.0.0.1", 7071), view.nodes)  # n1's shard: n1's node port too
    order = metadata_candidates(bootstraps, view, view.hints)
    assert order[:4] == [("10.0.0.9", 7070), *((f"10.0.0.{i}", 7070) for i in (2, 3, 4))]
    assert set(order[4:]) == {("10.0.0.1", 7070), ("10.0.0.1", 7071)}


def test_a_decommissioned_node_is_placements_for_no_partition() -> None:
    """It still runs (and still serves what has not moved yet: NOT_LEADER
    answers lead there), but the client places nothing on it, as the nodes do."""
    view = _cluster_view()
    leaving = replace(view.metadata, decommissioned=(view.replicas(partition_id(7, 0))[0],))
    after = ClusterView.from_metadata(leaving, ("10.0.0.1", 7070))
    for p in range(4):
        replicas = after.replicas(partition_id(7, p))
        assert len(replicas) == 3 and leaving.decommissioned[0] not in replicas
    assert leaving.decommissioned[0] in after.nodes
