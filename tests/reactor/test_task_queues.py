"""Task queues: CPU shares, inheritance, no banked credit, statistics."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from laminar.reactor import StockEventLoop, TaskQueue, UringEventLoop, current_queue

from .conftest import needs_uring


def run_uring(coro: Any) -> Any:
    with asyncio.Runner(loop_factory=UringEventLoop) as runner:
        return runner.run(coro)


async def busy(stop: list[bool], cpu: list[float], index: int, chunk_s: float = 0.0002) -> None:
    """Burn CPU in small chunks, yielding between them; record own thread CPU time."""
    while not stop[0]:
        t0 = time.thread_time()
        deadline = time.perf_counter() + chunk_s
        while time.perf_counter() < deadline:
            pass
        cpu[index] += time.thread_time() - t0
        await asyncio.sleep(0)


async def split(shares: list[int], seconds: float) -> tuple[list[float], list[float]]:
    loop: Any = asyncio.get_running_loop()
    queues = [loop.create_task_queue(f"q{i}", shares=s) for i, s in enumerate(shares)]
    stop = [False]
    cpu = [0.0] * len(shares)
    tasks = [loop.create_task(busy(stop, cpu, i), queue=q) for i, q in enumerate(queues)]
    await asyncio.sleep(seconds)
    stop[0] = True
    await asyncio.gather(*tasks)
    return [q.stats().runtime_s for q in queues], cpu


@needs_uring
@pytest.mark.parametrize("shares", [[2000, 1000], [100, 200]])
def test_two_to_one_shares_get_two_to_one_cpu(shares: list[int]) -> None:
    runtime, cpu = run_uring(split(shares, 0.4))
    expected = shares[0] / shares[1]
    # The scheduler's own accounting of time spent in each queue's callbacks.
    assert runtime[0] / runtime[1] == pytest.approx(expected, rel=0.10)
    # Each task's own thread CPU time (what the kernel charged the thread).
    assert cpu[0] / cpu[1] == pytest.approx(expected, rel=0.10)


@needs_uring
def test_children_inherit_their_queue_unless_told_otherwise() -> None:
    async def main() -> None:
        loop: Any = asyncio.get_running_loop()
        a = loop.create_task_queue("a", shares=500)
        b = loop.create_task_queue("b", shares=500)

        async def child() -> TaskQueue | None:
            await asyncio.sleep(0)
            return current_queue()

        async def parent() -> tuple[Any, ...]:
            inherited = await asyncio.create_task(child())
            moved = await loop.create_task(child(), queue=b)
            return current_queue(), inherited, moved

        assert await loop.create_task(parent(), queue=a) == (a, a, b)
        assert await asyncio.create_task(child()) is None  # default queue
        assert a.stats().runs > 0 and b.stats().runs > 0

    run_uring(main())


@needs_uring
def test_an_idle_queue_banks_no_credit() -> None:
    """A queue that slept while another ran does not then monopolise the loop."""

    async def main() -> tuple[float, float]:
        loop: Any = asyncio.get_running_loop()
        early = loop.create_task_queue("early", shares=1000)
        late = loop.create_task_queue("late", shares=1000)
        stop = [False]
        cpu = [0.0, 0.0]
        first = loop.create_task(busy(stop, cpu, 0), queue=early)
        await asyncio.sleep(0.2)  # only `early` runs; `late` is idle
        second = loop.create_task(busy(stop, cpu, 1), queue=late)
        base_early = early.stats().runtime_s
        base_late = late.stats().runtime_s
        await asyncio.sleep(0.2)
        stop[0] = True
        await asyncio.gather(first, second)
        return early.stats().runtime_s - base_early, late.stats().runtime_s - base_late

    after_early, after_late = run_uring(main())
    # With banked credit `late` would run alone for ~0.2 s; without, they share.
    assert after_late / (after_early + after_late) == pytest.approx(0.5, abs=0.1)


@needs_uring
def test_queue_statistics_and_validation() -> None:
    async def main() -> None:
        loop: Any = asyncio.get_running_loop()
        queue = loop.create_task_queue("stats", shares=300)
        with pytest.raises(ValueError):
            loop.create_task_queue("stats", shares=300)
        with pytest.raises(ValueError):
            loop.create_task_queue("zero", shares=0)
        with pytest.raises(ValueError):
            queue.set_shares(10**6)
        await loop.create_task(asyncio.sleep(0.001), queue=queue)
        stats = queue.stats()
        assert stats.name == "stats" and stats.shares == 300
        assert stats.runs >= 2 and stats.activations >= 1 and stats.slices >= 1
        assert stats.runtime_s > 0
        assert stats.queue_delay_s_max >= stats.queue_delay_s_mean >= 0
        assert {q.name for q in loop.task_queues()} == {"default", "stats"}
        assert loop.default_task_queue.stats().runs > 0

    run_uring(main())


def test_stock_loop_accepts_the_same_queue_api() -> None:
    async def main() -> TaskQueue | None:
        loop: Any = asyncio.get_running_loop()
        queue = loop.create_task_queue("requests", shares=1000)

        async def where() -> TaskQueue | None:
            return await asyncio.create_task(asyncio.sleep(0, current_queue()))

        return queue if await loop.create_task(where(), queue=queue) is queue else None

    with asyncio.Runner(loop_factory=StockEventLoop) as runner:
        assert runner.run(main()) is not None
