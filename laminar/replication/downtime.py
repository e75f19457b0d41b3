"""When each member went down: the clock a dead member's grace period runs on.

A SWIM view says a member is dead or left, not since when; the placement
controller needs the time (`NodeStatus.down_since_ms`) so that a node that
restarts within the grace period keeps its partitions. The shell that runs
the controller keeps one `Downtime` beside the latest view and passes every
new view through it. The times live in memory only: after a restart of the
shell every down member's grace starts again, which delays a move by at most
one grace period and never moves anything early.
"""

from __future__ import annotations

from laminar.replication.controller import NodeStatus
from laminar.replication.nodes import NodeView
from laminar.swim.view import MembershipView


class Downtime:
    """First time each member was seen dead or left (reset when it is live again)."""

    def __init__(self) -> None:
        self._since_ms: dict[str, int] = {}

    def observe(self, view: MembershipView, now_ms: int) -> tuple[NodeStatus, ...]:
        """`view`'s members as the controller reads them, as of `now_ms`."""
        since: dict[str, int] = {}
        for member in view.members:
            if not member.state.is_live:
                since[member.node_id] = self._since_ms.get(member.node_id, now_ms)
        self._since_ms = since
        return tuple(
            NodeStatus(m.node_id, m.weight, m.state, since.get(m.node_id)) for m in view.members
        )


def static_statuses(view: NodeView) -> tuple[NodeStatus, ...]:
    """A `--peers` view: every member placed and live (a fixed replica set never moves)."""
    return tuple(NodeStatus(m.node_id, m.weight) for m in view.members)
