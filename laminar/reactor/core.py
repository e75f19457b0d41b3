"""The heart of UringEventLoop: one io_uring_enter per iteration, task queues.

Theory of operation:

- The loop subclasses `asyncio.BaseEventLoop`, which brings timers,
  `run_forever`/`run_until_complete`, executors, async generator hooks and
  exception handling. It replaces `_run_once`, the one iteration:
    1. decide the timeout: 0 if anything is ready, else until the next timer;
    2. `ring.wait(timeout)`: a single io_uring_enter that submits every SQE
       prepared since the last iteration and sleeps for a completion (the GIL is
       released; a signal ends the wait early);
    3. run each completion's finisher, which resolves a future;
    4. move callbacks from other threads and due timers into their queues;
    5. run one slice of the task queue with the smallest virtual runtime.
- Every operation carries a token: a tuple whose first item is its finisher,
  called as `finisher(token, res)` with the CQE result. The rest of the tuple is
  what the finisher needs (the future, the buffer). The ring keeps the token and
  the buffers alive until the completion arrives, even if the future was
  cancelled: the kernel may still be writing into them.
- A task cancelled while an operation is in flight submits IORING_OP_ASYNC_CANCEL
  for it; the finisher then sees a cancelled future and only releases resources
  (returns the buffer to its pool, closes an accepted descriptor).
- An eventfd read is kept armed in the ring; `call_soon_threadsafe` writes to the
  eventfd, which completes the read and ends the wait. Signals use Python's
  wakeup fd (a socket pair, as the stock loop does) with a recv kept armed.
- Nothing polls: with nothing ready and no timer the loop sleeps in the kernel.
- The hot path is measured, not guessed (callgrind instruction counts of an
  in-process 64-byte RPC, 16 pipelined): `call_soon` builds its handles without
  `Handle.__init__`, ready callbacks run inline without `Handle._run`, recv
  buffers come from per-size free lists. What remains per operation is the
  price of asyncio itself: a Future, a Handle and a task step.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import errno
import heapq
import logging
import os
import signal
import socket
import time
from asyncio import format_helpers
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, TypeVarTuple, Unpack

from laminar.iouring import IoUringUnavailable, Ring
from laminar.iouring.native import writable_address
from laminar.iouring.ring import missing_for_loop

from .buffers import BufferPool
from .queues import CURRENT_QUEUE, Scheduler, TaskQueueLoop

logger = logging.getLogger("laminar.reactor")

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")
_Handle = asyncio.Handle
_Future = asyncio.Future
_MAXIMUM_SELECT_TIMEOUT = 24 * 3600
_MIN_SCHEDULED_TIMER_HANDLES = 100
_MIN_CANCELLED_TIMER_HANDLES_FRACTION = 0.5
_perf = time.perf_counter
_thread_time = time.thread_time
_new_object = object.__new__


@dataclass(frozen=True, slots=True)
class LoopStats:
    """Counters that show the loop's I/O went through the ring."""

    sqes_submitted: int
    completions: int
    enter_calls: int
    in_flight: int
    iterations: int


def _oserror(err: int) -> OSError:
    """The OSError subclass Python raises for `err` (ConnectionResetError...)."""
    return OSError(err, os.strerror(err))


class _ReadyHandle(asyncio.Handle):
    """A Handle whose fields `call_soon` fills in itself (debug off).

    `asyncio.Handle.__init__` costs a Python frame and asks the loop
    `get_debug()` on every call; `call_soon` is the loop's hottest function, so
    it makes the object with `object.__new__` and sets the same fields. The
    result is an ordinary Handle in every respect.
    """

    __slots__ = ()


def _sighandler_noop(signum: int, frame: object) -> None:
    """Python wants a handler; the wakeup fd does the real work."""


