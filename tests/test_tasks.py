"""`laminar.tasks.settle`: a stopped task's cancellation is swallowed, the
waiting task's own is not (Ctrl-C on `asyncio.run` must end the program)."""

from __future__ import annotations

import asyncio

import pytest

from laminar.tasks import settle


def test_a_stopped_task_s_cancellation_is_swallowed() -> None:
    async def scenario() -> str:
        stopped = asyncio.create_task(asyncio.sleep(3600))
        await asyncio.sleep(0)
        stopped.cancel()
        await settle(stopped)
        assert stopped.cancelled()
        return "closed"

    assert asyncio.run(scenario()) == "closed"


def test_the_waiting_task_s_own_cancellation_goes_through() -> None:
    async def scenario() -> None:
        awaited = asyncio.create_task(asyncio.sleep(3600))
        went_on: list[str] = []

        async def closing() -> None:
            await settle(awaited)  # cancelled here, as Ctrl-C cancels asyncio.run's task
            went_on.append("after the close")

        closer = asyncio.create_task(closing())
        await asyncio.sleep(0)
        closer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closer
        assert not went_on

    asyncio.run(scenario())


def test_other_failures_of_the_awaited_task_propagate() -> None:
    async def broken() -> None:
        raise RuntimeError("broken")

    async def scenario() -> None:
        with pytest.raises(RuntimeError, match="broken"):
            await settle(asyncio.create_task(broken()))

    asyncio.run(scenario())
