"""Idempotent produce without bookkeeping: a producer id and sequences per partition.

By default (as Kafka's producer since 3.0; `Client(idempotent=False)` opts
out) each (topic, partition) a client writes to gets a random 64-bit producer id,
and its records are numbered 0, 1, 2, ... in the order produce calls are
made, so a batch sent again after a lost answer, a leader change or a shard
restart is appended once (`laminar.shards.idempotence` decides on the node).
Pipelined calls keep working: the node places a producer's batches in the
order they arrive. The stamp travels in the first record's `laminar.producer`
header, which the clients' reads leave out (`decode_user_record`).

The window. A batch is sent again only while it is unanswered, and the node
remembers a producer's last `PRODUCER_WINDOW` batches (`laminar.wire.records`).
So a partition's idempotent batches are sent through a `SequenceWindow`: a new
batch waits while `PRODUCER_WINDOW` batches, counted from the oldest one still
unanswered to the newest, are outstanding. Counting only the unanswered ones
would not do: one batch retried for seconds (its answer lost) while the others
complete lets any number be appended after it, and its resend then finds the
node has forgotten it (DUPLICATE_SEQUENCE). Kafka bounds the same thing with
`max.in.flight.requests.per.connection` <= 5 against the broker's 5.

A produce that fails for good leaves a hole in the numbers, which the node
would refuse every later batch for. The partition then starts over under a
new producer id, whose first batch starts at 0 as the node requires;
batches already sent behind the failed one under the old id are refused as
out of order, with nothing appended, and fail too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Protocol, TypeVar

from laminar.client import calls
from laminar.wire import PRODUCER_WINDOW

Key = tuple[str, int]
"""(topic, partition)."""


class ProducerSequences:
    """The producer id and next sequence of each partition a client writes to."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the blocking client is shared by threads
        self._next: dict[tuple[str, int], tuple[int, int]] = {}

    def assign(self, topic: str, partition: int, count: int) -> tuple[int, int]:
        """(producer id, first sequence) for the next batch of `count` records."""
        key = (topic, partition)
        with self._lock:
            producer_id, sequence = self._next.get(key) or (secrets.randbits(64), 0)
            self._next[key] = (producer_id, sequence + count)
        return producer_id, sequence

    def failed(self, topic: str, partition: int, producer_id: int) -> None:
        """A batch of `producer_id` failed for good: the partition's next batch
        starts a new producer (unless that happened already)."""
        key = (topic, partition)
        with self._lock:
            current = self._next.get(key)
            if current is not None and current[0] == producer_id:
                del self._next[key]


def produce_call(
    sequences: ProducerSequences | None,
    topic: str,
    partition: int,
    values: Sequence[bytes],
    keys: Sequence[bytes | None] | None,
    headers: Sequence[Mapping[str, bytes] | None] | None,
    producer_id: int | None,
    sequence: int | None,
) -> calls.Call[int]:
    """The produce call of a client: idempotent under the partition's own
    producer when `sequences` is given and the caller named no producer."""
    failed = None
    if sequences is not None and producer_id is None and sequence is None:
        producer_id, sequence = sequences.assign(topic, partition, len(values))
        failed = functools.partial(sequences.failed, topic, partition, producer_id)
    return calls.produce(topic, partition, values, keys, headers, producer_id, sequence, failed)


def is_idempotent(
    sequences: ProducerSequences | None, producer_id: int | None, sequence: int | None
) -> bool:
    """Whether `produce_call` with these arguments makes an idempotent produce."""
    return producer_id is not None or (sequences is not None and sequence is None)


class SequenceWindow:
    """A partition's batches from the oldest unanswered to the newest sent, by
    position (0, 1, 2, ... in sending order); room for another while fewer than
    `limit`. I/O-free: the clients wait for room their own way."""

    __slots__ = ("_answered", "_next", "_oldest", "limit")

    def __init__(self, limit: int = PRODUCER_WINDOW) -> None:
        if limit < 1:
            raise ValueError(f"a window needs room for one batch, not {limit}")
        self.limit = limit
        self._oldest = 0
        """The position of the oldest batch not yet answered (== `_next` if none)."""
        self._next = 0
        self._answered: set[int] = set()
        """Answered positions past `_oldest` (answers may come in any order)."""

    @property
    def has_room(self) -> bool:
        return self._next - self._oldest < self.limit

    @property
    def oldest(self) -> int | None:
        """The position of the oldest unanswered batch; None if all are answered."""
        return self._oldest if self._oldest < self._next else None

    def sent(self) -> int:
        """Take the next position for a batch about to be sent (there must be room)."""
        if not self.has_room:
            raise RuntimeError("no room in the window: wait for the oldest batch's answer")
        position = self._next
        self._next += 1
        return position

    def answered(self, position: int) -> None:
        """The batch at `position` got its final answer (a result or a failure for good)."""
        if not self._oldest <= position < self._next:
            raise ValueError(f"position {position} is not outstanding")
        self._answered.add(position)
        while self._oldest in self._answered:
            self._answered.discard(self._oldest)
            self._oldest += 1


class AsyncWindows:
    """The asyncio client's window per partition: a produce waits for room."""

    def __init__(self, limit: int = PRODUCER_WINDOW) -> None:
        self.limit = limit
        self._windows: dict[Key, SequenceWindow] = {}
        self._waiters: dict[Key, list[asyncio.Future[None]]] = {}

    @contextlib.asynccontextmanager
    async def slot(self, key: Key) -> AsyncIterator[None]:
        """Hold a place in `key`'s window from before the batch's sequence is
        assigned until its final answer."""
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = SequenceWindow(self.limit)
        while not window.has_room:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.setdefault(key, []).append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():
                    waiter.cancel()
        position = window.sent()
        try:
            yield
        finally:
            window.answered(position)
            for waiter in self._waiters.pop(key, ()):  # each looks again
                if not waiter.done():
                    waiter.set_result(None)


class Settleable(Protocol):
    """A sent produce as `BlockingWindows` sees it (the blocking client's `Pending`)."""

    @property
    def done(self) -> bool:
        """Whether the final answer is in (a result or a failure for good)."""

    def settle(self) -> None:
        """Wait for the final answer (kept for `result()`), raising nothing."""


S = TypeVar("S", bound=Settleable)


class BlockingWindows:
    """The blocking client's window per partition. Its callers may never wait
    for a pending produce (or wait in another order), so a produce without
    room settles the oldest unanswered one itself; its outcome is kept for
    its own `result()`. Thread-safe: a partition's window is held while a
    batch gets its sequence and is sent, so threads keep sequence order."""

    def __init__(self, limit: int = PRODUCER_WINDOW) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._windows: dict[Key, _BlockingWindow] = {}

    def send(self, key: Key, send: Callable[[], S]) -> S:
        """`send()` (assigns the sequence and sends) once `key`'s window has room."""
        with self._lock:
            state = self._windows.get(key)
            if state is None:
                state = self._windows[key] = _BlockingWindow(self.limit)
        with state.lock:
            window = state.window
            while (oldest := window.oldest) is not None and (
                not window.has_room or state.pending[oldest].done
            ):
                state.pending.pop(oldest).settle()  # at once when done
                window.answered(oldest)
            position = window.sent()
            try:
                pending = send()
            except BaseException:
                window.answered(position)
                raise
            state.pending[position] = pending
            return pending


class _BlockingWindow:
    __slots__ = ("lock", "pending", "window")

    def __init__(self, limit: int) -> None:
        self.lock = threading.Lock()
        self.window = SequenceWindow(limit)
        self.pending: dict[int, Settleable] = {}
