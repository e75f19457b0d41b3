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
  `MAX_ANSWER_BYTES` of answers reserved (fetches in flight) or queued and not
  yet taken by the kernel. The bounds are checked before every frame is
  started, not only before a read: past either, the connection starts no
  more frames (complete ones stay in its buffer) and reads nothing (TCP then
  pushes back on the client) until a request finishes or answers drain. The
  frame decoder bounds buffered bytes to twice the frame limit, headers by
  `REQUEST_HEADER_LIMITS`, and frames of ops without a payload (PEER_HELLO
  included) to a header's room. Everything held (buffered input, requests in
  flight with their answer reserve, queued answers) is charged to the
  shard's `InputBudget`, under the rules of `laminar.shards.budget`.
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
  link: it is handed, stream and socket (TLS session and the certificate the
  peer showed included), to `on_peer` (the shard's replication, which
  authenticates it) and leaves this class, releasing what it charged.
  Without `on_peer` (a single node) the frame is served like any other: an
  unknown op.
- With a TLS context the connection reads and writes through a
  `laminar.stream.TlsStream`: the handshake runs first, in the reader, so
  the first-request timeout bounds it (the sweeper's `stop` cancels it) and
  its ciphertext is charged to the budget; everything above sees plaintext.
  A failed handshake (a plaintext client, an untrusted peer) or a broken TLS
  stream is logged at a bounded rate and closes this connection only.
- With a `Login` (a node with --auth) the connection serves nothing before it
  has logged in (`laminar.security.login`): a client certificate verified
  by the handshake logs it in at once; otherwise every frame goes to the
  `_login_step` hook (laminar's door: AUTHENTICATE, answered inline, so a
  frame behind the last login message already sees the principal; and a
  layout-only METADATA, the node id and shard ports, public, which another
  node asks before it opens its Raft links).
  A refusal (a failed exchange, any other request first) is counted by
  reason, logged at a bounded rate, answered after `LOGIN_FAILURE_DELAY_S`
  (on the loop: other connections go on) and closes the connection; the
  frames behind it are never started, so nothing they carry is applied.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.lograte import RateLimitedLog
from laminar.outbox import Outbox
from laminar.replication.transport import PEER_HELLO
from laminar.security.frames import (
    AUTHENTICATE_FRAME_BYTES,
    AuthenticateRequest,
    AuthenticateResponse,
)
from laminar.security.login import Login
from laminar.security.scram import Authenticated, Refused
from laminar.security.tls import TlsSession
from laminar.shards.budget import InputBudget, answer_reserve_bytes
from laminar.shards.dispatch import Dispatcher
from laminar.shards.fastpath import RequestFastPath
from laminar.shards.handlers import RequestContext
from laminar.shards.metrics import ShardMetrics
from laminar.stream import PlainStream, Stream, TlsStream
from laminar.wire import (
    NEED_DATA,
    REQUEST_HEADER_LIMITS,
    BadMagic,
    ErrorCode,
    ErrorResponse,
    Frame,
    FrameDecoder,
    Op,
    ProtocolError,
    request_frame_limits,
)
from laminar.wire.codec import HEADER_OFFSET, Buffer

logger = logging.getLogger("laminar.shards")
_tls_refusals = RateLimitedLog(logger)
_login_refusals = RateLimitedLog(logger)

OnPeer = Callable[[Stream, Frame], None]
"""Takes a peer's connection (its stream, TLS or not) and its PEER_HELLO."""

MAX_IN_FLIGHT: Final = 256
MAX_ANSWER_BYTES: Final = 16 << 20
"""Answer bytes one connection may have reserved or queued before it starts no
more frames (one answer may pass it: a connection with nothing queued may
always start one)."""
READ_BYTES: Final = 256 << 10
LOGIN_FAILURE_DELAY_S: Final = 0.5
"""How long a refused login waits for its answer: each guess at a password
costs a connection and this long (the loop serves others meanwhile)."""


@dataclass(frozen=True, slots=True)
class LoginReply:
    """What `Connection._login_step` answers a frame before the login succeeded."""

    answer: list[Buffer]
    refused: Refused | None = None
    """Set when the login failed: the answer leaves late and the connection closes."""


@functools.lru_cache(maxsize=4)
def _frame_limits(max_frame_bytes: int) -> list[int]:
    header_bytes = REQUEST_HEADER_LIMITS.max_header_bytes
    limits = request_frame_limits(max_frame_bytes, header_bytes)
    limits[PEER_HELLO] = min(max_frame_bytes, HEADER_OFFSET + header_bytes)  # no payload
    limits[Op.AUTHENTICATE] = min(max_frame_bytes, AUTHENTICATE_FRAME_BYTES)
    return limits


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
        clock: Clock = SYSTEM_CLOCK,
        tls: ssl.SSLContext | None = None,
        login: Login | None = None,
    ) -> None:
        self.sock = sock
        self._clock = clock
        self._loop = asyncio.get_running_loop()
        self._dispatcher = dispatcher
        self._metrics = metrics
        self._ctx = ctx
        self.internal = ctx.internal
        self._decoder = self._new_decoder(max_frame_bytes)
        self._budget = budget
        self._fetch_bytes_max = dispatcher.handlers.fetch_bytes_max
        self._held = 0
        """Bytes charged to the budget: buffered input, requests in flight (with
        their answer reserve) and queued answers."""
        self._answer_bytes = 0
        """Answers reserved (fetches in flight) or queued and not yet written."""
        self._stream: Stream = (
            PlainStream(self._loop, sock)
            if tls is None
            else TlsStream(self._loop, sock, TlsSession(tls, server_side=True), budget)
        )
        self._outbox = Outbox(self._loop, self._stream, self._on_write_error, self._answer_written)
        self._on_close = on_close
        self._reader: asyncio.Task[None] | None = None
        self._tasks: dict[asyncio.Task[None], tuple[int, int]] = {}
        """Requests in flight as tasks: what each is charged, and its answer reserve."""
        self._fast: RequestFastPath | None = None
        self._fast_in_flight = 0
        """Requests taken by the fast path and not answered yet."""
        self._next: Frame | None = None
        """A decoded frame waiting for room to start (its bytes still count as input)."""
        self._next_bytes = 0
        self.starved = False
        """Waiting for budget while holding less than its fair share: the shard
        then sheds connections holding more (`Shard._shed_for_starved`)."""
        self._holding = False
        """Whether this connection holds input and is counted in `InputBudget.holders`."""
        self._resume: asyncio.Future[None] | None = None
        self._idle_waiter: asyncio.Future[None] | None = None
        self.last_frame_at = clock.monotonic()
        self.partial_since: float | None = None
        """When the first byte of the partial frame in the buffer arrived (None: none)."""
        self.closed = False
        self._stopping = False
        self._reading = False
        self._on_peer = on_peer
        self._peer_hello: Frame | None = None
        self._handed_over = False
        self._frames = 0
        self._login = login
        """None: nothing to log in to (no --auth, or the inter-shard channel)."""
        self._login_messages = 0
        """Frames the login hook answered (a door that serves frames before a
        login, as the Kafka door does until SASL, answers none)."""

    @property
    def in_flight(self) -> int:
        return len(self._tasks) + self._fast_in_flight

    @property
    def answer_bytes(self) -> int:
        """Answer bytes reserved (fetches in flight) or queued and not yet written."""
        return self._answer_bytes

    @property
    def before_first_request(self) -> bool:
        """Whether the client has not sent a whole request yet, or (a node with
        --auth) has begun logging in and not finished: the sweeper closes such
        a connection after the first-request timeout, counted from its last
        frame (a stalled handshake, or a login stalled between messages)."""
        login = self._login
        return not self._frames or (
            self._login_messages > 0 and login is not None and not login.done
        )

    @property
    def handed_over(self) -> bool:
        """Whether this connection went to the replication as a peer's."""
        return self._handed_over

    # -- what differs between the doors (`laminar.shards.kafka_connection`) ------

    max_in_flight: int = MAX_IN_FLIGHT
    """Requests served at once; their answers may leave in any order."""

    def _new_decoder(self, max_frame_bytes: int) -> FrameDecoder:
        return FrameDecoder(
            max_frame_bytes,
            frame_limits=_frame_limits(max_frame_bytes),
            header_limits=REQUEST_HEADER_LIMITS,
        )

    def _new_fast_path(self) -> RequestFastPath | None:
        return RequestFastPath(self._dispatcher)

    def _fatal_answer(self, exc: ProtocolError) -> list[Buffer] | None:
        """The answer to a framing error before the connection closes (none to
        a peer that does not speak laminar)."""
        if isinstance(exc, BadMagic):
            return None
        return ErrorResponse.from_error(exc).encode_buffers(exc.correlation_id or 0)

    def _answer_reserve(self, frame: Frame) -> int:
        return answer_reserve_bytes(frame, self._fetch_bytes_max)

    def _login_step(self, login: Login, frame: Frame) -> LoginReply | None:
        """The reply to `frame` before the connection logged in; None serves it
        as usual (an op a door serves before login; laminar's has none). The
        Kafka door overrides this with its SASL exchange."""
        if frame.op == Op.METADATA and frame.header.get("layout_only") is True:
            return None  # the node's ports, which a peer asks before opening Raft links
        if frame.op != Op.AUTHENTICATE:
            return self._login_refusal(frame, login.not_logged_in())
        try:
            request = AuthenticateRequest.from_frame(frame)
        except ProtocolError as exc:
            return self._login_refusal(frame, login.malformed(exc.message))
        step = login.step(request.mechanism, request.message)
        if isinstance(step, Refused):
            return self._login_refusal(frame, step)
        answer = AuthenticateResponse(step.message, done=isinstance(step, Authenticated))
        return LoginReply(answer.encode_buffers(frame.correlation_id))

    def _ended(self, frame: Frame, refused: Refused) -> LoginReply:
        """The reply to `frame` once the login has ended (`Login.current`: its
        user was deleted): the reason, then the connection closes."""
        return self._login_refusal(frame, refused)

    @staticmethod
    def _login_refusal(frame: Frame, refused: Refused) -> LoginReply:
        answer = ErrorResponse(frame.op, ErrorCode.AUTHENTICATION_FAILED, refused.reason)
        return LoginReply(answer.encode_buffers(frame.correlation_id), refused)

    @staticmethod
    def _payload_bytes(frame: Frame) -> int:
        """Bytes of the frame kept as they came (not decoded into objects)."""
        return len(frame.payload)

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
        self._fast = self._new_fast_path()  # in this task's context (queue)
        metrics = self._metrics
        metrics.connections_total += 1
        metrics.connections_open += 1
        try:
            try:
                self._reading = True
                await self._stream.handshake()
                if self._login is not None:
                    self._certificate_login(self._login)
                await self._read_loop()
            except asyncio.CancelledError:
                if not self._stopping:
                    raise
                reader.uncancel()  # stop(): no new requests, finish the rest
            except ProtocolError as exc:
                metrics.protocol_errors += 1
                answer = self._fatal_answer(exc)
                if answer is not None:
                    self._outbox.send(answer)
            except ssl.SSLError as exc:
                metrics.tls_refused += 1
                _tls_refusals.warning(
                    "tls",
                    "shard %d: TLS with %s failed (a client without TLS, or one that does "
                    "not trust this node's certificate?), connection closed: %s",
                    self._ctx.received_by,
                    _peer_name(self.sock),
                    exc,
                )
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
        on_peer(self._stream.detach(), hello)
        return True

    async def _read_loop(self) -> None:
        recv = self._stream.recv
        decoder = self._decoder
        metrics = self._metrics
        budget = self._budget
        while not self._stopping:
            now = self._clock.monotonic()
            started = self._take_frames()
            if self._peer_hello is not None or self._stopping:
                return
            if started:
                self.last_frame_at = now
            if self._next is None and not decoder.buffered_bytes:
                self.partial_since = None
            elif started or self.partial_since is None:
                self.partial_since = now
            if self._next is not None or (
                budget.exhausted and self._held and not self._below_share()
            ):
                # Starved: held back while under its share (others took more).
                self.starved = self._next is None and self.input_bytes < budget.fair_share_bytes
                if self.starved and budget.on_starved is not None:
                    budget.on_starved()
                await self._wait_resume()
                self.starved = False
                continue
            data = await recv(min(READ_BYTES, decoder.room))
            if not data:
                return
            received = len(data)
            metrics.bytes_in += received
            decoder.feed(data)
            budget.charge(received)
            self._held += received
            if not self._holding:
                self._holding = True
                budget.holders += 1

    @property
    def input_bytes(self) -> int:
        """Input received and not started yet (a partial frame, or frames waiting)."""
        return self._decoder.buffered_bytes + self._next_bytes

    def _below_share(self) -> bool:
        """Whether this connection's input is below its fair share of the budget
        and the shard below its overdraft: over budget, it may still read (so one
        client's partial frames cannot starve another's; `laminar.shards.budget`)."""
        budget = self._budget
        return (
            budget.used < budget.overdraft_bytes
            and self._decoder.buffered_bytes < budget.fair_share_bytes
        )

    def _not_holding(self) -> None:
        if self._holding and not self._decoder.buffered_bytes and self._next is None:
            self._holding = False
            self._budget.holders -= 1

    def _take_frames(self) -> bool:
        """Start the complete frames buffered, while the bounds allow; True if any
        started. One that may not start yet is kept in `_next`."""
        started = self._take_buffered()
        self._not_holding()
        return started

    def _take_buffered(self) -> bool:
        decoder = self._decoder
        started = False
        while not self._stopping:
            frame = self._next
            if frame is None:
                decoded = decoder.next_frame()
                if decoded is NEED_DATA:
                    return started
                frame = decoded
                self._frames += 1
                if self._on_peer is not None and frame.op == PEER_HELLO and self._frames == 1:
                    if decoder.buffered_bytes:
                        raise ProtocolError("a peer's hello must come alone (await the challenge)")
                    self._peer_hello = frame
                    self._release(decoder.last_frame_bytes)  # the session charges its own
                    return started
                self._next, self._next_bytes = frame, decoder.last_frame_bytes
            reserve = self._answer_reserve(frame)
            if not self._may_start(reserve):
                return started
            frame_bytes = self._next_bytes
            self._next, self._next_bytes = None, 0
            self._start(frame, frame_bytes, reserve)
            started = True
        return started

    def _may_start(self, reserve: int) -> bool:
        """Whether a frame whose answer reserves `reserve` bytes may start now
        (the rules of `laminar.shards.budget`)."""
        busy = self.in_flight or self._answer_bytes
        if self.in_flight >= self.max_in_flight or (
            busy and self._answer_bytes >= MAX_ANSWER_BYTES
        ):
            return False
        budget = self._budget
        if reserve:
            own_input = self._decoder.buffered_bytes + self._next_bytes
            return budget.fits(reserve, own_input)
        return not (busy and budget.exhausted)

    def _start(self, frame: Frame, frame_bytes: int, reserve: int) -> None:
        login = self._login
        if login is not None and not login.current:
            refused = login.refused
            reply = (
                self._login_step(login, frame) if refused is None else self._ended(frame, refused)
            )
            if reply is not None:
                self._login_messages += 1
                self._release(frame_bytes)  # answered here and now: nothing stays held
                self._login_reply(login, reply)
                return
        budget = self._budget
        cost = budget.admit(frame_bytes, self._payload_bytes(frame)) + reserve
        budget.charge(reserve)
        self._held += cost - frame_bytes  # the frame's own bytes were charged when received
        self._answer_bytes += reserve
        fast = self._fast
        if fast is not None:
            self._fast_in_flight += 1  # before: a fetch is answered inside try_serve
            answer = functools.partial(self._answer_fast, cost, reserve)
            if fast.try_serve(frame, self._ctx, answer):
                return
            self._fast_in_flight -= 1
        task = self._loop.create_task(self._serve_one(frame))
        self._tasks[task] = (cost, reserve)
        task.add_done_callback(self._task_done)

    def _certificate_login(self, login: Login) -> None:
        """Log in by the client certificate the handshake verified, if any."""
        refused = login.by_certificate(self._stream.peer_certificate())
        if refused is not None:
            self._login_failed(refused)
            self._stopping = True
        elif login.done:
            self._ctx.principal = login.principal

    def _login_reply(self, login: Login, reply: LoginReply) -> None:
        if reply.refused is None:
            self._send(reply.answer)
            self._ctx.principal = login.principal
            return
        self._login_failed(reply.refused)
        self._stopping = True  # no frame behind this one starts
        task = self._loop.create_task(self._answer_late(reply.answer))
        self._tasks[task] = (0, 0)
        task.add_done_callback(self._task_done)

    def _login_failed(self, refused: Refused) -> None:
        self._metrics.auth_failures[refused.failure.value] += 1
        _login_refusals.warning(
            "login",
            "shard %d: login from %s refused (%s): %s",
            self._ctx.received_by,
            _peer_name(self.sock),
            refused.failure.value,
            refused.detail,
        )

    async def _answer_late(self, answer: list[Buffer]) -> None:
        await asyncio.sleep(LOGIN_FAILURE_DELAY_S)
        self._send(answer)

    def _release(self, cost: int) -> None:
        self._held -= cost
        self._budget.release(cost)

    def _send(self, response: list[Buffer]) -> None:
        """Queue an answer, charged until the kernel takes it (`_answer_written`)."""
        size = self._outbox.send(response)
        self._metrics.bytes_out += size
        if not self._outbox.failed:
            self._budget.charge(size)
            self._held += size
            self._answer_bytes += size

    def _answer_written(self, n: int) -> None:
        self._answer_bytes -= n
        self._release(n)
        self._wake()

    def _answer_fast(self, cost: int, reserve: int, response: list[Buffer]) -> None:
        """A fast-path request is done (a produce durable or failed, a fetch
        read): answer it, unless the connection is gone (a produce's records stay
        appended, as with a task)."""
        self._fast_in_flight -= 1
        if not self.closed:
            self._send(response)
        self._answer_bytes -= reserve
        self._release(cost)
        self._request_finished()

    async def _serve_one(self, frame: Frame) -> None:
        response = await self._dispatcher.dispatch(frame, self._ctx)
        self._send(response)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        cost, reserve = self._tasks.pop(task, (0, 0))
        self._answer_bytes -= reserve
        self._release(cost)
        if not task.cancelled() and task.exception() is not None:
            logger.error("request task failed", exc_info=task.exception())
        self._request_finished()

    def _request_finished(self) -> None:
        self.last_frame_at = self._clock.monotonic()
        self._wake()
        if not self.in_flight and self._idle_waiter is not None and not self._idle_waiter.done():
            self._idle_waiter.set_result(None)

    def _wake(self) -> None:
        waiter = self._resume
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait_resume(self) -> None:
        """Wait for a request to finish, answers to drain or the shard's budget
        to free up. The frame deadline runs on: a shard out of budget sheds the
        partial frames it holds rather than wait for them."""
        self._resume = waiter = self._loop.create_future()
        if self._budget.used:
            self._budget.wake_when_available(waiter)
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
        # Requests in flight release their own charges when they end, queued
        # answers when the outbox drops them.
        self._release(self._decoder.buffered_bytes + self._next_bytes)
        self._next, self._next_bytes = None, 0
        self._decoder.discard()  # the connection may live on in a reference cycle
        self._not_holding()
        self._outbox.abort()
        for task in list(self._tasks):
            task.cancel()
        if not self._hand_over():
            self._stream.end()
            self._stream.close()
            self.sock.close()
        self._on_close(self)


def _peer_name(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return "a client"
    return f"{host}:{port}"
