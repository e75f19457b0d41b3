"""Requests to other nodes, answered: the write protocol's traffic between nodes.

Raft traffic is one way (`laminar.replication.transport`); the write protocol
asks and waits (is this staged on your node? publish it; append this chunk,
you lead the partition; is this commit decided?). `PeerCalls.call` sends such
a request to the shard of a remote node that owns its partition id, over a
connection authenticated exactly like a Raft link (`laminar.replication.auth`:
the remote node proves it knows the cluster secret before anything is sent),
and returns the answer frame. The accepting side is `PeerSession`, which
serves only the ops a shard lets peers ask (`laminar.shards.router.PEER_OPS`).

Requests are pipelined on one connection per remote shard and matched to their
answers by correlation id. A connection that fails fails every request in
flight on it; `PeerCallError.sent` then tells the caller the request may have
been applied (it decides: the write protocol's requests are all safe to send
again). The next request opens a new connection, after fetching the node's
shard ports again (it may have restarted on other ports).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Final

from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.placement import shard_for
from laminar.replication.auth import PeerAuth
from laminar.replication.nodes import Node, NodeView
from laminar.replication.transport import (
    NodeLayout,
    PeerLinkError,
    ShardConnection,
    close_stream,
    fetch_layout,
    read_frame,
)
from laminar.stream import Stream
from laminar.wire import (
    Frame,
    FrameDecoder,
    Message,
    MetadataRequest,
    MetadataResponse,
    ProtocolError,
    decode_response,
    encode_frame,
)

logger = logging.getLogger("laminar.replication")

LEADERS_TTL_S: Final = 1.0
"""How long another node's answer on who leads what is reused."""
CALL_TIMEOUT_S: Final = 15.0
"""How long a request waits for its answer (a Raft append commits within 10 s
or answers OUTCOME_UNKNOWN; a slower answer counts as lost)."""
ANSWER_SLACK_BYTES: Final = 64 << 10
"""Room an answer may take beyond the largest request frame."""


class PeerCallError(Exception):
    """A request to another node got no answer: the node could not be reached
    (`sent` False: nothing was sent) or the connection failed or timed out
    with the request in flight (`sent` True: it may have been applied)."""

    def __init__(self, node_id: str, reason: str, *, sent: bool) -> None:
        super().__init__(f"node {node_id} {reason}")
        self.node_id = node_id
        self.sent = sent


class _Connection:
    """One authenticated connection to one shard of a remote node, pipelined."""

    def __init__(self, stream: Stream, max_frame_bytes: int) -> None:
        self.stream = stream
        self._pending: dict[int, asyncio.Future[Frame]] = {}
        self._last_id = 0
        self._send_lock = asyncio.Lock()
        self.failure: BaseException | None = None
        decoder = FrameDecoder(max_frame_bytes + ANSWER_SLACK_BYTES)
        self._reader = asyncio.get_running_loop().create_task(self._read(decoder))

    async def call(self, frame: Frame, timeout_s: float) -> Frame:
        """Send request `frame` (its correlation id replaced); its answer."""
        self._last_id = corr = self._last_id % 0xFFFF_FFFF + 1
        data = encode_frame(
            frame.op, corr, frame.partition_id, frame.header, frame.payload, flags=frame.flags
        )
        answer: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self._pending[corr] = answer
        try:
            async with self._send_lock:
                await self.stream.sendall(data)
            return await asyncio.wait_for(answer, timeout_s)
        finally:
            self._pending.pop(corr, None)

    async def _read(self, decoder: FrameDecoder) -> None:
        try:
            while True:
                frame = await read_frame(self.stream, decoder)
                answer = self._pending.pop(frame.correlation_id, None)
                if answer is not None and not answer.done():
                    answer.set_result(frame)
        except (OSError, ProtocolError) as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        self.failure = exc
        for answer in self._pending.values():
            if not answer.done():
                answer.set_exception(ConnectionResetError(f"the connection failed: {exc}"))
        self._pending.clear()
        close_stream(self.stream)

    def close(self) -> None:
        self._reader.cancel()
        self._fail(ConnectionResetError("closed"))


