"""One simulated computer for crash tests: a `SimulatedDisk` and the event loop
of the process currently running on it.

A kill or power cut ends the process: its tasks are cancelled (every handle it
held is dead, so none can touch the disk again) and a new loop starts.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine
from typing import Any, TypeVar

from laminar.log import SimulatedDisk

T = TypeVar("T")


def _ignore(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A dead process's loop: what its abandoned tasks report is nobody's concern."""


class Machine:
    """A disk and the current process (see the module docstring)."""

    def __init__(self, disk: SimulatedDisk | None = None) -> None:
        self.disk = disk or SimulatedDisk(yield_every_op=True)
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def run_until_frozen(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run `coro` until it finishes or the disk freezes under it (then every
        other task gets its chance to reach the dead disk too)."""
        task = self.loop.create_task(coro)

        async def watch() -> None:
            while not task.done():
                if self.disk.frozen:
                    for _ in range(100):
                        await asyncio.sleep(0)
                    return
                await asyncio.sleep(0)

        self.run(watch())
        return task

    def power_cut(self, seed: int, loss: float = 0.65) -> None:
        self.disk.power_cut(random.Random(seed), loss)
        self._new_process()

    def kill(self) -> None:
        self.disk.kill()
        self._new_process()

    def _new_process(self) -> None:
        old = self.loop
        old.set_exception_handler(_ignore)
        leftovers = asyncio.all_tasks(old)
        for task in leftovers:
            task.cancel()
        if leftovers:
            old.run_until_complete(asyncio.wait(leftovers))
        old.close()
        self.loop = asyncio.new_event_loop()

    def close(self) -> None:
        self.loop.close()
