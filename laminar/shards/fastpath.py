"""Produces and fetches answered straight from the read loop, without a task.

The general path gives every request frame a task (`Connection` ->
`Dispatcher.dispatch` -> `Handlers.produce` / `fetch`): a coroutine stack, a
Task, a done callback, and awaits that mostly complete at once. Under load
most frames are plain produces and fetches, and that machinery was a large
share of a shard's Python time per request.

`RequestFastPath.try_serve` does a request inline when nothing in it has to
wait:

- a produce this shard owns, to a known partition whose log is open, with no
  rollover due: the batch is placed (`Handlers.place_produce`) and answered
  from the flush future's done callback. An idempotent one only when it simply
  continues its producer's sequence and the producer table is loaded
  (`IdempotentProducers.place_nowait`): a client's first batch, a resend, a
  gap or a table to rebuild take the general path. Batches placed here and by
  the general path keep their arrival order (both place synchronously, in
  order);
- a fetch this shard owns, from an open log, that is not a long-poll at the
  end and whose records' bytes are in the page cache
  (`Handlers.fetch_nowait`: read with `RWF_NOWAIT`, checksums verified as on
  the general path): answered at once, no task, no io_uring round trip.

On a node with logins both are served here only when the client's principal
may (WRITE or READ on the topic, `Authorizer.allows_partition`: one cached
decision); otherwise the general path refuses them, naming what is missing.

Everything else returns False before anything happened, and the general path
serves it with the same answers: this module decides only *how* a request is
served, never *what* the answer is.

This is the one fast path of the request path; keep it the only one.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Callable

from laminar.placement import shard_for
from laminar.shards.dispatch import Dispatcher
from laminar.shards.handlers import RequestContext
from laminar.wire import FetchRequest, Flags, Frame, Op, ProduceRequest, ProduceResponse
from laminar.wire.codec import Buffer

Respond = Callable[[list[Buffer]], None]

_NOT_PLAIN_REQUEST = Flags.RESPONSE | Flags.ERROR


class RequestFastPath:
    """Serves produces and fetches without a task (see the module docstring)."""

    __slots__ = (
        "_authorizer",
        "_context",
        "_dispatcher",
        "_handlers",
        "_metrics",
        "_shard_count",
        "_shard_id",
    )

    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher
        self._handlers = dispatcher.handlers
        self._metrics = dispatcher.metrics
        self._shard_id = dispatcher.shard_id
        self._shard_count = dispatcher.shard_count
        self._authorizer = dispatcher.authorizer
        # Answers are encoded in the caller's context (its task queue), not in
        # the flusher's, which resolves the future.
        self._context = contextvars.copy_context()

    def try_serve(self, frame: Frame, ctx: RequestContext, respond: Respond) -> bool:
        """Serve `frame` and arrange for `respond(answer buffers)`: at once (a
        fetch), or once durable or failed (a produce); False, with nothing done,
        when the general path must serve it."""
        op = frame.op
        if (
            (op != Op.PRODUCE and op != Op.FETCH)
            or frame.flags & _NOT_PLAIN_REQUEST
            or ctx.forwarded
            or shard_for(frame.partition_id, self._shard_count) != self._shard_id
        ):
            return False
        authorizer = self._authorizer
        if authorizer is not None and not authorizer.allows_partition(
            ctx.principal, op, frame.partition_id
        ):
            return False  # the general path refuses it, naming what is missing
        if op == Op.FETCH:
            return self._fetch(frame, respond)
        start = time.perf_counter()
        try:
            request = ProduceRequest.from_frame(frame)
            placed = self._handlers.place_produce(request, ctx.client)
        except Exception:
            return False  # the general path answers it with the same error
        if placed is None:
            return False
        first, timestamp_ms, done = placed
        answer = ProduceResponse(frame.partition_id, first, len(request.blobs), timestamp_ms)
        done.add_done_callback(
            functools.partial(self._durable, frame, answer, start, respond),
            context=self._context,
        )
        return True

    def _fetch(self, frame: Frame, respond: Respond) -> bool:
        start = time.perf_counter()
        try:
            answer = self._handlers.fetch_nowait(
                FetchRequest.from_frame(frame), frame.correlation_id
            )
        except Exception:
            return False  # the general path answers it with the same error
        if answer is None:
            return False
        self._metrics.request_done("fetch", time.perf_counter() - start)
        respond(answer)
        return True

    def _durable(
        self,
        frame: Frame,
        answer: ProduceResponse,
        start: float,
        respond: Respond,
        done: asyncio.Future[None],
    ) -> None:
        if done.cancelled():  # nothing cancels a flush's waiters; answer all the same
            respond(self._dispatcher.failure_response(frame, RuntimeError("append cancelled")))
            return
        error = done.exception()
        if error is not None:
            if not isinstance(error, Exception):
                error = RuntimeError(f"append failed: {error!r}")
            respond(self._dispatcher.failure_response(frame, error))
            return
        metrics = self._metrics
        metrics.records_in += answer.count
        metrics.request_done("produce", time.perf_counter() - start)
        respond(answer.encode_buffers(frame.correlation_id))