class PeerCalls:
    """This shard's requests to other nodes (see the module docstring)."""

    def __init__(
        self,
        auth: PeerAuth,
        view: Callable[[], NodeView],
        max_frame_bytes: int,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.auth = auth
        self.view = view
        self.max_frame_bytes = max_frame_bytes
        self._layouts: dict[str, NodeLayout] = {}
        """Each node's layout, dropped when an ask or a call to the node fails."""
        self._asked: dict[str, float] = {}
        """When each node's layout was last asked for by `live_layout`."""
        self._asking: dict[str, asyncio.Task[None]] = {}
        self._leaders: dict[str, tuple[float, dict[int, str]]] = {}
        self._clock = clock
        self._connections: dict[tuple[str, int], _Connection] = {}
        self._opening: dict[tuple[str, int], asyncio.Lock] = {}

    async def call(
        self, node_id: str, message: Message, timeout_s: float = CALL_TIMEOUT_S
    ) -> Frame:
        """Send `message` to the shard of `node_id` owning its partition id; the
        answer frame (an error answer too). Raises `PeerCallError`."""
        frame = message.to_frame(0)
        try:
            conn = await self._connection(node_id, frame.partition_id)
        except (OSError, PeerLinkError, TimeoutError, ProtocolError) as exc:
            self._layouts.pop(node_id, None)
            raise PeerCallError(node_id, f"cannot be reached ({exc})", sent=False) from None
        try:
            return await conn.call(frame, timeout_s)
        except TimeoutError:
            raise PeerCallError(
                node_id, f"did not answer within {timeout_s:.0f} s", sent=True
            ) from None
        except OSError as exc:
            self._layouts.pop(node_id, None)
            raise PeerCallError(node_id, f"lost the connection ({exc})", sent=True) from None

    def _member(self, node_id: str) -> Node:
        member = self.view().get(node_id)
        if member is None:
            raise PeerLinkError(f"{node_id!r} is not a member of the cluster")
        return member

    async def layout(self, node_id: str) -> NodeLayout:
        """Where `node_id`'s shards listen (asked once, then kept until a call
        to it fails). Raises `PeerLinkError`, OSError or TimeoutError."""
        layout = self._layouts.get(node_id)
        if layout is None:
            member = self._member(node_id)
            layout = await fetch_layout(member.host, member.port, self.auth, node_id)
            self._layouts[node_id] = layout
        return layout

    async def live_layout(self, node_id: str, max_age_s: float) -> NodeLayout | None:
        """`node_id`'s layout if it answered its last ask (and no call to it
        failed since), None if not:
        for a caller with no other sign the node is alive (no traffic from it).
        The first ask is awaited; once the last is older than `max_age_s`, the
        next runs in the background (one at a time, the last answer standing
        meanwhile), so no caller waits on a node that may be gone."""
        asked_at = self._asked.get(node_id)
        if asked_at is None:
            await self._ask_layout(node_id)
        elif node_id not in self._asking and self._clock.monotonic() - asked_at > max_age_s:
            task = asyncio.get_running_loop().create_task(self._ask_layout(node_id))
            self._asking[node_id] = task
            task.add_done_callback(lambda _: self._asking.pop(node_id, None))
        return self._layouts.get(node_id)

    async def _ask_layout(self, node_id: str) -> None:
        self._asked[node_id] = self._clock.monotonic()
        try:
            member = self._member(node_id)
            layout = await fetch_layout(member.host, member.port, self.auth, node_id)
        except (OSError, PeerLinkError, TimeoutError, ProtocolError):
            self._layouts.pop(node_id, None)
        else:
            self._layouts[node_id] = layout

    async def leaders(self, node_id: str) -> dict[int, str]:
        """The partition leaders `node_id` knows (its metadata answer, asked
        over the peer session: a node with logins answers a client's only
        after a login), kept for `LEADERS_TTL_S`: what a node that hosts no
        replica of a partition asks one that does. Raises `PeerCallError`,
        or `PeerLinkError` for an answer that is not metadata."""
        now = self._clock.monotonic()
        known = self._leaders.get(node_id)
        if known is not None and now - known[0] < LEADERS_TTL_S:
            return known[1]
        response = decode_response(await self.call(node_id, MetadataRequest()))
        if not isinstance(response, MetadataResponse):
            raise PeerLinkError(f"{node_id!r} answered metadata with {type(response).__name__}")
        leaders = dict(response.leaders)
        self._leaders[node_id] = (now, leaders)
        return leaders

    async def _connection(self, node_id: str, pid: int) -> _Connection:
        host, ports, _ = await self.layout(node_id)
        key = (node_id, shard_for(pid, len(ports)))
        lock = self._opening.setdefault(key, asyncio.Lock())
        async with lock:
            conn = self._connections.get(key)
            if conn is None or conn.failure is not None:
                opened = await ShardConnection.open(
                    host, ports[key[1]], self.auth, node_id, self.max_frame_bytes
                )
                conn = self._connections[key] = _Connection(opened.stream, self.max_frame_bytes)
            return conn

    def close(self) -> None:
        for task in list(self._asking.values()):
            task.cancel()
        for conn in self._connections.values():
            with contextlib.suppress(Exception):
                conn.close()
        self._connections.clear()
