"""The stock asyncio behaviour shard code relies on, on both loops."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from .conftest import Runner


def test_call_soon_runs_in_order_and_call_later_after(run: Runner) -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        seen: list[str] = []
        done = loop.create_future()
        loop.call_later(0.02, lambda: done.set_result(None))
        loop.call_later(0.01, seen.append, "later")
        for name in "abc":
            loop.call_soon(seen.append, name)
        handle = loop.call_soon(seen.append, "cancelled")
        handle.cancel()
        await done
        return seen

    assert run(main()) == ["a", "b", "c", "later"]


def test_sleep_wait_for_and_timeouts(run: Runner) -> None:
    async def main() -> None:
        start = time.monotonic()
        await asyncio.sleep(0.02)
        assert time.monotonic() - start >= 0.015
        assert await asyncio.wait_for(asyncio.sleep(0, "x"), 1) == "x"
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.sleep(10), 0.01)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01) as scope:
                await asyncio.sleep(10)
        assert scope.expired()

    run(main())


def test_tasks_gather_cancel_and_exceptions(run: Runner) -> None:
    async def fail() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    async def main() -> None:
        results = await asyncio.gather(*(asyncio.sleep(0.001, i) for i in range(10)))
        assert results == list(range(10))
        with pytest.raises(ValueError, match="boom"):
            await asyncio.create_task(fail())
        task = asyncio.create_task(asyncio.sleep(10))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(asyncio.sleep(0, i)) for i in range(3)]
        assert [t.result() for t in tasks] == [0, 1, 2]

    run(main())


def test_queues_events_locks_semaphores(run: Runner) -> None:
    async def main() -> None:
        queue: asyncio.Queue[int] = asyncio.Queue(maxsize=2)
        got: list[int] = []

        async def consumer() -> None:
            while (item := await queue.get()) >= 0:
                got.append(item)

        task = asyncio.create_task(consumer())
        for i in range(20):
            await queue.put(i)
        await queue.put(-1)
        await task
        assert got == list(range(20))

        event = asyncio.Event()
        asyncio.get_running_loop().call_later(0.005, event.set)
        await asyncio.wait_for(event.wait(), 1)

        lock = asyncio.Lock()
        sem = asyncio.Semaphore(2)
        active = []

        async def worker() -> None:
            async with sem:
                active.append(1)
                assert len(active) <= 2
                await asyncio.sleep(0.001)
                active.pop()
            async with lock:
                await asyncio.sleep(0)

        await asyncio.gather(*(worker() for _ in range(6)))

    run(main())


def test_contextvars_flow_into_tasks_and_callbacks(run: Runner) -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    async def child() -> str:
        await asyncio.sleep(0)
        return var.get()

    async def main() -> None:
        var.set("parent")
        assert await asyncio.create_task(child()) == "parent"
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        ctx = contextvars.copy_context()
        ctx.run(var.set, "other")
        loop.call_soon(lambda: fut.set_result(var.get()), context=ctx)
        assert await fut == "other"

    run(main())


def test_call_soon_threadsafe_and_executor(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        threading.Timer(0.01, loop.call_soon_threadsafe, (fut.set_result, "woken")).start()
        assert await asyncio.wait_for(fut, 5) == "woken"
        assert await loop.run_in_executor(None, sum, [1, 2, 3]) == 6
        # An executor job that blocks briefly while the loop sleeps in the kernel:
        # the loop must release the GIL for the thread to finish and wake it.
        assert await loop.run_in_executor(None, lambda: time.sleep(0.02) or "slept") == "slept"
        await loop.shutdown_default_executor()

    run(main())


def test_shutdown_asyncgens_finalizes_generators(run: Runner) -> None:
    finalized: list[bool] = []

    async def gen() -> AsyncIterator[int]:
        try:
            yield 1
            yield 2
        finally:
            finalized.append(True)

    async def main() -> None:
        agen = gen()
        assert await agen.__anext__() == 1
        # Left suspended: Runner.close() -> loop.shutdown_asyncgens() closes it.
        globals()["_keep"] = agen

    run(main())
    globals().pop("_keep")
    assert finalized == [True]


def test_exception_handler_sees_callback_errors(run: Runner) -> None:
    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        seen: list[Any] = []
        loop.set_exception_handler(lambda _loop, ctx: seen.append(ctx.get("exception")))

        def broken() -> None:
            raise RuntimeError("in callback")

        loop.call_soon(broken)
        await asyncio.sleep(0.001)
        return seen

    seen = run(main())
    assert len(seen) == 1 and isinstance(seen[0], RuntimeError)


def test_run_until_complete_stop_and_close(loop_kind: str) -> None:
    from .conftest import LOOPS

    loop = LOOPS[loop_kind]()
    try:
        assert loop.run_until_complete(asyncio.sleep(0, 5)) == 5
        loop.call_later(0.01, loop.stop)
        loop.run_forever()
        assert not loop.is_running()
    finally:
        loop.close()
    assert loop.is_closed()
    with pytest.raises(RuntimeError):
        loop.call_soon(print)
    loop.close()  # idempotent


def test_debug_mode_runs(run: Runner) -> None:
    async def main() -> int:
        asyncio.get_running_loop().set_debug(True)
        await asyncio.sleep(0.001)
        return await asyncio.create_task(asyncio.sleep(0, 3))

    assert run(main()) == 3


def test_each_timer_runs_once_when_cancelled_timers_are_swept(run: Runner) -> None:
    """Many cancelled timers make the loop rebuild its timer heap; timers due in
    that same iteration must still run exactly once. (The io_uring loop once
    popped them from the old heap while the new one kept them, so they ran
    again in the next iteration: a sleep's future set twice, logged as
    InvalidStateError in `_set_result_unless_cancelled`, seen in a leader's log
    during partition moves.)"""

    async def main() -> tuple[list[int], list[Any]]:
        loop: Any = asyncio.get_running_loop()
        errors: list[Any] = []
        loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx.get("exception")))
        ran: list[int] = []
        # Sleepers in a queue of their own: run in a later slice than the timers
        # of the default queue, a second run finds their future already done.
        moves = loop.create_task_queue("moves")
        sleepers = [loop.create_task(asyncio.sleep(0.001), queue=moves) for _ in range(40)]
        swept = loop.create_future()

        def schedule() -> None:
            for i in range(50):
                loop.call_at(loop.time(), ran.append, i)
            time.sleep(0.002)  # the sleepers are due too
            # 150 cancelled timers of 240: the next iteration sweeps them (over
            # half of more than 100) and runs the due ones.
            for handle in [loop.call_later(60, ran.append, -1) for _ in range(150)]:
                handle.cancel()
            loop.call_soon(swept.set_result, None)

        loop.call_soon(schedule)
        await swept
        await asyncio.gather(*sleepers)
        await asyncio.sleep(0.05)  # anything run twice has run by now
        return ran, errors

    ran, errors = run(main())
    assert errors == []
    assert sorted(ran) == list(range(50))
