"""Down times for the grace period, from a sequence of SWIM views."""

from __future__ import annotations

from laminar.replication.controller import NodeStatus
from laminar.replication.downtime import Downtime, static_statuses
from laminar.replication.nodes import Node, NodeView
from laminar.swim.messages import Member as SwimMember
from laminar.swim.messages import MemberState
from laminar.swim.view import MembershipView

ALIVE, SUSPECT, DEAD, LEFT = (
    MemberState.ALIVE,
    MemberState.SUSPECT,
    MemberState.DEAD,
    MemberState.LEFT,
)


def view(version: int, **states: MemberState) -> MembershipView:
    members = tuple(
        SwimMember(n, f"127.0.0.1:{7000 + i}", s, version, 2.0 if n == "b" else 1.0)
        for i, (n, s) in enumerate(sorted(states.items()))
    )
    return MembershipView("a", version, members)


def test_the_grace_runs_from_the_first_view_that_showed_the_member_down() -> None:
    downtime = Downtime()
    assert downtime.observe(view(1, a=ALIVE, b=ALIVE, c=SUSPECT), 100) == (
        NodeStatus("a"),
        NodeStatus("b", 2.0),
        NodeStatus("c", 1.0, SUSPECT),
    )
    downtime.observe(view(2, a=ALIVE, b=DEAD, c=ALIVE), 200)
    statuses = downtime.observe(view(3, a=ALIVE, b=LEFT, c=DEAD), 300)
    assert [(s.node_id, s.state, s.down_since_ms) for s in statuses] == [
        ("a", ALIVE, None),
        ("b", LEFT, 200),  # dead then left: still down since the first sight
        ("c", DEAD, 300),
    ]


def test_a_member_back_alive_or_forgotten_starts_a_new_grace_when_down_again() -> None:
    downtime = Downtime()
    downtime.observe(view(1, a=ALIVE, b=DEAD), 100)
    downtime.observe(view(2, a=ALIVE, b=ALIVE), 200)
    assert downtime.observe(view(3, a=ALIVE, b=DEAD), 300)[1].down_since_ms == 300
    downtime.observe(view(4, a=ALIVE), 400)  # no longer in the view at all
    assert downtime.observe(view(5, a=ALIVE, b=DEAD), 500)[1].down_since_ms == 500


def test_a_static_view_is_every_member_live_with_its_weight() -> None:
    static = NodeView(1, (Node("b", "h", 2, 3.0), Node("a", "h", 1)))
    assert static_statuses(static) == (NodeStatus("a"), NodeStatus("b", 3.0))
