"""One request frame in, one response frame out: routing, forwarding, errors.

`Dispatcher.dispatch(frame, ctx)` is the single entry for every transport
(TCP connections, the inter-shard channel, datagrams). It asks the router
where the frame belongs; forwards it to the owning shard (wrapped in FORWARD,
byte for byte) or unwraps a FORWARD that arrived for this shard; decodes and
runs the handler; and turns any failure into an error response with the
request's correlation id, op and partition id. It never raises for a bad
request: the connection decides only about fatal framing errors.

Authorization (`laminar.shards.authorization`): on a node with logins, a
client's request is checked after decoding, on the shard that serves it,
before its handler runs; a FORWARD carries the client's principal so the
owner checks it, never the forwarder.

Counting: a request is counted (by op, with its latency) by the shard that
serves it; the receiving shard of a forwarded request counts it as
`forwarded_out`, the owner as `forwarded_in`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from laminar.channels.siblings import ChannelError, Channels, ChannelUnreachable
from laminar.shards.authorization import UnresolvedTopic
from laminar.shards.errors import error_for
from laminar.shards.handlers import Handlers, RequestContext
from laminar.shards.metrics import ShardMetrics
from laminar.shards.router import Action, route
from laminar.wire import (
    REQUEST_HEADER_LIMITS,
    ErrorCode,
    ErrorResponse,
    ForwardRequest,
    ForwardResponse,
    Frame,
    Op,
    decode_frame,
    decode_request,
)
from laminar.wire.codec import Buffer

logger = logging.getLogger("laminar.shards")

FORWARD_TIMEOUT_S: Final = 15.0
"""How long a forwarded request may take beyond its own long-poll wait."""
CHANNEL_FRAME_SLACK: Final = 64 << 10
"""Room a FORWARD wrapper needs around a client frame of the largest size."""

OP_NAMES: Final = {int(op): op.name.lower() for op in Op}

Handler = Callable[[Any, int, RequestContext], Awaitable[list[Buffer]]]


_READ_OPS: Final = frozenset({Op.FETCH, Op.LIST_OFFSETS, Op.PING, Op.METADATA, Op.LIST_TOPICS})


def _repeatable(frame: Frame) -> bool:
    """Whether serving `frame` twice is harmless: a read, or an idempotent produce."""
    return frame.op in _READ_OPS or (
        frame.op == Op.PRODUCE and frame.header.get("producer_id") is not None
    )


def _max_wait_s(frame: Frame, cap_ms: int) -> float:
    if frame.op != Op.FETCH:
        return 0.0
    wait = frame.header.get("max_wait_ms")
    return min(wait, cap_ms) / 1000 if type(wait) is int and wait > 0 else 0.0


class Dispatcher:
    """Routes and serves request frames for one shard."""

    def __init__(
        self,
        shard_id: int,
        shard_count: int,
        handlers: Handlers,
        channels: Channels,
        metrics: ShardMetrics,
        max_frame_bytes: int,
        clustered: bool = False,
    ) -> None:
        self.shard_id = shard_id
        self.clustered = clustered
        self.shard_count = shard_count
        self.handlers = handlers
        self.channels = channels
        self.metrics = metrics
        self.max_frame_bytes = max_frame_bytes
        self.authorizer = handlers.authorizer
        """The ACL checks (None: the node has no logins and checks nothing)."""
        self._table: dict[int, Handler] = {
            Op.PRODUCE: handlers.produce,
            Op.FETCH: handlers.fetch,
            Op.LIST_OFFSETS: handlers.list_offsets,
            Op.METADATA: handlers.metadata_request,
            Op.CREATE_TOPIC: handlers.create_topic,
            Op.DELETE_TOPIC: handlers.delete_topic,
            Op.LIST_TOPICS: handlers.list_topics,
            Op.PING: handlers.ping,
            Op.ALTER_TOPIC: handlers.alter_topic,
            Op.DECOMMISSION_NODE: handlers.decommission_node,
            Op.METADATA_TAIL: handlers.metadata_tail,
        }

    def add_handlers(self, table: Mapping[int, Handler]) -> None:
        """Serve more ops (the write protocol registers its own)."""
        self._table.update(table)

    async def dispatch(self, frame: Frame, ctx: RequestContext) -> list[Buffer]:
        """The response frame (as buffers) to one request frame. Never raises,
        except CancelledError."""
        start = time.perf_counter()
        try:
            decision = route(
                frame.op,
                frame.flags,
                frame.partition_id,
                shard_id=self.shard_id,
                shard_count=self.shard_count,
                forwarded=ctx.forwarded,
                internal=ctx.internal,
                clustered=self.clustered,
            )
            if decision.action is Action.FORWARD:
                return await self._forward(decision.target, frame, ctx)
            if decision.action is Action.REJECT:
                return self._error(frame, decision.code, decision.message)
            if frame.op == Op.FORWARD:
                return await self._unwrap(frame)
            request = decode_request(frame)
            if self.authorizer is not None and ctx.from_client:
                try:
                    self.authorizer.check(frame.op, request, ctx.principal)
                except UnresolvedTopic as unresolved:
                    await self._authorize_resolved(unresolved, frame.op, request, ctx.principal)
            out = await self._table[frame.op](request, frame.correlation_id, ctx)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return self.failure_response(frame, exc)
        self.metrics.request_done(OP_NAMES[frame.op], time.perf_counter() - start)
        return out

    async def _authorize_resolved(
        self, unresolved: UnresolvedTopic, op: int, request: Any, principal: str | None
    ) -> None:
        """The check again once the topic id it named is applied here (waiting
        for the metadata, or UNKNOWN_TOPIC / NOT_READY as its handler would
        answer)."""
        assert self.authorizer is not None
        await self.handlers.topic_of(unresolved.partition_id)
        self.authorizer.check(op, request, principal)

    def failure_response(self, frame: Frame, exc: Exception) -> list[Buffer]:
        """The error response to `frame` for a failure while serving it; server
        bugs (INTERNAL) are logged with their traceback."""
        code, message, expected = error_for(exc)
        if not expected:
            logger.error(
                "shard %d failed serving op %d on partition %d",
                self.shard_id,
                frame.op,
                frame.partition_id,
                exc_info=exc,
            )
        return self._error(frame, code, message, getattr(exc, "leader", None))

    def _error(
        self, frame: Frame, code: ErrorCode, message: str, leader: str | None = None
    ) -> list[Buffer]:
        self.metrics.error(code.name.lower())
        return ErrorResponse(frame.op, code, message, frame.partition_id, leader).encode_buffers(
            frame.correlation_id
        )

    async def _forward(self, target: int, frame: Frame, ctx: RequestContext) -> list[Buffer]:
        """Serve `frame` on shard `target` and return its response frame. The
        client's connection id and principal go with it: the owner checks it."""
        self.metrics.forwarded_out += 1
        wrapped = ForwardRequest(
            frame.partition_id, self.shard_id, frame.encode(), ctx.client, ctx.principal
        )
        try:
            response = await self.channels.to(target).request(
                wrapped, FORWARD_TIMEOUT_S + _max_wait_s(frame, self.handlers.ident.max_wait_ms)
            )
        except ChannelUnreachable as exc:
            self.metrics.forward_failures += 1
            return self._error(frame, ErrorCode.NOT_READY, f"{exc}; nothing was applied; retry")
        except ChannelError as exc:
            self.metrics.forward_failures += 1
            if _repeatable(frame):
                return self._error(frame, ErrorCode.TIMEOUT, f"{exc}; retry")
            return self._error(
                frame,
                ErrorCode.OUTCOME_UNKNOWN,
                f"{exc}: shard {target} got the request but its answer was lost; it may or "
                "may not have been applied",
            )
        if response.is_error:
            refused = ErrorResponse.from_frame(response)
            return self._error(frame, refused.code, refused.message, refused.leader)
        return [ForwardResponse.from_frame(response).frame]

    async def _unwrap(self, frame: Frame) -> list[Buffer]:
        """Serve the client frame inside a FORWARD from another shard."""
        forward = ForwardRequest.from_frame(frame)
        inner = decode_frame(
            forward.frame, self.max_frame_bytes + CHANNEL_FRAME_SLACK, REQUEST_HEADER_LIMITS
        )
        self.metrics.forwarded_in += 1
        ctx = RequestContext(
            received_by=forward.origin_shard,
            internal=True,
            forwarded=True,
            origin_shard=forward.origin_shard,
            client=forward.client,
            principal=forward.principal,
        )
        response = b"".join(await self.dispatch(inner, ctx))
        return ForwardResponse(frame.partition_id, response).encode_buffers(frame.correlation_id)
