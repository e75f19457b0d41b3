"""One checker per property; each watches the run through the hooks of `Checker`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from laminar.raft import Entry, ReadState

from ..history import History

if TYPE_CHECKING:
    from ..node import SimNode, SimStorage
    from ..simulation import Simulation


class Checker:
    """Hooks the simulation calls; a checker raises `Violation` when a property breaks."""

    name = "checker"

    def __init__(self, history: History) -> None:
        self.history = history

    def on_node(self, node: SimNode) -> None:
        """A live node took an input (tick, message, proposal) and handled its Ready."""

    def on_persist(self, node_id: str, storage: SimStorage, entries: Sequence[Entry]) -> None:
        """A node persisted entries."""

    def before_start(self, node: SimNode) -> None:
        """A node is about to (re)start from what it persisted."""

    def on_start(self, node: SimNode) -> None:
        """A node (re)started from what it persisted."""

    def on_apply(self, node: SimNode, entry: Entry) -> None:
        """A node's application applied a committed entry."""

    def on_skip(self, node: SimNode, index: int) -> None:
        """A node installed the leader's log: its entries up to `index` are gone."""

    def on_read_start(self, node: SimNode, request_id: int) -> None:
        """A client started a linearizable read at a node."""

    def on_read_state(self, node: SimNode, read: ReadState) -> None:
        """A node confirmed a read."""

    def at_end(self, sim: Simulation) -> None:
        """The run is over (after the liveness phase)."""
