"""`Deadlines`: one timer per connection expires exactly the requests that are due."""

from __future__ import annotations

import asyncio

from laminar.client.aio_connection import Deadlines


def test_only_unanswered_requests_expire_in_deadline_order() -> None:
    async def main() -> list[tuple[int, float]]:
        expired: list[tuple[int, float]] = []
        deadlines = Deadlines(asyncio.get_running_loop(), lambda c, t: expired.append((c, t)))
        deadlines.add(1, 0.05)
        deadlines.add(2, 30.0)  # a long-poll: not due during this test
        deadlines.add(3, 0.05)
        deadlines.add(4, 0.02)
        deadlines.add(5, 0.05)
        deadlines.discard(3, 0.05)  # answered in time
        await asyncio.sleep(0.2)
        deadlines.discard(1, 0.05)  # an answer after expiry changes nothing
        deadlines.close()
        return expired

    assert asyncio.run(main()) == [(4, 0.02), (1, 0.05), (5, 0.05)]


def test_an_answered_head_does_not_hide_a_later_deadline() -> None:
    """The timer is armed for the first request; once it is answered, the timer
    fires early, finds nothing due, and re-arms for the next one."""

    async def main() -> list[int]:
        expired: list[int] = []
        deadlines = Deadlines(asyncio.get_running_loop(), lambda c, t: expired.append(c))
        deadlines.add(1, 0.02)
        await asyncio.sleep(0.01)
        deadlines.add(2, 0.02)
        deadlines.discard(1, 0.02)
        await asyncio.sleep(0.1)
        deadlines.add(3, 10.0)
        deadlines.close()  # nothing fires after close
        await asyncio.sleep(0.05)
        return expired

    assert asyncio.run(main()) == [2]
