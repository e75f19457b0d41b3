"""Serving one stream connection: a client's TCP socket or a peer shard's channel.

Rules, and why:

- Requests are pipelined: every complete frame starts its own task, and the
  response is written when it is ready (clients match them by correlation
  id). Tasks start in arrival order and run synchronously up to the log append,
  so pipelined produces to one partition are appended in the order sent. A
  plain produce that can be staged at once, or a fetch that can be read at
  once, skips the task (`laminar.shards.fastpath`); a produce is staged in the
  same order.
- Responses leave through an `Outbox`: all those completed in one loop
  iteration go out in one gathering write.
- Resources are bounded: at most `MAX_IN_FLIGHT` requests per connection and
  `MAX_PENDING_OUT_BYTES` of unsent responses; past either, the connection stops
  reading until it drains (TCP then pushes back on the client). The frame
  decoder bounds buffered bytes to twice the frame limit, headers by
  `REQUEST_HEADER_LIMITS`, and frames of ops without a payload to a header's
  room. Input held (buffered or in flight) is charged to the shard's
  `InputBudget`: over budget, a connection that holds anything stops reading.
- Fatal framing errors (bad magic, wrong version, oversized or malformed frame):
  the stream is out of step, so the connection gets one error response (none for
  bad magic: that peer does not speak laminar) and is closed. Errors inside a
  well-framed request are answered and the connection carries on.
- A client that disconnects mid-frame loses only that partial frame: a request
  is acted on only once complete, so nothing is ever half-appended.
- Idle connections are closed by the shard's sweeper (`Connection.idle_for`):
  no request in flight and no complete frame for the idle timeout. A client that
  sends half a frame and stalls is idle too, and is closed sooner by the frame
  deadline (`partial_since`: when the first byte of the frame being received
  arrived).
- End of stream from the client ends reading, but requests already received are
  still answered before the socket is closed.
- A connection whose first frame is PEER_HELLO is another node opening a Raft
  link: it is handed, socket and all, to `on_peer` (the shard's replication,
  which authenticates it) and leaves this class. Without `on_peer` (a single
  node) the frame is served like any other: an unknown op.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import time
from collections.abc import Callable
from typing import Final

from laminar.outbox import Outbox
from laminar.replication.transport import PEER_HELLO
from laminar.shards.budget import InputBudget
from laminar.shards.dispatch import Dispatcher
from laminar.shards.fastpath import RequestFastPath
from laminar.shards.handlers import RequestContext
from laminar.shards.metrics import ShardMetrics
from laminar.wire import (
    NEED_DATA,
    REQUEST_HEADER_LIMITS,
    BadMagic,
    ErrorResponse,
    Frame,
    FrameDecoder,
    ProtocolError,
    request_frame_limits,
)
from laminar.wire.codec import Buffer

logger = logging.getLogger("laminar.shards")

OnPeer = Callable[[socket.socket, Frame], None]

MAX_IN_FLIGHT: Final = 256
MAX_PENDING_OUT_BYTES: Final = 16 << 20
READ_BYTES: Final = 256 << 10


@functools.lru_cache(maxsize=4)
def _frame_limits(max_frame_bytes: int) -> list[int]:
    return request_frame_limits(max_frame_bytes, REQUEST_HEADER_LIMITS.max_header_bytes)


class Connection:
    """One accepted stream socket and the requests it carries."""

    def __init__(
        self,
        sock: socket.socket,
        dispatcher: Dispatcher,
        metrics: ShardMetrics,
        ctx: RequestContext,
        max_frame_bytes: int,
        on_close: Callable[[Connection], None],
        budget: InputBudget,
        on_peer: OnPeer | None = None,
    ) -> None:
        self.sock = sock
        self._loop = asyncio.get_running_loop()
        self._dispatcher = dispatcher
        self._metrics = metrics
        self._ctx = ctx
        self.internal = ctx.internal
        self._decoder = FrameDecoder(
            max_frame_bytes,
            frame_limits=_frame_limits(max_frame_bytes),
            header_limits=REQUEST_HEADER_LIMITS,
        )
        self._budget = budget
        self._held = 0
        """Bytes charged to the budget: buffered input plus requests in flight."""
        self._outbox = Outbox(self._loop, sock, self._on_write_error)
        self._on_close = on_close
        self._reader: asyncio.Task[None] | None = None
        self._tasks: dict[asyncio.Task[None], int] = {}
        """Requests in flight as tasks, and what each is charged."""
        self._fast: RequestFastPath | None = None
        self._fast_in_flight = 0
        """Requests taken by the fast path and not answered yet."""
        self._resume: asyncio.Future[None] | None = None
        self._idle_waiter: asyncio.Future[None] | None = None
        self.last_frame_at = time.monotonic()
        self.partial_since: float | None = None
        """When the first byte of the partial frame in the buffer arrived (None: none)."""
        self.closed = False
        self._stopping = False
        self._reading = False
        self._on_peer = on_peer
        self._peer_hello: Frame | None = None
        self._handed_over = False
        self._frames = 0

    @property
    def in_flight(self) -> int:
        return len(self._tasks) + self._fast_in_flight

    def idle_for(self, now: float) -> float:
        """Seconds without a complete frame while nothing is in flight (0 if busy)."""
        if self.in_flight:
            return 0.0
        return now - self.last_frame_at

    async def serve(self) -> None:
        """Read and dispatch frames until the peer closes, errs or is stopped;
        then answer what was received and close."""
        reader = self._reader = asyncio.current_task()
        assert reader is not None
        self._fast = RequestFastPath(self._dispatcher)  # in this task's context (queue)
        metrics = self._metrics
        metrics.connections_total += 1
        metrics.connections_open += 1
        try:
            try:
                self._reading = True
                await self._read_loop()
            except asyncio.CancelledError:
                if not self._stopping:
                    raise
                reader.uncancel()  # stop(): no new requests, finish the rest
            except ProtocolError as exc:
                metrics.protocol_errors += 1
                if not isinstance(exc, BadMagic):
                    error = ErrorResponse.from_error(exc)
                    self._outbox.send(error.encode_buffers(exc.correlation_id or 0))
            except OSError:
                pass  # reset by peer: answers could not be delivered anyway
            self._reading = False
            await self._finish_in_flight()
        finally:
            metrics.connections_open -= 1
            self._close()

    def _hand_over(self) -> bool:
        """Give a peer connection to the replication layer; True if it was one."""
        hello, on_peer = self._peer_hello, self._on_peer
        if hello is None or on_peer is None:
            return False
        self._handed_over = True
        on_peer(self.sock, hello)
        return True

    async def _read_loop(self) -> None:
        loop = self._loop
        sock = self.sock
        decoder = self._decoder
        metrics = self._metrics
        outbox = self._outbox
        budget = self._budget
        while not self._stopping:
            if (
                self.in_flight >= MAX_IN_FLIGHT
                or outbox.pending_bytes > MAX_PENDING_OUT_BYTES
                or (budget.used >= budget.limit_bytes and self._held)
            ):
                await self._wait_resume()
                continue
            data = await loop.sock_recv(sock, min(READ_BYTES, decoder.room))
            if not data:
                return
            now = time.monotonic()
            received = len(data)
            metrics.bytes_in += received
            decoder.feed(data)
            budget.charge(received)
            self._held += received
            started = False
            while True:
                frame = decoder.next_frame()
                if frame is NEED_DATA:
                    break
                started = True
                self._frames += 1
                if frame.op == PEER_HELLO and self._frames == 1 and self._on_peer is not None:
                    if decoder.buffered_bytes:
                        raise ProtocolError("a peer's hello must come alone (await the challenge)")
                    self._peer_hello = frame
                    return
                self._start(frame, decoder.last_frame_bytes)
            if started:
                self.last_frame_at = now
            if not decoder.buffered_bytes:
                self.partial_since = None
            elif started or self.partial_since is None:
                self.partial_since = now

    def _start(self, frame: Frame, frame_bytes: int) -> None:
        cost = self._budget.admit(frame_bytes, len(frame.payload))
        self._held += cost - frame_bytes  # the frame's own bytes were charged when received
        fast = self._fast
        if fast is not None:
            self._fast_in_flight += 1  # before: a fetch is answered inside try_serve
            if fast.try_serve(frame, self._ctx, functools.partial(self._answer_fast, cost)):
                return
            self._fast_in_flight -= 1
        task = self._loop.create_task(self._serve_one(frame))
        self._tasks[task] = cost
        task.add_done_callback(self._task_done)

    def _release(self, cost: int) -> None:
        self._held -= cost
        self._budget.release(cost)

    def _answer_fast(self, cost: int, response: list[Buffer]) -> None:
        """A fast-path request is done (a produce durable or failed, a fetch
        read): answer it, unless the connection is gone (a produce's records stay
        appended, as with a task)."""
        self._fast_in_flight -= 1
        self._release(cost)
        if not self.closed:
            self._metrics.bytes_out += self._outbox.send(response)
        self._request_finished()

    async def _serve_one(self, frame: Frame) -> None:
        response = await self._dispatcher.dispatch(frame, self._ctx)
        self._metrics.bytes_out += self._outbox.send(response)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._release(self._tasks.pop(task, 0))
        if not task.cancelled() and task.exception() is not None:
            logger.error("request task failed", exc_info=task.exception())
        self._request_finished()

    def _request_finished(self) -> None:
        self.last_frame_at = time.monotonic()
        waiter = self._resume
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if not self.in_flight and self._idle_waiter is not None and not self._idle_waiter.done():
            self._idle_waiter.set_result(None)

    async def _wait_resume(self) -> None:
        """Wait for a request to finish, the outbox to drain or the shard's budget
        to free up. The frame deadline runs on: a shard out of budget sheds the
        partial frames it holds rather than wait for them."""
        self._resume = self._loop.create_future()
        waiter = self._resume
        if self._budget.exhausted:
            self._budget.wake_when_available(waiter)
        if self._outbox.pending_bytes > MAX_PENDING_OUT_BYTES:
            drained = self._loop.create_task(self._outbox.drained())
            await asyncio.wait([waiter, drained], return_when=asyncio.FIRST_COMPLETED)
            drained.cancel()
        else:
            await waiter
        self._resume = None

    async def _finish_in_flight(self) -> None:
        """Let requests already received complete and their answers go out."""
        while self.in_flight:
            self._idle_waiter = self._loop.create_future()
            await self._idle_waiter
        self._idle_waiter = None
        await self._outbox.drained()

    def _on_write_error(self, exc: BaseException) -> None:
        """The peer is gone: stop reading and abandon requests still in flight
        (a produce already staged in the log stays appended)."""
        self.stop()
        for task in list(self._tasks):
            task.cancel()

    def stop(self) -> None:
        """Stop reading new requests (idle timeout, drain, broken socket); requests
        in flight still complete and are answered before the socket closes."""
        self._stopping = True
        if self._reading and self._reader is not None and not self._reader.done():
            self._reader.cancel()  # only the read: what was received is still answered

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        # Requests in flight release their own charges when they end.
        buffered = self._decoder.buffered_bytes
        self._held -= buffered
        self._budget.release(buffered)
        self._decoder.discard()  # the connection may live on in a reference cycle
        self._outbox.abort()
        for task in list(self._tasks):
            task.cancel()
        if not self._hand_over():
            self.sock.close()
        self._on_close(self)
