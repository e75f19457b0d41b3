"""Node lists: parsing --peers, views, and placement over a view."""

from __future__ import annotations

import pytest

from laminar.placement import partition_id, replica_nodes
from laminar.replication.nodes import (
    Node,
    NodeListError,
    NodeView,
    StaticView,
    parse_address,
    parse_peers,
)


def test_peers_parse_with_ipv6_and_weights() -> None:
    members = parse_peers("n2=127.0.0.1:7170, n3=[::1]:7270@2.5,")
    assert members == (Node("n2", "127.0.0.1", 7170), Node("n3", "::1", 7270, 2.5))
    assert members[1].address == "[::1]:7270"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("n2", "ID=HOST:PORT"),
        ("n2=host", "HOST:PORT"),
        ("n2=host:0", "1..65535"),
        ("n2=::1:7070", "IPv6"),
        ("n2=h:1@0", "finite and > 0"),
        ("n2=h:1@x", "not a number"),
        ("bad id=h:1", "not valid"),
        ("n2=h:1,n2=h:2", "twice"),
    ],
)
def test_bad_peer_lists_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(NodeListError, match=says):
        parse_peers(text)


def test_addresses_parse() -> None:
    assert parse_address("10.0.0.1:80") == ("10.0.0.1", 80)
    with pytest.raises(ValueError):
        parse_address("[not-v6]:80")


def test_a_view_is_sorted_and_gives_the_placement_weights() -> None:
    me = Node("n1", "127.0.0.1", 7070)
    view = StaticView(me, parse_peers("n3=127.0.0.1:7270@2,n2=127.0.0.1:7170")).view()
    assert view.node_ids == ("n1", "n2", "n3")
    assert view.get("n3") == Node("n3", "127.0.0.1", 7270, 2.0)
    assert view.get("n9") is None
    assert view.weights() == {"n1": 1.0, "n2": 1.0, "n3": 2.0}
    assert len(replica_nodes(partition_id(7, 0), view.weights(), 5)) == 3  # fewer: all of them


def test_a_view_refuses_duplicate_ids() -> None:
    with pytest.raises(NodeListError, match="unique"):
        NodeView(1, (Node("a", "h", 1), Node("a", "h", 2)))
