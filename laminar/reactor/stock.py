"""The stock asyncio loop, with the task-queue API so shard code runs on both.

On the fallback loop queues are labels: `create_task(coro, queue=q)` works and
children inherit `q`, but there is no share scheduling and no accounting.
"""

from __future__ import annotations

import asyncio

from .queues import Scheduler, TaskQueueLoop


class StockEventLoop(TaskQueueLoop, asyncio.SelectorEventLoop):
    """`asyncio.SelectorEventLoop` plus `create_task_queue` and `create_task(queue=)`
    (queues are labels here: shares are recorded but not enforced)."""

    def __init__(self) -> None:
        super().__init__()
        self._sched = Scheduler()
