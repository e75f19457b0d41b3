"""The stock asyncio loop, with the task-queue API so shard code runs on both.

On the fallback loop queues are labels: `create_task(coro, queue=q)` works and
children inherit `q`, but there is no share scheduling and no accounting.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

from .queues import Scheduler, TaskQueue, context_with_queue

_T = TypeVar("_T")


class StockEventLoop(asyncio.SelectorEventLoop):
    """`asyncio.SelectorEventLoop` plus `create_task_queue` and `create_task(queue=)`."""

    def __init__(self) -> None:
        super().__init__()
        self._sched = Scheduler()

    def create_task_queue(self, name: str, shares: int = 1000) -> TaskQueue:
        """A queue label (shares are recorded but not enforced on this loop)."""
        return self._sched.create(name, shares)

    @property
    def default_task_queue(self) -> TaskQueue:
        return self._sched.default

    def task_queues(self) -> list[TaskQueue]:
        return list(self._sched.queues.values())

    def create_task(  # type: ignore[override]
        self,
        coro: Coroutine[Any, Any, _T] | Generator[Any, None, _T],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
        queue: TaskQueue | None = None,
    ) -> asyncio.Task[_T]:
        if queue is not None:
            context = context_with_queue(queue, context)
        return super().create_task(coro, name=name, context=context)
