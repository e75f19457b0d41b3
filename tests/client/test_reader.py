"""`PartitionReader`: the same batches as one `fetch_batch` after the other, the
next fetches sent before the caller asks for them (prefetch), missed predictions
and errors where they belong."""

from __future__ import annotations

import asyncio

import pytest

from laminar.client import AsyncClient, OffsetOutOfRangeError, PartitionReader, RecordBatch
from laminar.wire import FetchedRecord, FetchResponse, Op

from .conftest import Runner
from .fakenode import FakeNode, Fault


def batch_at(index: int, count: int) -> RecordBatch:
    records = tuple(FetchedRecord(index + i, 7, b"\x00%d" % (index + i)) for i in range(count))
    frame = FetchResponse(1, records, 0, index + count, index + count).to_frame(1)
    return RecordBatch.from_frame(frame, 0)


class FakeFetches:
    """A partition of `end` records served `per_fetch` at a time, a fetch stopping
    before any index in `cuts` (a segment's end); an index past the end is out
    of range, as on a node. Remembers every index asked for, fails those in
    `fail_at` once, and holds those in `held` until `release`."""

    def __init__(
        self,
        end: int,
        per_fetch: int,
        cuts: set[int] | None = None,
        fail_at: set[int] | None = None,
    ) -> None:
        self.end = end
        self.per_fetch = per_fetch
        self.cuts = cuts or set()
        self.fail_at = set(fail_at or ())
        self.held: dict[int, asyncio.Event] = {}
        self.asked: list[int] = []

    def hold(self, index: int) -> asyncio.Event:
        self.held[index] = asyncio.Event()
        return self.held[index]

    async def __call__(self, index: int) -> RecordBatch:
        self.asked.append(index)
        await asyncio.sleep(0)
        if index in self.held:
            await self.held[index].wait()
        if index in self.fail_at:
            self.fail_at.discard(index)
            raise OffsetOutOfRangeError(f"no index {index} (injected)")
        if index > self.end:
            raise OffsetOutOfRangeError(f"index {index} > end {self.end}")
        stop = min(index + self.per_fetch, self.end)
        stop = min([c for c in self.cuts if index < c < stop] + [stop])
        return batch_at(index, stop - index)


async def drain(reader: PartitionReader, end: int) -> list[int]:
    """Every index handed out until `end`, checking each batch starts at the position."""
    seen: list[int] = []
    while reader.position < end:
        at = reader.position
        batch = await reader.next_batch()
        assert not batch.indexes or batch.indexes[0] == at
        seen += batch.indexes
    return seen


@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_batches_are_those_of_fetches_one_after_the_other(prefetch: int) -> None:
    async def main() -> None:
        fetches = FakeFetches(end=93, per_fetch=10, cuts={25, 26, 64})
        async with PartitionReader(fetches, 3, max_records=10, prefetch=prefetch) as reader:
            assert await drain(reader, 93) == list(range(3, 93))
            assert len(await reader.next_batch()) == 0  # the end: empty, position kept
            assert reader.position == 93
        if prefetch == 0:
            assert fetches.asked == [3, 13, 23, 25, 26, 36, 46, 56, 64, 74, 84, 93]

    asyncio.run(main())


@pytest.mark.parametrize(("prefetch", "asked"), [(0, [0]), (1, [0, 10]), (3, [0, 10, 20, 30])])
def test_the_next_fetches_are_made_before_the_caller_asks(prefetch: int, asked: list[int]) -> None:
    async def main() -> None:
        fetches = FakeFetches(end=100, per_fetch=10)
        reader = PartitionReader(fetches, 0, max_records=10, prefetch=prefetch)
        await reader.next_batch()
        for _ in range(3):
            await asyncio.sleep(0)  # the caller works on its batch; the loop turns
        assert fetches.asked == asked
        await reader.close()

    asyncio.run(main())


