"""Log Matching (Figure 3): if two logs contain an entry with the same index and
term, the logs are identical in all entries up through that index.

Checked on what nodes persist: each node's log is kept as a chain of prefix
digests, and the digest at (index, term) must be the same on every node, at
every time."""

from __future__ import annotations

from collections.abc import Sequence

from laminar.raft import ANCHOR, Entry

from ..history import History, Violation
from ..node import SimStorage
from . import Checker


class LogMatching(Checker):
    name = "log matching"

    def __init__(self, history: History) -> None:
        super().__init__(history)
        self.known: dict[tuple[int, int], int] = {(0, 0): 0}
        self.chains: dict[str, tuple[int, list[int]]] = {}  # node -> (base index, digests)

    def on_persist(self, node_id: str, storage: SimStorage, entries: Sequence[Entry]) -> None:
        first = entries[0]
        if first.kind == ANCHOR:
            base = first.index
            chain = [self.known.get((first.index, first.term), hash(("anchor", first.index)))]
            entries = entries[1:]
        else:
            base, chain = self.chains.get(node_id, (0, [0]))
            del chain[first.index - base :]
        digest = chain[-1]
        known = self.known
        for entry in entries:
            digest = hash((digest, entry.term, entry.data, entry.kind))
            chain.append(digest)
            seen = known.setdefault((entry.index, entry.term), digest)
            if seen != digest:
                raise Violation(
                    self.name,
                    f"{node_id} holds an entry at index {entry.index} in term {entry.term} "
                    "that another node also holds, but their logs differ up to it",
                )
        self.chains[node_id] = (base, chain)
