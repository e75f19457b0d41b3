"""Removal finality: a node takes its removal as final (its shell would delete
its replica, term and vote with it) only when it is really out of the group.

The simulator never adds a removed node id back, so "really out" is: the
latest committed membership leaves it out.
"""

from __future__ import annotations

from laminar.raft import Membership

from ..history import Violation
from ..node import SimNode
from . import Checker


class RemovalFinality(Checker):
    name = "removal finality"

    def on_node(self, node: SimNode) -> None:
        core = node.core
        if core is None or not core.removal_confirmed:
            return
        latest = self.history.latest_config
        if latest is None or node.id in Membership.decode(latest.data).members:
            raise Violation(self.name, f"{node.id} took its removal as final while a member")
