"""`PartitionReader`: a partition read in order, the next fetches already on their way.

A consumer loop `fetch_batch(index)`, process, `fetch_batch(next)` has one
fetch in flight: the node reads, verifies and sends while the consumer waits,
then the consumer receives and decodes while the node waits. The reader keeps
up to `prefetch` fetches in flight ahead of the caller, so the node works on
the next answers while the consumer takes in the current one:

    async with client.reader("events", 0, index, prefetch=2) as reader:
        while True:
            batch = await reader.next_batch()   # empty at the end of the partition
            for view in batch.values():
                ...

Where the next batch starts is known only once the current one has arrived.
The first fetch ahead asks from where the last batch ended (exact); further
ones are predicted, one `max_records` after the other, and are made only
after a full batch (`max_records` records), since a short one says the reader
is at the tail, at a segment's end or at `max_bytes`, where predictions miss.
A batch is handed out only if it starts exactly where the previous one ended:
a missed prediction is dropped (its answer abandoned) and asked again, and
so is a predicted fetch that failed (it may have asked past the end before
the records were there); an exact fetch's error is raised by the
`next_batch` that would have returned its batch, the position unchanged, and
the next call asks again. So the batches are exactly those of `fetch_batch`
calls made one after the other; only when they are asked for differs.

Bounded: at most `prefetch` answers (each at most `max_bytes`) wait while the
caller holds the current one. `prefetch=0` is the plain loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import NamedTuple, TypeVar

from laminar.client.batch import RecordBatch
from laminar.tasks import settle

T = TypeVar("T")

FetchFrom = Callable[[int], Awaitable[RecordBatch]]
"""A fetch of the batch starting at an index (`AsyncClient.fetch_batch` with
the reader's topic, partition and limits bound)."""


class _Ahead(NamedTuple):
    start: int
    predicted: bool
    answer: asyncio.Future[RecordBatch]


class PartitionReader:
    """Batches of one partition from `index` on, `prefetch` fetches ahead (see
    the module docstring). Make with `AsyncClient.reader`; close (or use
    `async with`) when done, which drops the fetches in flight."""

    __slots__ = ("_ahead", "_closed", "_fetch_from", "_max_records", "_position", "_prefetch")

    def __init__(
        self, fetch_from: FetchFrom, index: int, *, max_records: int, prefetch: int = 1
    ) -> None:
        if prefetch < 0 or max_records < 1:
            raise ValueError("prefetch must be >= 0 and max_records >= 1")
        self._fetch_from = fetch_from
        self._position = index
        self._max_records = max_records
        self._prefetch = prefetch
        self._ahead: deque[_Ahead] = deque()
        self._closed = False

    @property
    def position(self) -> int:
        """The index the next batch starts at (after every record handed out)."""
        return self._position

    async def next_batch(self) -> RecordBatch:
        """The records from `position` on (empty when there are none yet, after
        the fetch's long-poll); asks for the ones after them before returning."""
        if self._closed:
            raise RuntimeError("the reader is closed")
        batch = await self._take()
        self._position = batch.next_index
        if not batch:
            self._drop_ahead()  # at the end: ask again when called
            return batch
        ahead = self._ahead
        if ahead and ahead[0].start != self._position:
            self._drop_ahead()  # a prediction missed: the batch was short
        self._top_up(full=len(batch) >= self._max_records)
        return batch

    async def _take(self) -> RecordBatch:
        """The batch at `position`: the fetch ahead for it, or a fetch made now."""
        ahead = self._ahead
        if ahead and ahead[0].start != self._position:
            self._drop_ahead()  # after a cancelled call: what is ahead starts elsewhere
        if ahead:
            head = ahead.popleft()
            try:
                return await head.answer
            except BaseException as exc:
                self._drop_ahead()  # asked after a batch that did not come
                if not head.predicted or not isinstance(exc, Exception):
                    raise
                # a guess that failed is asked again, exactly
        return await self._fetch_from(self._position)

    def _top_up(self, *, full: bool) -> None:
        ahead = self._ahead
        want = self._prefetch if full else min(self._prefetch, 1)
        while len(ahead) < want:
            if ahead:
                start, predicted = ahead[-1].start + self._max_records, True
            else:
                start, predicted = self._position, False
            ahead.append(_Ahead(start, predicted, asyncio.ensure_future(self._fetch_from(start))))

    def _drop_ahead(self) -> None:
        """Abandon the fetches ahead (their answers, or errors, are never looked at)."""
        ahead = self._ahead
        while ahead:
            abandon(ahead.pop().answer)

    async def close(self) -> None:
        """Drop the fetches in flight, if any (their answers are abandoned)."""
        self._closed = True
        answers = [a.answer for a in self._ahead]
        self._drop_ahead()
        for answer in answers:
            with contextlib.suppress(Exception):  # abandoned: how it ended is nobody's
                await settle(answer)

    async def __aenter__(self) -> PartitionReader:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def abandon(answer: asyncio.Future[T]) -> None:
    """Cancel a fetch nobody waits for any more; its outcome is never looked at
    (also `AsyncClient`'s `Drop`)."""
    answer.cancel()
    answer.add_done_callback(_outcome_seen)


def _outcome_seen(answer: asyncio.Future[T]) -> None:
    """Mark a dropped fetch's error as seen (asyncio logs unseen ones)."""
    if not answer.cancelled():
        answer.exception()
