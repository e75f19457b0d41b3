"""laminar's event loop: asyncio on io_uring, with CPU-share task queues.

from laminar.reactor import run, loop_factory, UringEventLoop
run(main(), runtime="auto")            # io_uring if available, else stock asyncio
asyncio.Runner(loop_factory=UringEventLoop)

loop = asyncio.get_running_loop()
requests = loop.create_task_queue("requests", shares=1000)
loop.create_task(handle(conn), queue=requests)   # children inherit the queue
requests.stats()                                  # runtime, runs, queue delay
"""

from .core import LoopStats
from .loop import UringEventLoop
from .queues import QueueStats, TaskQueue, current_queue
from .runtime import RUNTIMES, loop_factory, resolve_runtime, run, uring_unavailable_reason
from .stock import StockEventLoop

__all__ = [
    "RUNTIMES",
    "LoopStats",
    "QueueStats",
    "StockEventLoop",
    "TaskQueue",
    "UringEventLoop",
    "current_queue",
    "loop_factory",
    "resolve_runtime",
    "run",
    "uring_unavailable_reason",
]
