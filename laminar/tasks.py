"""Waiting for a task this code stopped, without losing its own cancellation.

`with contextlib.suppress(asyncio.CancelledError): await task` after
`task.cancel()` is the usual way to let a stopped task finish, and it has a
trap: if the waiting task is itself cancelled meanwhile (Ctrl-C cancels
`asyncio.run`'s main task; a caller's timeout), the same exception type
arrives and is swallowed, and the waiting task goes on as if nothing had
asked it to stop. `settle` tells the two apart with `Task.cancelling()`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


async def settle(awaitable: Awaitable[Any]) -> None:
    """Wait until `awaitable` (a task this code cancelled, or a future it
    dropped) is done, however it ended by cancellation; re-raise only a
    cancellation of the waiting task itself. Other exceptions propagate."""
    try:
        await awaitable
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
