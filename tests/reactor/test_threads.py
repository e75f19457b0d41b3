"""Loops and threads: which thread may run and close a UringEventLoop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from laminar.iouring import WrongThread
from laminar.reactor import UringEventLoop

from .conftest import needs_uring, open_fds


def run_in_thread(loop: asyncio.AbstractEventLoop) -> str:
    result: list[str] = []
    thread = threading.Thread(
        target=lambda: result.append(loop.run_until_complete(asyncio.sleep(0.001, "ok")))
    )
    thread.start()
    thread.join()
    return result[0]


@needs_uring
def test_a_loop_run_in_a_thread_can_be_closed_from_another() -> None:
    before = open_fds()
    loop = UringEventLoop()
    assert run_in_thread(loop) == "ok"
    loop.close()
    assert open_fds() == before


@needs_uring
@pytest.mark.filterwarnings("ignore:coroutine 'sleep' was never awaited")
def test_a_single_issuer_loop_refuses_a_second_thread_clearly() -> None:
    loop = UringEventLoop()
    try:
        assert run_in_thread(loop) == "ok"
        with pytest.raises(WrongThread, match="single_issuer=False"):
            loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()


@needs_uring
def test_a_loop_without_single_issuer_moves_between_threads() -> None:
    loop = UringEventLoop(single_issuer=False)
    try:
        assert run_in_thread(loop) == "ok"
        assert loop.run_until_complete(asyncio.sleep(0.001, "main")) == "main"
    finally:
        loop.close()