class UringLoopCore(TaskQueueLoop):
    """Iteration, task queues, wake-ups, signals and shutdown. See module docs."""

    if TYPE_CHECKING:  # BaseEventLoop internals this loop builds on (untyped there)
        _debug: bool
        _closed: bool
        _stopping: bool
        _scheduled: list[Any]
        _timer_cancelled_count: int
        _clock_resolution: float
        _current_handle: Any

        def _check_closed(self) -> None: ...
        def _check_thread(self) -> None: ...
        def _check_callback(self, callback: object, method: str) -> None: ...
        async def _ensure_resolved(
            self, address: Any, *, family: int, type: int, proto: int, loop: Any
        ) -> list[Any]: ...

    def __init__(
        self,
        *,
        ring_entries: int = 256,
        slice_s: float = 0.002,
        default_shares: int = 1000,
        eager_send: bool = True,
        single_issuer: bool = True,
    ) -> None:
        super().__init__()
        self._ring = Ring(ring_entries, single_issuer=single_issuer)
        missing = missing_for_loop(self._ring.features)
        if missing:
            self._ring.close()
            raise IoUringUnavailable(f"the kernel's io_uring lacks {', '.join(missing)}")
        self._eager_send = eager_send
        self._sched = Scheduler(default_shares)
        self._default_q = self._sched.default
        self._ready = self._default_q.ready
        self._slice_s = slice_s
        self._bufs = BufferPool()
        self._recv_free: dict[int, list[Any]] = {}
        self._foreign: deque[Any] = deque()
        self._closing = False
        self._iterations = 0
        self._signal_handlers: dict[int, Any] = {}
        self._sig_rsock: socket.socket | None = None
        self._sig_wsock: socket.socket | None = None
        self._efd = os.eventfd(0, os.EFD_CLOEXEC)
        self._efd_buf = bytearray(8)
        self._efd_addr, self._efd_pin = writable_address(self._efd_buf)
        self._arm_wakeup()

    # -- statistics ------------------------------------------------------------

    def stats(self) -> LoopStats:
        """Ring counters: SQEs submitted, completions reaped, io_uring_enter calls."""
        ring = self._ring
        return LoopStats(
            ring.sqes_prepared,
            ring.completions,
            ring.enter_calls,
            ring.in_flight,
            self._iterations,
        )

    # -- scheduling callbacks --------------------------------------------------

    def call_soon(
        self,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        if self._closed:
            raise RuntimeError("Event loop is closed")
        if self._debug:
            self._check_thread()
            self._check_callback(callback, "call_soon")
            handle: asyncio.Handle = _Handle(callback, args, self, context)
            context = handle._context  # type: ignore[attr-defined]
        else:
            # _ReadyHandle(...) without the __init__ frame: the hottest path.
            if context is None:
                context = contextvars.copy_context()
            fast: Any = _new_object(_ReadyHandle)
            fast._context = context
            fast._loop = self
            fast._callback = callback
            fast._args = args
            fast._cancelled = False
            fast._repr = None
            fast._source_traceback = None
            handle = fast
        # _route, inlined.
        queue = context.get(CURRENT_QUEUE)
        if queue is None or queue.owner is not self._sched:
            queue = self._default_q
        queue.ready.append(handle)
        if not queue.active:
            self._sched.activate(queue, _perf())
        return handle

    def _call_soon(
        self, callback: Callable[..., object], args: Any, context: contextvars.Context | None
    ) -> asyncio.Handle:
        handle = _Handle(callback, args, self, context)
        self._route(handle)
        return handle

    def _add_callback(self, handle: Any) -> None:
        if not handle._cancelled:
            self._route(handle)

    def _route(self, handle: Any) -> None:
        queue = self._sched.queue_of(handle._context)
        queue.ready.append(handle)
        if not queue.active:
            self._sched.activate(queue, _perf())

    def call_soon_threadsafe(
        self,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        self._check_closed()
        if self._debug:
            self._check_callback(callback, "call_soon_threadsafe")
        handle = _Handle(callback, args, self, context)
        self._foreign.append(handle)  # deque.append is atomic
        self._write_to_self()
        return handle

    def _write_to_self(self) -> None:
        efd = self._efd
        if efd >= 0:
            # An error means closed concurrently, or a saturated counter: awake anyway.
            with contextlib.suppress(OSError):
                os.eventfd_write(efd, 1)

    def _arm_wakeup(self) -> None:
        self._ring.prep_read(self._efd, self._efd_addr, 8, -1, (self._fin_wakeup,), self._efd_pin)

    def _fin_wakeup(self, token: tuple[Any, ...], res: int) -> None:
        if not self._closing and self._efd >= 0:
            self._arm_wakeup()

    # -- one iteration ---------------------------------------------------------

    def _run_once(self) -> None:
        self._iterations += 1
        sched = self._sched
        # After the sweep: it may replace the heap, and a timer popped from the
        # old one would stay in the new one and run again (a sleep's future set
        # twice: InvalidStateError).
        scheduled = self._drop_cancelled_timers(self._scheduled)
        if sched.heap or self._stopping or self._foreign:
            timeout: float | None = 0
        elif scheduled:
            timeout = min(max(0.0, scheduled[0]._when - self.time()), _MAXIMUM_SELECT_TIMEOUT)
        else:
            timeout = None

        for token, res, _flags in self._ring.wait(timeout):
            try:
                token[0](token, res)
            except Exception as exc:
                self.call_exception_handler(
                    {"message": "io_uring completion handler failed", "exception": exc}
                )

        foreign = self._foreign
        while foreign:
            handle = foreign.popleft()
            if not handle._cancelled:
                self._route(handle)

        if scheduled:
            end_time = self.time() + self._clock_resolution
            while scheduled and scheduled[0]._when < end_time:
                handle = heapq.heappop(scheduled)
                handle._scheduled = False
                self._route(handle)

        if sched.heap:
            self._run_slice()

    def _drop_cancelled_timers(self, scheduled: list[Any]) -> list[Any]:
        """Drop cancelled timers (all of them when they are most of the heap, else
        those at its head); return the heap to use from now on."""
        if not scheduled:
            return scheduled
        count = self._timer_cancelled_count
        if (
            len(scheduled) > _MIN_SCHEDULED_TIMER_HANDLES
            and count / len(scheduled) > _MIN_CANCELLED_TIMER_HANDLES_FRACTION
        ):
            new = []
            for handle in scheduled:
                if handle._cancelled:
                    handle._scheduled = False
                else:
                    new.append(handle)
            heapq.heapify(new)
            self._scheduled = new
            self._timer_cancelled_count = 0
            return new
        while scheduled and scheduled[0]._cancelled:
            self._timer_cancelled_count -= 1
            handle = heapq.heappop(scheduled)
            handle._scheduled = False
        return scheduled

    def _run_slice(self) -> None:
        """Run the callbacks that were ready in the queue with the least vruntime.

        Alone, a queue runs all of them (as the stock loop would) and is charged
        wall time. Contended, it runs until its slice is used up and is charged
        its thread's CPU time, so that a neighbour process stealing the core
        mid-slice does not distort the shares.
        """
        sched = self._sched
        contended = len(sched.heap) > 1
        start = _perf()
        queue = sched.pick(start)
        ready = queue.ready
        ntodo = len(ready)
        ran = 0
        handle: Any = None
        if self._debug:
            ran = self._run_debug(ready, ntodo)
            elapsed = _perf() - start
        elif contended:
            cpu_start = _thread_time()
            deadline = start + self._slice_s
            while ran < ntodo:
                handle = ready.popleft()
                ran += 1
                if not handle._cancelled:
                    handle._run()
                    if _perf() >= deadline:
                        break
            elapsed = _thread_time() - cpu_start
        else:
            # Handle._run, inlined: one Python frame less per callback.
            popleft = ready.popleft
            for _ in range(ntodo):
                handle = popleft()
                if not handle._cancelled:
                    try:
                        handle._context.run(handle._callback, *handle._args)
                    except (SystemExit, KeyboardInterrupt):
                        raise
                    except BaseException as exc:
                        self._callback_failed(handle, exc)
            ran = ntodo
            elapsed = _perf() - start
        handle = None
        sched.charge(queue, elapsed, ran)

    def _callback_failed(self, handle: Any, exc: BaseException) -> None:
        """Report a failed callback exactly as `asyncio.Handle._run` does."""
        source = format_helpers._format_callback_source(handle._callback, handle._args)
        context = {"message": f"Exception in callback {source}", "exception": exc, "handle": handle}
        if handle._source_traceback:
            context["source_traceback"] = handle._source_traceback
        self.call_exception_handler(context)

    def _run_debug(self, ready: deque[Any], ntodo: int) -> int:
        for _ in range(ntodo):
            handle = ready.popleft()
            if handle._cancelled:
                continue
            try:
                self._current_handle = handle
                t0 = self.time()
                handle._run()
                dt = self.time() - t0
                if dt >= self.slow_callback_duration:
                    logger.warning("Executing %r took %.3f seconds", handle, dt)
            finally:
                self._current_handle = None
        return ntodo

    def _process_events(self, event_list: Any) -> None:
        """Unused: completions are processed in `_run_once`."""

    # -- operations ------------------------------------------------------------

    def _fin_result(self, token: tuple[Any, ...], res: int) -> None:
        """Finisher for operations whose result is the CQE's res (or -errno)."""
        fut = token[1]
        if fut.done():
            return
        if res >= 0:
            fut.set_result(res)
        else:
            fut.set_exception(_oserror(-res))

    def _fin_fd(self, token: tuple[Any, ...], res: int) -> None:
        """Finisher for operations that create a descriptor (accept, open)."""
        fut = token[1]
        if fut.done():
            if res >= 0:
                os.close(res)  # nobody wants it any more; do not leak it
            return
        if res >= 0:
            fut.set_result(res)
        else:
            fut.set_exception(_oserror(-res))

    async def _await_op(self, fut: asyncio.Future[_T], user_data: int) -> _T:
        """Await an operation's future; cancel the operation if we are cancelled."""
        try:
            return await fut
        except asyncio.CancelledError:
            self._cancel_op(user_data)
            raise

    def _cancel_op(self, user_data: int) -> None:
        ring = self._ring
        if not ring.closed and ring.is_pending(user_data):
            ring.cancel(user_data)

    async def _simple_op(self, prep: Callable[[tuple[Any, ...]], int]) -> int:
        fut: asyncio.Future[int] = _Future(loop=self)
        ud = prep((self._fin_result, fut))
        return await self._await_op(fut, ud)

    # -- signals (Unix, main thread) -------------------------------------------

    def add_signal_handler(
        self, sig: int, callback: Callable[[Unpack[_Ts]], object], *args: *_Ts
    ) -> None:
        """Run `callback(*args)` in the loop when signal `sig` arrives."""
        if asyncio.iscoroutine(callback) or asyncio.iscoroutinefunction(callback):
            raise TypeError("coroutines cannot be used with add_signal_handler()")
        self._check_signal(sig)
        self._check_closed()
        self._ensure_signal_socket()
        assert self._sig_wsock is not None
        try:
            # Raises ValueError off the main thread: a loop in another thread
            # cannot install handlers, as with the stock loop.
            signal.set_wakeup_fd(self._sig_wsock.fileno())
        except (ValueError, OSError) as exc:
            raise RuntimeError(str(exc)) from exc
        self._signal_handlers[sig] = _Handle(callback, args, self, None)
        try:
            signal.signal(sig, _sighandler_noop)
            signal.siginterrupt(sig, False)
        except OSError as exc:
            del self._signal_handlers[sig]
            if not self._signal_handlers:
                try:
                    signal.set_wakeup_fd(-1)
                except (ValueError, OSError) as nexc:
                    logger.info("set_wakeup_fd(-1) failed: %s", nexc)
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f"sig {sig:d} cannot be caught") from exc
            raise

    def remove_signal_handler(self, sig: int) -> bool:
        """Remove the handler for `sig`; True if there was one."""
        self._check_signal(sig)
        try:
            del self._signal_handlers[sig]
        except KeyError:
            return False
        handler = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
        try:
            signal.signal(sig, handler)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f"sig {sig:d} cannot be caught") from exc
            raise
        if not self._signal_handlers:
            try:
                signal.set_wakeup_fd(-1)
            except (ValueError, OSError) as exc:
                logger.info("set_wakeup_fd(-1) failed: %s", exc)
        return True

    def _check_signal(self, sig: int) -> None:
        if not isinstance(sig, int):
            raise TypeError(f"sig must be an int, not {sig!r}")
        if sig not in signal.valid_signals():
            raise ValueError(f"invalid signal number {sig}")

    def _ensure_signal_socket(self) -> None:
        if self._sig_rsock is None:
            rsock, wsock = socket.socketpair()
            rsock.setblocking(False)
            wsock.setblocking(False)
            self._sig_rsock, self._sig_wsock = rsock, wsock
            self._sig_buf = bytearray(256)
            self._sig_addr, self._sig_pin = writable_address(self._sig_buf)
            self._arm_signals()

    def _arm_signals(self) -> None:
        assert self._sig_rsock is not None
        self._ring.prep_recv(
            self._sig_rsock.fileno(),
            self._sig_addr,
            len(self._sig_buf),
            0,
            (self._fin_signals,),
            self._sig_pin,
        )

    def _fin_signals(self, token: tuple[Any, ...], res: int) -> None:
        if res > 0:
            for signum in self._sig_buf[:res]:
                handle = self._signal_handlers.get(signum)
                if handle is None:
                    continue
                if handle._cancelled:
                    self.remove_signal_handler(signum)
                else:
                    self._route(handle)
        if not self._closing and self._sig_rsock is not None and res >= 0:
            self._arm_signals()

    # -- shutdown --------------------------------------------------------------

    def close(self) -> None:
        """Cancel in-flight operations, wait for their completions, release all."""
        if self.is_running():
            raise RuntimeError("Cannot close a running event loop")
        if self._closed:
            return
        self._closing = True
        for sig in list(self._signal_handlers):
            with contextlib.suppress(ValueError, RuntimeError, OSError):
                self.remove_signal_handler(sig)
        ring = self._ring
        for token in ring.tokens():
            if len(token) > 1 and isinstance(token[1], _Future) and not token[1].done():
                token[1].cancel()
        try:
            drained = ring.drain()
        except RuntimeError as exc:  # closed from a thread that may not submit
            logger.info("closing without draining the ring: %s", exc)
            drained = []
        for token, res, _flags in drained:
            try:
                token[0](token, res)
            except Exception:
                logger.exception("io_uring completion handler failed during close")
        ring.close()
        super().close()
        for queue in self._sched.queues.values():
            queue.ready.clear()
        self._sched.heap.clear()
        self._foreign.clear()
        efd, self._efd = self._efd, -1
        os.close(efd)
        if self._sig_rsock is not None and self._sig_wsock is not None:
            self._sig_rsock.close()
            self._sig_wsock.close()
            self._sig_rsock = self._sig_wsock = None
