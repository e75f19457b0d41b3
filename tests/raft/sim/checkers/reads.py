"""Linearizable reads: a confirmed read_index() is at least the index of every
write acknowledged before the read started."""

from __future__ import annotations

from laminar.raft import ReadState

from ..history import History, Violation
from ..node import SimNode
from . import Checker


class LinearizableReads(Checker):
    name = "linearizable reads"

    def __init__(self, history: History) -> None:
        super().__init__(history)
        self.floors: dict[tuple[str, int, int], int] = {}

    def on_read_start(self, node: SimNode, request_id: int) -> None:
        self.floors[node.id, node.incarnation, request_id] = self.history.acked_max_index

    def on_read_state(self, node: SimNode, read: ReadState) -> None:
        floor = self.floors.pop((node.id, node.incarnation, read.request_id))
        if read.index < floor:
            raise Violation(
                self.name,
                f"{node.id} confirmed a read at {read.index} after index {floor} was acknowledged",
            )
