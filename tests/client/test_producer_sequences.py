"""`ProducerSequences`: the numbering behind `Client(idempotent=True)`."""

from __future__ import annotations

import asyncio

import pytest

from laminar.client.producer import (
    AsyncWindows,
    BlockingWindows,
    ProducerSequences,
    SequenceWindow,
)
from laminar.shards.idempotence import BATCHES_MAX
from laminar.wire import PRODUCER_WINDOW


def test_each_partition_numbers_its_records_under_its_own_producer() -> None:
    seqs = ProducerSequences()
    a0 = seqs.assign("t", 0, 3)
    a1 = seqs.assign("t", 0, 2)
    b0 = seqs.assign("t", 1, 1)
    assert a0[1] == 0 and a1 == (a0[0], 3)
    assert b0[1] == 0 and b0[0] != a0[0]


def test_a_failure_starts_a_new_producer_once() -> None:
    seqs = ProducerSequences()
    old, _ = seqs.assign("t", 0, 5)
    seqs.failed("t", 0, old)
    new, sequence = seqs.assign("t", 0, 1)
    assert new != old and sequence == 0
    seqs.failed("t", 0, old)  # a later failure of the old producer changes nothing
    assert seqs.assign("t", 0, 1) == (new, 1)


def test_the_window_counts_from_the_oldest_unanswered_batch() -> None:
    """Answers after the oldest unanswered batch free nothing: the node must
    still remember that batch when it is sent again."""
    window = SequenceWindow(3)
    positions = [window.sent() for _ in range(3)]
    assert positions == [0, 1, 2] and not window.has_room
    window.answered(2)
    window.answered(1)
    assert not window.has_room and window.oldest == 0
    with pytest.raises(RuntimeError, match="no room"):
        window.sent()
    window.answered(0)
    assert window.has_room and window.oldest is None
    assert [window.sent() for _ in range(3)] == [3, 4, 5]
    with pytest.raises(ValueError, match="not outstanding"):
        window.answered(0)


def test_the_window_is_the_nodes_memory() -> None:
    assert SequenceWindow().limit == PRODUCER_WINDOW == BATCHES_MAX


class _Pending:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name, self.done = log, name, False

    def settle(self) -> None:
        self.log.append(f"settle {self.name}")
        self.done = True


def test_a_blocking_produce_without_room_settles_the_oldest_first() -> None:
    windows = BlockingWindows(2)
    log: list[str] = []

    def send(name: str) -> _Pending:
        log.append(f"send {name}")
        return _Pending(log, name)

    a = windows.send(("t", 0), lambda: send("a"))
    windows.send(("t", 0), lambda: send("b"))
    windows.send(("t", 1), lambda: send("other"))  # its own window
    windows.send(("t", 0), lambda: send("c"))
    assert log == ["send a", "send b", "send other", "settle a", "send c"]
    assert a.done


def test_an_async_produce_waits_for_the_oldest_answer() -> None:
    async def main() -> list[str]:
        windows = AsyncWindows(2)
        log: list[str] = []
        answers = {name: asyncio.Event() for name in "abc"}

        async def produce(name: str) -> None:
            async with windows.slot(("t", 0)):
                log.append(f"send {name}")
                await answers[name].wait()
                log.append(f"answer {name}")

        tasks = [asyncio.create_task(produce(n)) for n in "abc"]
        await asyncio.sleep(0.01)
        answers["b"].set()  # not the oldest: c still waits
        await asyncio.sleep(0.01)
        answers["c"].set()
        answers["a"].set()
        await asyncio.gather(*tasks)
        return log

    assert asyncio.run(main()) == ["send a", "send b", "answer b", "answer a", "send c", "answer c"]
