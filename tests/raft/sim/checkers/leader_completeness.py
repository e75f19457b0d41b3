"""Leader Completeness (Figure 3): if an entry is committed in a term, it is in
the log of every leader of a later term. Checked when a node becomes leader,
against every entry some node has applied so far."""

from __future__ import annotations

from laminar.raft import LEADER

from ..history import History, Violation
from ..node import SimNode
from . import Checker


class LeaderCompleteness(Checker):
    name = "leader completeness"

    def __init__(self, history: History) -> None:
        super().__init__(history)
        self.checked: set[tuple[int, str]] = set()

    def on_node(self, node: SimNode) -> None:
        core = node.core
        if core is None or core.role != LEADER or (core.term, node.id) in self.checked:
            return
        self.checked.add((core.term, node.id))
        log = core.log
        last = log.last_index()
        committed = self.history.committed
        for index in range(max(log.first_index(), 1), self.history.max_committed + 1):
            entry = committed.get(index)
            if entry is not None and (index > last or log.term(index) != entry.term):
                raise Violation(
                    self.name,
                    f"{node.id} leads term {core.term} without committed entry {index} "
                    f"(term {entry.term}); its log ends at {last}",
                )