def test_after_a_short_batch_only_the_exact_next_fetch_is_made() -> None:
    async def main() -> None:
        fetches = FakeFetches(end=100, per_fetch=10, cuts={5})
        async with PartitionReader(fetches, 0, max_records=10, prefetch=3) as reader:
            assert (await reader.next_batch()).indexes == list(range(5))
            for _ in range(3):
                await asyncio.sleep(0)
            assert fetches.asked == [0, 5]

    asyncio.run(main())


def test_an_empty_answer_is_not_followed_by_a_prefetch() -> None:
    async def main() -> None:
        fetches = FakeFetches(end=10, per_fetch=10)
        async with PartitionReader(fetches, 10, max_records=10, prefetch=2) as reader:
            assert len(await reader.next_batch()) == 0
            for _ in range(3):
                await asyncio.sleep(0)
            assert fetches.asked == [10]

    asyncio.run(main())


def test_a_prediction_past_the_end_that_failed_is_asked_again_not_raised() -> None:
    async def main() -> None:
        fetches = FakeFetches(end=20, per_fetch=10)
        gate = fetches.hold(20)  # answered only once more records are there
        async with PartitionReader(fetches, 0, max_records=10, prefetch=3) as reader:
            assert (await reader.next_batch()).indexes == list(range(10))
            for _ in range(3):
                await asyncio.sleep(0)  # 30 was asked for past the end: an error
            fetches.end = 60  # records arrive before the caller gets there
            gate.set()
            assert await drain(reader, 60) == list(range(10, 60))
        assert fetches.asked.count(30) == 2  # the failed guess, then exactly

    asyncio.run(main())


def test_an_exact_fetch_that_failed_is_raised_and_then_asked_again() -> None:
    async def main() -> None:
        fetches = FakeFetches(end=30, per_fetch=10, fail_at={10})
        async with PartitionReader(fetches, 0, max_records=10, prefetch=1) as reader:
            assert (await reader.next_batch()).indexes == list(range(10))
            with pytest.raises(OffsetOutOfRangeError, match="injected"):
                await reader.next_batch()
            assert reader.position == 10
            assert (await reader.next_batch()).indexes == list(range(10, 20))
        assert fetches.asked[:3] == [0, 10, 10]

    asyncio.run(main())


def test_a_cancelled_call_loses_no_records() -> None:
    async def main() -> None:
        fetches = FakeFetches(end=50, per_fetch=10)
        gate = fetches.hold(10)
        async with PartitionReader(fetches, 0, max_records=10, prefetch=2) as reader:
            await reader.next_batch()
            waiting = asyncio.ensure_future(reader.next_batch())
            for _ in range(3):
                await asyncio.sleep(0)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            gate.set()
            assert await drain(reader, 50) == list(range(10, 50))

    asyncio.run(main())


def test_close_drops_the_fetches_in_flight_and_refuses_more() -> None:
    async def main() -> None:
        fetches = FakeFetches(end=50, per_fetch=4)
        fetches.hold(4)  # the prefetch never completes on its own
        reader = PartitionReader(fetches, 0, max_records=4, prefetch=1)
        await reader.next_batch()
        await asyncio.sleep(0)
        assert fetches.asked == [0, 4]
        await reader.close()  # returns although the prefetch would wait forever
        with pytest.raises(RuntimeError, match="closed"):
            await reader.next_batch()

    asyncio.run(main())


def test_reader_of_the_async_client_reads_a_partition_by_identity(
    node: FakeNode, run: Runner
) -> None:
    async def main() -> None:
        async with AsyncClient(node.bootstrap) as c:
            await c.create_topic("t", partitions=2)
            values = [b"%06d" % i for i in range(250)]
            for k in range(0, 250, 50):
                await c.produce("t", 1, values[k : k + 50])
            node.inject(Fault("error", op=Op.FETCH, code=OffsetOutOfRangeError.code))
            async with c.reader("t", 1, 0, max_records=40, prefetch=2) as reader:
                with pytest.raises(OffsetOutOfRangeError):
                    await reader.next_batch()
                got: list[bytes] = []
                while reader.position < 250:
                    got += [bytes(v) for v in (await reader.next_batch()).values()]
            assert got == values  # each record once, in order
            assert len(await c.fetch_batch("t", 1, 250)) == 0

    run(main())
