"""ReadIndex (Raft dissertation 6.4): linearizable reads without a log write.

A read asks the leader for its commit index, then the leader confirms it was
still the leader after the request arrived: it starts a heartbeat round and
waits until a majority of voters answered that round or a later one. Once the
application has applied the returned index, reading its state is
linearizable. A new leader first commits an entry of its own term (its no-op),
since before that its commit index may lag the true one.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from .messages import ReadState


class _PendingRead(NamedTuple):
    request_id: int
    index: int  # type: ignore[assignment]  # shadows tuple.index: the API names it so
    round: int


class ReadIndexQueue:
    def __init__(self) -> None:
        self.round = 0  # the latest heartbeat round started by this leader
        self.acked: dict[str, int] = {}  # highest round each follower answered
        self.pending: deque[_PendingRead] = deque()
        self.waiting: list[int] = []  # requests made before the leader's first commit
        self.next_request_id = 1

    def new_request_id(self) -> int:
        request_id = self.next_request_id
        self.next_request_id += 1
        return request_id

    def reset(self) -> list[int]:
        """Forget everything (leadership changed); returns the dropped requests."""
        dropped = [r.request_id for r in self.pending] + self.waiting
        self.round = 0
        self.acked = {}
        self.pending.clear()
        self.waiting = []
        return dropped

    def add(self, request_id: int, index: int) -> None:
        """Queue a read at `index`, to be confirmed by the next round started."""
        self.pending.append(_PendingRead(request_id, index, self.round + 1))

    def round_wanted(self) -> bool:
        """Are reads waiting for a round not started yet? (One round serves all.)"""
        return bool(self.pending) and self.pending[-1].round > self.round

    def ack(self, node: str, round_: int) -> None:
        if round_ > self.acked.get(node, 0):
            self.acked[node] = round_

    def confirmed(self, voters: tuple[str, ...], leader: str) -> list[ReadState]:
        """Reads whose round a majority of voters has answered, in order."""
        if not self.pending:
            return []
        rounds = sorted(
            (self.round if node == leader else self.acked.get(node, 0) for node in voters),
            reverse=True,
        )
        confirmed_round = rounds[len(voters) // 2]
        out = []
        while self.pending and self.pending[0].round <= confirmed_round:
            read = self.pending.popleft()
            out.append(ReadState(read.request_id, read.index))
        return out
