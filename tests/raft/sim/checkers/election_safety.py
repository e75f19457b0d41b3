"""Election Safety (Figure 3): at most one leader can be elected in a given term."""

from __future__ import annotations

from laminar.raft import LEADER

from ..history import History, Violation
from ..node import SimNode
from . import Checker


class ElectionSafety(Checker):
    name = "election safety"

    def __init__(self, history: History) -> None:
        super().__init__(history)
        self.leaders: dict[int, str] = {}

    def on_node(self, node: SimNode) -> None:
        core = node.core
        if core is not None and core.role == LEADER:
            holder = self.leaders.setdefault(core.term, node.id)
            if holder != node.id:
                raise Violation(self.name, f"{holder} and {node.id} both led term {core.term}")
