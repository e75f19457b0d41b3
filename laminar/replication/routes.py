"""Where a node's own internal requests go: this node, another node, a leader.

Atomic writes ask the node holding each staged part (`StagedPart.node`) to
check, publish and drop it, publish through a partition's leader, and ask a
coordinator whether a commit is pending; group coordinators ask a partition's
leader for its end. `NodeRoutes.to_node` sends a request to the node named: this node
through the shard's own dispatcher (served here or forwarded to the owning
shard), another node over an authenticated peer call
(`laminar.replication.calls`); an error answer is raised as `RequestError`,
no answer as `NodeUnreachable`. `to_leader` follows the leader NOT_LEADER
answers name, and waits out an election, within `LEADER_WAIT_S`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final

from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.replication.calls import PeerCallError, PeerCalls
from laminar.wire import ErrorCode, ErrorResponse, Frame, Message
from laminar.wire.errors import RequestError

LEADER_WAIT_S: Final = 10.0
"""How long `to_leader` looks for a leader (an election takes 1-2 s)."""
RETRY_S: Final = 0.2

Send = Callable[[Message], Awaitable[Frame]]


class NodeUnreachable(Exception):
    """A request to another node got no answer (`sent`: it may have been applied)."""

    def __init__(self, node_id: str, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.node_id = node_id
        self.sent = sent


class NodeRoutes:
    """Sends the write protocol's internal requests (see the module docstring)."""

    def __init__(
        self,
        node_id: str,
        local: Send,
        calls: PeerCalls | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.node_id = node_id
        self._clock = clock
        self._local = local
        self._calls = calls

    def is_local(self, node: str) -> bool:
        """`node` is this one ("" names the node a request reached, before clusters)."""
        return node in ("", self.node_id)

    async def to_node(self, node: str, message: Message) -> Frame:
        """The answer of `node` to `message`; its error answer raised."""
        if self.is_local(node):
            frame = await self._local(message)
        elif self._calls is None:
            raise NodeUnreachable(node, f"node {node} is not this node, which is alone", sent=False)
        else:
            try:
                frame = await self._calls.call(node, message)
            except PeerCallError as exc:
                raise NodeUnreachable(node, str(exc), sent=exc.sent) from None
        if frame.is_error:
            err = ErrorResponse.from_frame(frame)
            raise RequestError(err.code, err.message, leader=err.leader)
        return frame

    async def to_leader(self, message: Message, first: str | None = None) -> Frame:
        """The answer of the leader of `message`'s partition, starting at `first`
        (this node if None) and following NOT_LEADER answers."""
        deadline = self._clock.monotonic() + LEADER_WAIT_S
        node = first or self.node_id
        while True:
            try:
                return await self.to_node(node, message)
            except RequestError as exc:
                if exc.code == ErrorCode.NOT_LEADER and exc.leader not in (None, node):
                    node = exc.leader
                    continue
                if exc.code not in (ErrorCode.NOT_LEADER, ErrorCode.NOT_READY):
                    raise
                failure = exc.message
            except NodeUnreachable as exc:
                failure = str(exc)
                node = self.node_id  # it knows who leads now, if anyone does
            if self._clock.monotonic() >= deadline:
                raise RequestError(
                    ErrorCode.NOT_READY,
                    f"no leader answered within {LEADER_WAIT_S:.0f} s (last: {failure}); "
                    "retry later",
                )
            await asyncio.sleep(RETRY_S)
