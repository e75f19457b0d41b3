"""State Machine Safety (Figure 3): no two nodes apply different entries at one
index. Also: each node applies committed entries in index order, each once per
run of its process (a restart delivers again from where it says it applied)."""

from __future__ import annotations

from laminar.raft import Entry

from ..history import History, Violation
from ..node import SimNode
from . import Checker


class StateMachineSafety(Checker):
    name = "state machine safety"

    def __init__(self, history: History) -> None:
        super().__init__(history)
        self.expected: dict[tuple[str, int], int] = {}

    def on_start(self, node: SimNode) -> None:
        self.expected[node.id, node.incarnation] = node.applied + 1

    def on_skip(self, node: SimNode, index: int) -> None:
        key = node.id, node.incarnation
        self.expected[key] = max(self.expected[key], index + 1)

    def on_apply(self, node: SimNode, entry: Entry) -> None:
        key = node.id, node.incarnation
        if entry.index != self.expected[key]:
            raise Violation(
                self.name, f"{node.id} applied index {entry.index}, expected {self.expected[key]}"
            )
        self.expected[key] = entry.index + 1
        known = self.history.committed.get(entry.index)
        if known is not None and known != entry:
            raise Violation(
                self.name, f"{node.id} applied {entry} where another node applied {known}"
            )
