"""No committed entry is lost across crashes.

After every restart, what the node persisted must agree with every entry
known committed up to its persisted commit index (which must lie within its
persisted log). At the end, every write acknowledged to a client is in every
member's log exactly once, at its acknowledged index (identity, not counts).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from laminar.raft import NORMAL

from ..history import History, Violation
from ..node import SimNode
from . import Checker

if TYPE_CHECKING:
    from ..simulation import Simulation


class Durability(Checker):
    name = "no committed entry lost"

    def __init__(self, history: History) -> None:
        super().__init__(history)

    def before_start(self, node: SimNode) -> None:
        storage = node.storage
        first, last = storage.first_index(), storage.last_index()
        commit = max(storage.initial_state().commit, first - 1)
        if commit > last:
            raise Violation(
                self.name, f"{node.id} persisted commit {commit} beyond its log ({last})"
            )
        for index in range(first, commit + 1):
            entry = self.history.committed.get(index)
            if entry is not None and storage.term(index) != entry.term:
                raise Violation(
                    self.name,
                    f"{node.id} restarted with committed entry {index} replaced "
                    f"(term {storage.term(index)}, was {entry.term})",
                )

    def at_end(self, sim: Simulation) -> None:
        if sim.recovered_after_steps is None:
            return  # members never caught up: the liveness checker reports that
        for node in sim.members_alive():
            storage = node.storage
            first, last = storage.first_index(), storage.last_index()
            held = storage.entries(first, last + 1, 1 << 62) if first <= last else []
            counts = Counter(e.data for e in held if e.kind == NORMAL)
            for data, entry in self.history.acked.items():
                if entry.index < first:
                    continue  # compacted after it was applied
                if counts[data] != 1 or entry.index > last or held[entry.index - first] != entry:
                    raise Violation(
                        self.name,
                        f"acknowledged write {data!r} at {entry.index} is held "
                        f"{counts[data]} times by {node.id} (log [{first}, {last}])",
                    )
