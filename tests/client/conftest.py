"""Fixtures for client unit tests: a fake node, and both event loops."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from laminar.iouring import check_available
from laminar.reactor import StockEventLoop, UringEventLoop

from .fakenode import FakeNode

URING_REASON = check_available()

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "uring": UringEventLoop,
    "asyncio": StockEventLoop,
}

Runner = Callable[[Coroutine[Any, Any, Any]], Any]


@pytest.fixture
def node() -> Iterator[FakeNode]:
    with FakeNode(shards=2) as fake:
        yield fake


@pytest.fixture
def silent_address() -> Iterator[str]:
    """HOST:PORT of a socket that accepts connections and never reads or answers
    (as a SIGSTOPped node's kernel does)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


@pytest.fixture(params=list(LOOPS))
def run(request: pytest.FixtureRequest) -> Iterator[Runner]:
    """Run a coroutine on a fresh loop: UringEventLoop and the stock loop."""
    if request.param == "uring" and URING_REASON is not None:
        pytest.skip(f"io_uring unavailable: {URING_REASON}")

    def runner(coro: Coroutine[Any, Any, Any]) -> Any:
        with asyncio.Runner(loop_factory=LOOPS[request.param]) as r:
            return r.run(coro)

    yield runner
