"""Reactor tests run the same code on UringEventLoop and on the stock loop."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from laminar.iouring import check_available
from laminar.reactor import StockEventLoop, UringEventLoop

URING_REASON = check_available()
needs_uring = pytest.mark.skipif(
    URING_REASON is not None, reason=f"io_uring unavailable: {URING_REASON}"
)

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "uring": UringEventLoop,
    # Every send through the ring too (no eager send): the pure completion path.
    "uring-ring-send": lambda: UringEventLoop(eager_send=False),
    "asyncio": StockEventLoop,
}

Runner = Callable[[Coroutine[Any, Any, Any]], Any]


@pytest.fixture(params=list(LOOPS))
def loop_kind(request: pytest.FixtureRequest) -> str:
    if request.param.startswith("uring") and URING_REASON is not None:
        pytest.skip(f"io_uring unavailable: {URING_REASON}")
    return str(request.param)


@pytest.fixture
def run(loop_kind: str) -> Iterator[Runner]:
    """Run a coroutine to completion on a fresh loop of the parametrized kind."""

    def runner(coro: Coroutine[Any, Any, Any]) -> Any:
        with asyncio.Runner(loop_factory=LOOPS[loop_kind]) as r:
            return r.run(coro)

    yield runner


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))
