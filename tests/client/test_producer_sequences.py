"""`ProducerSequences`: the numbering behind `Client(idempotent=True)`."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import pytest

from laminar.client.errors import ServerError
from laminar.client.producer import (
    BATCH_MAX_RECORDS,
    LINGER_FULL_BYTES,
    RECORD_OVERHEAD_BYTES,
    AsyncProducer,
    BatchQueue,
    BlockingProducer,
    Key,
    ProducerSequences,
    SequenceWindow,
)
from laminar.shards.idempotence import BATCHES_MAX
from laminar.wire import PRODUCER_WINDOW, ErrorCode
from laminar.wire.errors import WireUsageError
from laminar.wire.records import PRODUCER_HEADER


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


class _Sent:
    """A fake sent batch for `BlockingProducer`: appended at once, answered
    (`done`) when settled, and settling waits for `release`."""

    def __init__(self, log: list[str], first: int, name: str, release: threading.Event) -> None:
        self.log, self.first, self.name, self.release = log, first, name, release
        self.done = False

    def settle(self) -> None:
        self.release.wait(10)
        if not self.done:
            self.log.append(f"settle {self.name}")
        self.done = True

    def result(self) -> int:
        self.settle()
        return self.first


class _BlockingNode:
    def __init__(self) -> None:
        self.log: list[str] = []
        self.records: list[bytes] = []
        self.release = threading.Event()

    def send(self, key: Key, values: Sequence[bytes], keys: object, headers: object) -> _Sent:
        name = b"+".join(values).decode()
        self.log.append(f"send {name}")
        first = len(self.records)
        self.records.extend(values)
        return _Sent(self.log, first, name, self.release)


def test_a_blocking_produce_without_room_settles_the_oldest_first() -> None:
    node = _BlockingNode()
    node.release.set()
    producer = BlockingProducer(node.send, limit=2)
    a = producer.produce(("t", 0), [b"a"])
    producer.produce(("t", 0), [b"b"])
    producer.produce(("t", 1), [b"other"])  # its own window
    producer.produce(("t", 0), [b"c"])
    assert node.log == ["send a", "send b", "send other", "settle a", "send c"]
    assert a.done


def test_blocking_calls_of_other_threads_merge_while_one_waits_for_room() -> None:
    node = _BlockingNode()
    producer = BlockingProducer(node.send, limit=1)
    key = ("t", 0)
    first = producer.produce(key, [b"a"])
    results: dict[bytes, int] = {}

    def produce(value: bytes) -> None:
        results[value] = producer.produce(key, [value]).result()

    threads = [threading.Thread(target=produce, args=(v,)) for v in (b"b", b"c", b"d")]
    for started, thread in enumerate(threads, 1):  # b waits for a's answer; c, d queue
        thread.start()
        deadline = time.monotonic() + 10
        while _waiting(producer, key) < started:
            assert time.monotonic() < deadline, "the call never queued"
            time.sleep(0.001)
    node.release.set()
    for thread in threads:
        thread.join(10)
    assert node.log == ["send a", "settle a", "send b+c+d", "settle b+c+d"]
    assert first.result() == 0
    assert {v: node.records[i] for v, i in results.items()} == {v: v for v in results}


def _waiting(producer: BlockingProducer, key: Key) -> int:
    """The records queued for `key`, not yet sent."""
    part = producer._partitions.get(key)
    return sum(len(b.values) for b in part.queue._batches) if part else 0


def test_queued_calls_merge_in_call_order_within_the_bounds() -> None:
    queue: BatchQueue[list[int]] = BatchQueue(list, max_records=4, max_bytes=1000)
    a, at_a = queue.add([b"a1", b"a2"])
    b, at_b = queue.add([b"b1"], keys=[b"kb"], headers=[{"h": b"v"}])
    c, at_c = queue.add([b"c1", b"c2"])  # 5 records: a new batch
    d, at_d = queue.add([b"x" * (1000 - RECORD_OVERHEAD_BYTES)])  # too big to join c
    e, _ = queue.add([b"e"], alone="mine")  # nothing joins it
    f, at_f = queue.add([b"f"])
    assert (a, at_a, at_b) == (b, 0, 2) and (c, at_c) != (a, 0)
    assert a.values == [b"a1", b"a2", b"b1"]
    assert a.keys == [None, None, b"kb"] and a.headers == [None, None, {"h": b"v"}]
    assert c.keys is None and c.values == [b"c1", b"c2"]
    assert d is not c and at_d == 0 and e.alone == "mine" and f is not e and at_f == 0
    assert len(queue) == 5
    assert [queue.take() for _ in range(5)] == [a, c, d, e, f]


class _Node:
    """A fake partition for `AsyncProducer`: appends each batch it is sent,
    answering when the test says so."""

    def __init__(self) -> None:
        self.log: list[bytes] = []
        self.sent: list[list[bytes]] = []
        self.answers: list[asyncio.Future[None]] = []
        self.fail: set[int] = set()
        self.auto = False
        """Answer every batch sent from now on at once."""

    async def send(self, key: Key, values: Sequence[bytes], keys: object, headers: object) -> int:
        number = len(self.sent)
        self.sent.append(list(values))
        answer = asyncio.get_running_loop().create_future()
        self.answers.append(answer)
        if self.auto:
            answer.set_result(None)
        await answer
        if number in self.fail:
            raise ServerError("refused", code=ErrorCode.STORAGE_ERROR)
        first = len(self.log)
        self.log.extend(values)
        return first

    async def answer(self, number: int) -> None:
        while len(self.answers) <= number:
            await asyncio.sleep(0)
        self.answers[number].set_result(None)
        for _ in range(5):
            await asyncio.sleep(0)


async def _one_pass() -> None:
    """Let the loop run the callbacks of the pass under way and one more (where
    a produce's batch leaves)."""
    for _ in range(3):
        await asyncio.sleep(0)


def test_calls_made_in_one_loop_pass_leave_as_one_batch_and_a_lone_call_at_once() -> None:
    async def main() -> None:
        node = _Node()
        producer = AsyncProducer(node.send, limit=8)
        woken = [asyncio.create_task(producer.produce(("t", 0), [b"r%d" % i])) for i in range(5)]
        await _one_pass()
        assert node.sent == [[b"r0", b"r1", b"r2", b"r3", b"r4"]]  # room, yet merged
        lone = asyncio.create_task(producer.produce(("t", 0), [b"r5"]))
        await _one_pass()
        assert node.sent[1:] == [[b"r5"]]  # no answer needed, no timer waited for
        await node.answer(0)
        await node.answer(1)
        assert await asyncio.gather(*woken, lone) == [0, 1, 2, 3, 4, 5]

    asyncio.run(main())


def test_a_lingering_batch_waits_for_calls_of_later_passes_then_leaves() -> None:
    async def main() -> None:
        node = _Node()
        node.auto = True
        producer = AsyncProducer(node.send, limit=8, linger_s=0.2)
        loop = asyncio.get_running_loop()
        start = loop.time()
        first = asyncio.create_task(producer.produce(("t", 0), [b"a"]))
        await _one_pass()
        later = asyncio.create_task(producer.produce(("t", 0), [b"b"]))  # another pass
        await _one_pass()
        assert node.sent == []  # room in the window, yet it waits
        assert await asyncio.gather(first, later) == [0, 1]
        assert node.sent == [[b"a", b"b"]] and loop.time() - start >= 0.2
        await producer.close()

    asyncio.run(main())


def test_an_answer_does_not_cut_a_linger_short() -> None:
    async def main() -> None:
        node = _Node()
        producer = AsyncProducer(node.send, limit=8, linger_s=0.1)
        first = asyncio.create_task(producer.produce(("t", 0), [b"a"]))
        while not node.sent:
            await asyncio.sleep(0.01)
        second = asyncio.create_task(producer.produce(("t", 0), [b"b"]))
        await _one_pass()
        await node.answer(0)  # room was there all along: "b" still lingers
        assert node.sent == [[b"a"]]
        await node.answer(1)
        assert await asyncio.gather(first, second) == [0, 1]
        await producer.close()

    asyncio.run(main())


def test_a_lingering_batch_leaves_once_it_holds_kafkas_batch_size() -> None:
    async def main() -> None:
        node = _Node()
        node.auto = True
        producer = AsyncProducer(node.send, limit=8, linger_s=60)
        value = b"v" * (1024 - RECORD_OVERHEAD_BYTES)  # 1 KiB as the bound counts
        calls = [
            asyncio.create_task(producer.produce(("t", 0), [value]))
            for _ in range(LINGER_FULL_BYTES // 1024)
        ]
        assert await asyncio.wait_for(asyncio.gather(*calls), 10) == list(range(len(calls)))
        assert [len(batch) for batch in node.sent] == [len(calls)]
        await producer.close()

    asyncio.run(main())


def test_a_full_batch_does_not_wait_out_the_linger() -> None:
    async def main() -> None:
        node = _Node()
        node.auto = True
        producer = AsyncProducer(node.send, limit=8, linger_s=60)
        full = [b"x"] * BATCH_MAX_RECORDS
        calls = [
            asyncio.create_task(producer.produce(("t", 0), full)),
            asyncio.create_task(producer.produce(("t", 0), [b"y"])),  # the next batch
        ]
        assert await asyncio.wait_for(asyncio.gather(*calls), 10) == [0, BATCH_MAX_RECORDS]
        assert node.sent == [full, [b"y"]]
        await producer.close()

    asyncio.run(main())


@pytest.mark.parametrize("linger_s", [-0.001, 60.5, float("inf"), float("nan"), "1"])
def test_a_linger_outside_its_bounds_is_refused(linger_s: object) -> None:
    async def main() -> None:
        with pytest.raises(ValueError, match="linger_s"):
            AsyncProducer(_Node().send, linger_s=linger_s)  # type: ignore[arg-type]

    asyncio.run(main())


def test_calls_waiting_for_the_window_leave_merged_and_each_gets_its_own_index() -> None:
    async def main() -> None:
        node = _Node()
        producer = AsyncProducer(node.send, limit=2)
        calls = []
        for i in range(2):  # one pass each: a batch each, filling the window
            calls.append(asyncio.create_task(producer.produce(("t", 0), [f"r{i}".encode()])))
            await _one_pass()
        calls += [
            asyncio.create_task(producer.produce(("t", 0), [f"r{i}".encode()])) for i in range(2, 7)
        ]
        await _one_pass()
        assert node.sent == [[b"r0"], [b"r1"]]
        await node.answer(1)  # not the oldest: nothing leaves
        assert len(node.sent) == 2
        await node.answer(0)  # room for one batch: everything waiting, merged
        assert node.sent[2] == [b"r2", b"r3", b"r4", b"r5", b"r6"]
        await node.answer(2)
        firsts = await asyncio.gather(*calls)
        assert [node.log[i] for i in firsts] == [f"r{i}".encode() for i in range(7)]

    asyncio.run(main())


def test_a_call_made_while_queued_batches_start_goes_behind_them() -> None:
    """Sequences follow call order: a batch taken from the queue takes its
    sequence in its own task, a moment later; a call made meanwhile, finding
    room, must not overtake it."""

    async def main() -> None:
        node = _Node()
        producer = AsyncProducer(node.send, limit=3)
        early = []
        for i in range(3):
            early.append(asyncio.create_task(producer.produce(("t", 0), [b"r%d" % i])))
            await _one_pass()
        early += [asyncio.create_task(producer.produce(("t", 0), [b"r%d" % i])) for i in (3, 4)]
        await _one_pass()
        assert node.sent == [[b"r0"], [b"r1"], [b"r2"]]  # r3 and r4 queued
        node.answers[0].set_result(None)
        node.answers[1].set_result(None)
        node.auto = True
        await asyncio.sleep(0)  # r0's answer takes r3+r4 from the queue; r1's leaves room
        await producer.produce(("t", 0), [b"r5"])  # made here, before that batch's task ran
        node.answers[2].set_result(None)
        await asyncio.gather(*early)
        assert node.sent == [[b"r0"], [b"r1"], [b"r2"], [b"r3", b"r4"], [b"r5"]]

    asyncio.run(main())


def test_a_failed_batch_fails_every_call_in_it_and_a_caller_gone_leaves_it_to_the_others() -> None:
    async def main() -> None:
        node = _Node()
        node.fail.add(1)
        producer = AsyncProducer(node.send, limit=1)
        first = asyncio.create_task(producer.produce(("t", 0), [b"a"]))
        await asyncio.sleep(0)
        waiting = [asyncio.create_task(producer.produce(("t", 0), [v])) for v in (b"b", b"c")]
        gone = asyncio.create_task(producer.produce(("t", 0), [b"d"]))
        await asyncio.sleep(0)
        gone.cancel()
        await node.answer(0)
        assert node.sent[1] == [b"b", b"c", b"d"]  # the caller that left is still in it
        await node.answer(1)
        for task in waiting:
            with pytest.raises(ServerError, match="refused"):
                await task
        assert await first == 0
        later = asyncio.create_task(producer.produce(("t", 0), [b"e"]))
        await node.answer(2)
        assert await later == 1 and node.log == [b"a", b"e"]

    asyncio.run(main())


def test_a_call_that_cannot_be_sent_fails_alone_before_it_is_merged() -> None:
    async def main() -> None:
        node = _Node()
        producer = AsyncProducer(node.send, limit=1)
        first = asyncio.create_task(producer.produce(("t", 0), [b"a"]))
        await asyncio.sleep(0)
        fine = asyncio.create_task(producer.produce(("t", 0), [b"b"]))
        for bad in (
            producer.produce(("t", 0), [b"c"], headers=[{PRODUCER_HEADER: b"x"}]),
            producer.produce(("t", 0), ["text"]),  # type: ignore[list-item]
            producer.produce(("t", 0), [b"d", b"e"], keys=[b"k"]),
            producer.produce(("t", 0), []),
        ):
            with pytest.raises(WireUsageError):
                await bad
        await node.answer(0)
        await node.answer(1)
        assert (await first, await fine) == (0, 1) and node.sent == [[b"a"], [b"b"]]

    asyncio.run(main())


def test_a_call_under_its_callers_producer_goes_alone_in_its_turn() -> None:
    async def main() -> None:
        node = _Node()
        producer = AsyncProducer(node.send, limit=1)
        order: list[str] = []

        async def own() -> int:
            order.append("own")
            return 99

        first = asyncio.create_task(producer.produce(("t", 0), [b"a"]))
        await asyncio.sleep(0)
        mine = asyncio.create_task(producer.produce(("t", 0), [b"m"], alone=own))
        after = asyncio.create_task(producer.produce(("t", 0), [b"b"]))
        await asyncio.sleep(0)
        await node.answer(0)
        assert await mine == 99 and order == ["own"]
        await node.answer(1)
        assert node.sent == [[b"a"], [b"b"]] and await first == 0 and await after == 1

    asyncio.run(main())
