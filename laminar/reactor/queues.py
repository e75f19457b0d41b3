"""Task queues with CPU shares, scheduled by virtual runtime (as in glommio).

Rules, and why:

- Every ready callback belongs to one `TaskQueue`. A task's queue travels in a
  context variable, so the task's callbacks (its steps, the wake-ups of futures
  it awaits) land in its queue, and the tasks it creates inherit the queue
  unless they are given another one. Callbacks made outside any queue go to the
  loop's default queue.
- When several queues have ready callbacks, the scheduler runs the one with the
  smallest virtual runtime for a slice, then charges it `elapsed / shares`.
  Over time each busy queue receives CPU time in proportion to its shares.
  Time is measured around the callbacks themselves: the thread's CPU time when
  queues contend (robust to neighbours on a shared core), wall time otherwise
  (cheaper, and nobody competes).
- An idle queue does not bank credit: when it becomes runnable again its
  virtual runtime is raised to at least the smallest one among the runnable
  queues (or the scheduler's virtual clock if none is runnable). Otherwise a
  queue that slept for a minute would then monopolise the loop for a minute.
- Runnable queues sit on a min-heap keyed by virtual runtime. The queue being
  run is off the heap; it goes back on if it still has work.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
from collections import deque
from collections.abc import Coroutine, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

_T = TypeVar("_T")

CURRENT_QUEUE: contextvars.ContextVar[TaskQueue | None] = contextvars.ContextVar(
    "laminar_task_queue", default=None
)

SHARES_MIN = 1
SHARES_MAX = 10_000


@dataclass(frozen=True, slots=True)
class QueueStats:
    """A snapshot of one queue's accounting. Times are in seconds."""

    name: str
    shares: int
    runtime_s: float
    """Time spent running this queue's callbacks."""
    runs: int
    """Callbacks run (task steps, future wake-ups, timers)."""
    slices: int
    """Times the scheduler picked this queue."""
    activations: int
    """Times the queue went from idle to runnable."""
    queue_delay_s_total: float
    """Sum over activations of the wait from runnable to first run."""
    queue_delay_s_max: float
    vruntime: float

    @property
    def queue_delay_s_mean(self) -> float:
        return self.queue_delay_s_total / self.activations if self.activations else 0.0


class TaskQueue:
    """A named share of the loop's CPU time. Create with `loop.create_task_queue`."""

    __slots__ = (
        "activated_at",
        "activations",
        "active",
        "delay_max",
        "delay_total",
        "name",
        "owner",
        "ready",
        "runs",
        "runtime",
        "shares",
        "slices",
        "vruntime",
    )

    def __init__(self, owner: object, name: str, shares: int) -> None:
        self.owner = owner
        self.name = name
        self.shares = _check_shares(shares)
        self.ready: deque[Any] = deque()
        self.active = False
        self.vruntime = 0.0
        self.activated_at = 0.0
        self.runtime = 0.0
        self.runs = 0
        self.slices = 0
        self.activations = 0
        self.delay_total = 0.0
        self.delay_max = 0.0

    def set_shares(self, shares: int) -> None:
        """Change the queue's shares; takes effect from its next slice."""
        self.shares = _check_shares(shares)

    def stats(self) -> QueueStats:
        return QueueStats(
            self.name,
            self.shares,
            self.runtime,
            self.runs,
            self.slices,
            self.activations,
            self.delay_total,
            self.delay_max,
            self.vruntime,
        )

    def __repr__(self) -> str:
        return f"<TaskQueue {self.name!r} shares={self.shares} ready={len(self.ready)}>"


def _check_shares(shares: int) -> int:
    if not isinstance(shares, int) or not SHARES_MIN <= shares <= SHARES_MAX:
        raise ValueError(f"shares must be an int in [{SHARES_MIN}, {SHARES_MAX}], got {shares!r}")
    return shares


class Scheduler:
    """Owns the queues of one loop and picks which runs next."""

    def __init__(self, default_shares: int = 1000) -> None:
        self.default = TaskQueue(self, "default", default_shares)
        self.queues: dict[str, TaskQueue] = {"default": self.default}
        self.heap: list[tuple[float, int, TaskQueue]] = []
        self._seq = itertools.count()
        self.vclock = 0.0

    def create(self, name: str, shares: int) -> TaskQueue:
        if name in self.queues:
            raise ValueError(f"a task queue named {name!r} already exists")
        queue = TaskQueue(self, name, shares)
        self.queues[name] = queue
        return queue

    def queue_of(self, context: contextvars.Context) -> TaskQueue:
        """The queue a callback made in `context` belongs to."""
        queue = context.get(CURRENT_QUEUE)
        if queue is None or queue.owner is not self:
            return self.default
        return queue

    def activate(self, queue: TaskQueue, now: float) -> None:
        """Make an idle queue runnable, without credit for the time it slept."""
        floor = self.heap[0][0] if self.heap else self.vclock
        if queue.vruntime < floor:
            queue.vruntime = floor
        queue.active = True
        queue.activated_at = now
        queue.activations += 1
        heapq.heappush(self.heap, (queue.vruntime, next(self._seq), queue))

    def pick(self, now: float) -> TaskQueue:
        """Take the runnable queue with the smallest virtual runtime off the heap."""
        queue = heapq.heappop(self.heap)[2]
        if queue.activated_at:
            delay = now - queue.activated_at
            queue.delay_total += delay
            if delay > queue.delay_max:
                queue.delay_max = delay
            queue.activated_at = 0.0
        queue.slices += 1
        return queue

    def charge(self, queue: TaskQueue, elapsed: float, runs: int) -> None:
        """Account a slice and put the queue back on the heap if it has work."""
        queue.runtime += elapsed
        queue.runs += runs
        queue.vruntime += elapsed * 1000.0 / queue.shares
        if queue.ready:
            heapq.heappush(self.heap, (queue.vruntime, next(self._seq), queue))
            self.vclock = max(self.vclock, self.heap[0][0])
        else:
            queue.active = False
            floor = self.heap[0][0] if self.heap else queue.vruntime
            self.vclock = max(self.vclock, floor)


def current_queue() -> TaskQueue | None:
    """The task queue of the running code, if it runs in one."""
    return CURRENT_QUEUE.get()


def context_with_queue(
    queue: TaskQueue, context: contextvars.Context | None
) -> contextvars.Context:
    """A context (a copy of the current one if None) whose task queue is `queue`."""
    if context is None:
        context = contextvars.copy_context()
    context.run(CURRENT_QUEUE.set, queue)
    return context


class TaskQueueLoop(asyncio.BaseEventLoop):
    """The task-queue API both laminar loops offer (`UringEventLoop` schedules by
    shares; `StockEventLoop` keeps queues as labels). Mixed in before the
    concrete loop class; the loop sets `_sched`."""

    _sched: Scheduler

    def create_task_queue(self, name: str, shares: int = 1000) -> TaskQueue:
        """A new queue that receives CPU time in proportion to `shares` (1..10000)."""
        return self._sched.create(name, shares)

    @property
    def default_task_queue(self) -> TaskQueue:
        return self._sched.default

    def task_queues(self) -> list[TaskQueue]:
        return list(self._sched.queues.values())

    def create_task(
        self,
        coro: Coroutine[Any, Any, _T] | Generator[Any, None, _T],
        *,
        name: object = None,
        context: contextvars.Context | None = None,
        queue: TaskQueue | None = None,
    ) -> asyncio.Task[_T]:
        """Schedule `coro`; in `queue` if given, else in the creator's queue."""
        if queue is not None:
            context = context_with_queue(queue, context)
        return super().create_task(coro, name=name, context=context)
