"""Load models: closed loop (an in-flight window) and open loop (a fixed rate).

Closed loop: `window` senders each send, wait for the answer, and send again.
It measures the most a client with that much concurrency gets through; its
latencies are service times, and a stall simply sends less (the stall hides in
the throughput, which is what closed-loop numbers mean).

Open loop: operation k is due at `schedule.intended_ns(k)`, whatever happened
before. Its latency is measured from that intended time, not from when it
actually left: when the target stalls, the operations that should have been
sent during the stall are late, and their lateness is counted (the
coordinated-omission correction; Gil Tene's term, and the method of wrk2).
`window` bounds how many operations may be in flight so that a stuck target
cannot make the generator hold unbounded work; a send waiting for a free slot
is charged that wait, like any other lateness. The service time (from the
actual send) is reported too, so the two can be compared.

Both models call `send(k)` for the k-th operation and report each outcome to
`on_done`; the caller decides what an operation is (a produce of a batch),
when to stop (`keep_going(k, at_ns)` is asked once before each operation is
issued, with its intended time; False ends issuing) and which outcomes are
measured (the warm-up is not). Cancelling a model cancels its operations in
flight; their outcomes are never reported, so the caller counts them as
unfinished.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from laminar.bench.pacing import Clock, Pacer, Schedule

Send = Callable[[int], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Outcome:
    """One finished operation. `intended_ns` equals `sent_ns` in a closed loop."""

    k: int
    intended_ns: int
    sent_ns: int
    done_ns: int
    error: BaseException | None


OnDone = Callable[[Outcome], None]
KeepGoing = Callable[[int, int], bool]


async def _run_one(
    send: Send,
    k: int,
    intended_ns: int,
    clock: Clock,
    on_done: OnDone,
    release: Callable[[], None],
) -> None:
    sent_ns = clock.now_ns()
    error: BaseException | None = None
    try:
        await send(k)
    except asyncio.CancelledError:
        release()
        raise
    except Exception as exc:  # every failure is an outcome, reported, not fatal
        error = exc
    done_ns = clock.now_ns()
    release()
    on_done(Outcome(k, intended_ns, sent_ns, done_ns, error))


async def closed_loop(
    send: Send,
    window: int,
    keep_going: KeepGoing,
    clock: Clock,
    on_done: OnDone,
) -> int:
    """Run `window` send-wait loops until `keep_going` says stop; the number issued."""
    if window < 1:
        raise ValueError(f"the window must be at least 1, got {window}")
    issued = 0

    async def sender() -> None:
        nonlocal issued
        while True:
            now = clock.now_ns()
            if not keep_going(issued, now):
                return
            k = issued
            issued += 1
            await _run_one(send, k, now, clock, on_done, _nothing)

    await asyncio.gather(*(sender() for _ in range(window)))
    return issued


def _nothing() -> None:
    pass


async def open_loop(
    send: Send,
    schedule: Schedule,
    window: int,
    keep_going: KeepGoing,
    clock: Clock,
    pacer: Pacer,
    on_done: OnDone,
) -> int:
    """Issue operation k at `schedule.intended_ns(k)` (or as soon after as the
    window allows) until `keep_going` says stop; wait for all; the number issued."""
    if window < 1:
        raise ValueError(f"the window must be at least 1, got {window}")
    slots = asyncio.Semaphore(window)
    running: set[asyncio.Task[None]] = set()
    k = 0
    try:
        while True:
            intended = schedule.intended_ns(k)
            if not keep_going(k, intended):
                break
            if clock.now_ns() < intended:
                await pacer.sleep_until(intended)
            await slots.acquire()
            task = asyncio.ensure_future(_run_one(send, k, intended, clock, on_done, slots.release))
            running.add(task)
            task.add_done_callback(running.discard)
            k += 1
        if running:
            await asyncio.gather(*running)
    finally:
        for task in running:
            task.cancel()
    return k
