"""Choosing the loop: runtime="auto" | "uring" | "asyncio"."""

from __future__ import annotations

import asyncio
import logging

import pytest

from laminar.iouring import IoUringUnavailable
from laminar.reactor import StockEventLoop, UringEventLoop, loop_factory, run, runtime

from .conftest import needs_uring


def test_asyncio_runtime_is_the_stock_loop() -> None:
    assert loop_factory("asyncio") is StockEventLoop


@needs_uring
def test_uring_and_auto_pick_uring_where_available() -> None:
    assert loop_factory("uring") is UringEventLoop
    assert loop_factory("auto") is UringEventLoop

    async def kind() -> str:
        return type(asyncio.get_running_loop()).__name__

    assert run(kind(), runtime="auto") == "UringEventLoop"
    assert run(kind(), runtime="asyncio") == "StockEventLoop"


def test_unknown_runtime_is_rejected() -> None:
    with pytest.raises(ValueError, match="auto, uring, asyncio"):
        loop_factory("epoll")


def test_auto_falls_back_with_a_logged_reason(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(runtime, "uring_unavailable_reason", lambda: "ENOSYS (test)")
    with caplog.at_level(logging.WARNING, logger="laminar.reactor"):
        assert loop_factory("auto") is StockEventLoop
    assert "ENOSYS (test)" in caplog.text
    with pytest.raises(IoUringUnavailable, match=r'ENOSYS.*runtime="asyncio"'):
        loop_factory("uring")
