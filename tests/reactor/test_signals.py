"""Signal handlers (SIGINT/SIGTERM style) on both loops."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import pytest

from .conftest import LOOPS, Runner


def test_add_signal_handler_runs_the_callback(run: Runner) -> None:
    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        seen: list[int] = []
        done = asyncio.Event()

        def on_signal(signum: int) -> None:
            seen.append(signum)
            done.set()

        loop.add_signal_handler(signal.SIGUSR1, on_signal, signal.SIGUSR1)
        try:
            # Sent from another thread while the loop sleeps.
            threading.Timer(0.02, os.kill, (os.getpid(), signal.SIGUSR1)).start()
            await asyncio.wait_for(done.wait(), 5)
        finally:
            assert loop.remove_signal_handler(signal.SIGUSR1)
        assert not loop.remove_signal_handler(signal.SIGUSR1)
        return seen

    assert run(main()) == [signal.SIGUSR1]
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_sigterm_handler_for_graceful_drain(run: Runner) -> None:
    async def main() -> str:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        try:
            loop.call_later(0.01, os.kill, os.getpid(), signal.SIGTERM)
            await asyncio.wait_for(stop.wait(), 5)
            return "drained"
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    assert run(main()) == "drained"


def test_signal_handler_argument_checks(run: Runner) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def coro() -> None:
            pass

        with pytest.raises(TypeError):
            loop.add_signal_handler(signal.SIGUSR2, coro)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            loop.add_signal_handler(10_000, print)
        with pytest.raises(RuntimeError):
            loop.add_signal_handler(signal.SIGKILL, print)

    run(main())


def test_runner_turns_sigint_into_keyboard_interrupt(loop_kind: str) -> None:
    """asyncio.Runner's own SIGINT handling wakes the loop out of its sleep."""

    async def main() -> None:
        threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
        await asyncio.sleep(30)

    with pytest.raises(KeyboardInterrupt), asyncio.Runner(loop_factory=LOOPS[loop_kind]) as r:
        r.run(main())
