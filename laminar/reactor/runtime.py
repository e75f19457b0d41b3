"""Choosing the event loop: runtime="auto" | "uring" | "asyncio".

"uring" insists on io_uring and raises `IoUringUnavailable` (naming the cause)
when it cannot have it; "asyncio" is the stock selector loop; "auto" tries
io_uring once per process and falls back to the stock loop, logging why.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

from laminar.iouring import IoUringUnavailable, check_available

from .loop import UringEventLoop
from .stock import StockEventLoop

logger = logging.getLogger("laminar.reactor")

Runtime = Literal["auto", "uring", "asyncio"]
RUNTIMES: tuple[str, ...] = ("auto", "uring", "asyncio")
_T = TypeVar("_T")
_unavailable: list[str | None] = []


def uring_unavailable_reason() -> str | None:
    """None if io_uring works in this process, else why not (checked once)."""
    if not _unavailable:
        _unavailable.append(check_available())
    return _unavailable[0]


def resolve_runtime(runtime: str) -> Literal["uring", "asyncio"]:
    """The runtime `runtime` stands for here ("auto" resolved, with a logged reason)."""
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)}; got {runtime!r}")
    if runtime == "asyncio":
        return "asyncio"
    reason = uring_unavailable_reason()
    if reason is None:
        return "uring"
    if runtime == "uring":
        raise IoUringUnavailable(reason)
    logger.warning("io_uring unavailable (%s); using the stock asyncio event loop", reason)
    return "asyncio"


def loop_factory(runtime: str = "auto") -> Callable[[], asyncio.AbstractEventLoop]:
    """A zero-argument loop constructor, e.g. for `asyncio.Runner(loop_factory=...)`."""
    if resolve_runtime(runtime) == "uring":
        return UringEventLoop
    return StockEventLoop


def run(main: Coroutine[Any, Any, _T], *, runtime: str = "auto", debug: bool | None = None) -> _T:
    """`asyncio.run(main)` on the loop `runtime` picks."""
    with asyncio.Runner(loop_factory=loop_factory(runtime), debug=debug) as runner:
        return runner.run(main)
