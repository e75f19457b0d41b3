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

Batching by itself. The window limits batches, not records: produce calls
to a partition wait in a `BatchQueue`, merged in call order into batches of
at most `BATCH_MAX_RECORDS` records and `BATCH_MAX_BYTES` bytes (a call is
never split: its records stay together and share one outcome), and each
batch leaves as soon as the window has room for it, as Kafka's
RecordAccumulator does. No timer by default: the asyncio client sends what
is queued at the end of the loop pass in which a call was made, so a lone
produce leaves at once and calls made in one pass (the callers one answer
woke) leave as one batch; the blocking client sends a call that finds room
at once. With `AsyncClient(linger_s=...)` (Kafka's linger.ms) a batch that
finds room waits that long for more calls before it leaves, sooner once it
holds `LINGER_FULL_BYTES` (Kafka's batch.size) or another batch is started;
batches queued while the window was full leave as soon as it has room.
The blocking client has no linger: it sends from the caller's thread, so a
lingering call would block its caller (and a thread pipelining with
`produce_nowait` would wait out every linger). Each caller gets the index
of its own first record (the batch's first index plus the records queued
ahead of its own in that batch); if the batch fails, every call in it
fails with that error.

A produce that fails for good leaves a hole in the numbers, which the node
would refuse every later batch for. The partition then starts over under a
new producer id, whose first batch starts at 0 as the node requires;
batches already sent behind the failed one under the old id are refused as
out of order, with nothing appended, and fail too.
"""

from __future__ import annotations

import asyncio
import functools
import math
import secrets
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final, Generic, Protocol, TypeVar

from laminar.client import calls
from laminar.wire import PRODUCER_WINDOW
from laminar.wire.records import check_records

Key = tuple[str, int]
"""(topic, partition)."""

BATCH_MAX_RECORDS: Final = 4096
"""The most records produce calls merged into one batch carry."""
BATCH_MAX_BYTES: Final = 1 << 20
"""The most value, key and header bytes merged into one batch (a call larger
than that goes alone)."""
RECORD_OVERHEAD_BYTES: Final = 32
"""What a record costs in a batch besides its bytes, as the bound counts it."""
MAX_LINGER_S: Final = 60.0
"""The longest `linger_s` a client takes."""
LINGER_FULL_BYTES: Final = 16 << 10
"""A lingering batch leaves once it holds this many bytes (Kafka's batch.size
default): a linger gathers calls while they are few, not while they are many."""


def check_linger(linger_s: float) -> float:
    """`linger_s` if it is a number of seconds from 0 to `MAX_LINGER_S`."""
    if not (isinstance(linger_s, int | float) and math.isfinite(linger_s)):
        raise ValueError(f"linger_s is a number of seconds, not {linger_s!r}")
    if not 0 <= linger_s <= MAX_LINGER_S:
        raise ValueError(f"linger_s must be between 0 and {MAX_LINGER_S:g} s, got {linger_s:g}")
    return float(linger_s)


Headers = Mapping[str, bytes] | None


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


T = TypeVar("T")


def record_bytes(
    values: Sequence[bytes],
    keys: Sequence[bytes | None] | None,
    headers: Sequence[Headers] | None,
) -> int:
    """The size of records as the batch bound counts it."""
    size = sum(len(v) for v in values) + RECORD_OVERHEAD_BYTES * len(values)
    if keys is not None:
        size += sum(len(k) for k in keys if k is not None)
    if headers is not None:
        size += sum(len(n) + len(v) for h in headers if h for n, v in h.items())
    return size


class QueuedBatch(Generic[T]):
    """Records of produce calls merged in call order, waiting to be sent;
    `outcome` is what the client's shell waits on (a future, for asyncio)."""

    __slots__ = ("alone", "headers", "keys", "outcome", "size", "values")

    def __init__(self, outcome: T, alone: object = None) -> None:
        self.outcome = outcome
        self.alone = alone
        """Set for a call that goes alone (nothing joins it): how the shell sends it."""
        self.values: list[bytes] = []
        self.keys: list[bytes | None] | None = None
        self.headers: list[Headers] | None = None
        self.size = 0

    def add(
        self,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None,
        headers: Sequence[Headers] | None,
        size: int,
    ) -> int:
        """Append a call's records; the position of its first in the batch."""
        position = len(self.values)
        if keys is not None and self.keys is None:
            self.keys = [None] * position
        if self.keys is not None:
            self.keys.extend(keys if keys is not None else [None] * len(values))
        if headers is not None and self.headers is None:
            self.headers = [None] * position
        if self.headers is not None:
            self.headers.extend(headers if headers is not None else [None] * len(values))
        self.values.extend(values)
        self.size += size
        return position


class BatchQueue(Generic[T]):
    """A partition's produce calls waiting for room in its window, merged into
    `QueuedBatch`es in call order (see the module docstring). I/O-free: the
    shell makes each batch's `outcome` with `new_outcome` and sends the
    batches `take` gives it."""

    def __init__(
        self,
        new_outcome: Callable[[], T],
        max_records: int = BATCH_MAX_RECORDS,
        max_bytes: int = BATCH_MAX_BYTES,
    ) -> None:
        self._new_outcome = new_outcome
        self.max_records = max_records
        self.max_bytes = max_bytes
        self._batches: deque[QueuedBatch[T]] = deque()

    def __len__(self) -> int:
        """The batches waiting."""
        return len(self._batches)

    def add(
        self,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Headers] | None = None,
        alone: object = None,
    ) -> tuple[QueuedBatch[T], int]:
        """Queue a call's records behind those already waiting: (the batch they
        joined, the position of the first of them in it). With `alone` (kept
        as the batch's `alone`) the call gets a batch nothing else joins."""
        size = record_bytes(values, keys, headers)
        last = self._batches[-1] if self._batches else None
        if alone is not None:
            last = QueuedBatch(self._new_outcome(), alone)
            self._batches.append(last)
        elif (
            last is None
            or last.alone is not None
            or len(last.values) + len(values) > self.max_records
            or last.size + size > self.max_bytes
        ):
            last = QueuedBatch(self._new_outcome())
            self._batches.append(last)
        return last, last.add(values, keys, headers, size)

    def take(self) -> QueuedBatch[T]:
        """The oldest batch, to be sent now (nothing joins it any more)."""
        return self._batches.popleft()


SendBatch = Callable[
    [Key, Sequence[bytes], Sequence[bytes | None] | None, Sequence[Headers] | None],
    Awaitable[int],
]
"""Sends one batch under the client's own producer: the index of its first record."""

SendAlone = Callable[[], Awaitable[int]]
"""Sends one call under a producer its caller named (never merged)."""


class _AsyncPartition:
    __slots__ = ("due", "queue", "window")

    def __init__(self, limit: int) -> None:
        self.window = SequenceWindow(limit)
        self.due: asyncio.TimerHandle | asyncio.Handle | None = None
        """The pump scheduled (for the end of this loop pass, or the linger's end)."""
        self.queue: BatchQueue[asyncio.Future[int]] = BatchQueue(
            asyncio.get_running_loop().create_future
        )


class AsyncProducer:
    """The asyncio client's idempotent produce: a partition's window, and the
    calls waiting for it merged into batches (see the module docstring)."""

    def __init__(
        self, send: SendBatch, limit: int = PRODUCER_WINDOW, linger_s: float = 0.0
    ) -> None:
        self._send = send
        self.limit = limit
        self.linger_s = check_linger(linger_s)
        self._partitions: dict[Key, _AsyncPartition] = {}
        self._sending: dict[asyncio.Task[None], asyncio.Future[int]] = {}
        """Queued batches being sent, and their outcomes."""
        self._closed = False

    async def produce(
        self,
        key: Key,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Headers] | None = None,
        alone: SendAlone | None = None,
    ) -> int:
        """Append a call's records, merged with the calls made in the same loop
        pass (or within `linger_s`) or while the window is full (unless it must
        go `alone`): the index of its first."""
        if alone is None:
            check_records(values, keys, headers)  # one call's mistake is its own
        part = self._partitions.get(key)
        if part is None:
            part = self._partitions[key] = _AsyncPartition(self.limit)
        batch, offset = part.queue.add(values, keys, headers, alone)
        if part.window.has_room:
            loop = asyncio.get_running_loop()
            if (
                not self.linger_s
                or alone is not None
                or len(part.queue) > 1
                or batch.size >= LINGER_FULL_BYTES
            ):
                # Now, at the end of this pass: no linger, or a batch is full.
                if isinstance(part.due, asyncio.TimerHandle):
                    part.due.cancel()
                    part.due = None
                if part.due is None:
                    part.due = loop.call_soon(self._pump_due, key, part)
            elif part.due is None:
                part.due = loop.call_later(self.linger_s, self._pump_due, key, part)
        # Shielded: a caller that gives up leaves the batch to the others in it.
        return await asyncio.shield(batch.outcome) + offset

    async def close(self) -> None:
        """Stop sending queued batches (their callers get `CancelledError`)."""
        self._closed = True
        for part in self._partitions.values():
            if part.due is not None:
                part.due.cancel()
            while part.queue:
                part.queue.take().outcome.cancel()
        sending = list(self._sending.items())
        for task, outcome in sending:
            task.cancel()
            outcome.cancel()  # a task cancelled before it ran never settles it
        await asyncio.gather(*(task for task, _ in sending), return_exceptions=True)

    def queued(self, key: Key) -> int:
        """The batches of `key` waiting for room in its window."""
        part = self._partitions.get(key)
        return len(part.queue) if part is not None else 0

    def _answered(self, key: Key, part: _AsyncPartition, position: int) -> None:
        """A batch got its final answer: send what waits (unless it lingers)."""
        part.window.answered(position)
        if not isinstance(part.due, asyncio.TimerHandle):
            self._pump(key, part)

    def _pump_due(self, key: Key, part: _AsyncPartition) -> None:
        part.due = None
        self._pump(key, part)

    def _pump(self, key: Key, part: _AsyncPartition) -> None:
        """Send queued batches while there is room, each from a task of its own
        (tasks run in the order they are made: sequences follow the queue)."""
        while part.window.has_room and part.queue and not self._closed:
            batch = part.queue.take()
            task = asyncio.get_running_loop().create_task(
                self._send_queued(key, part, batch, part.window.sent())
            )
            self._sending[task] = batch.outcome
            task.add_done_callback(self._sending.pop)

    async def _send_queued(
        self,
        key: Key,
        part: _AsyncPartition,
        batch: QueuedBatch[asyncio.Future[int]],
        position: int,
    ) -> None:
        outcome = batch.outcome
        alone: SendAlone | None = batch.alone  # type: ignore[assignment]
        try:  # the send takes its sequence before it first yields
            if alone is not None:
                first = await alone()
            else:
                first = await self._send(key, batch.values, batch.keys, batch.headers)
        except asyncio.CancelledError:
            outcome.cancel()
            raise
        except Exception as exc:  # every call in the batch gets it
            if not outcome.done():
                outcome.set_exception(exc)
                outcome.exception()  # retrieved here: its callers may all have gone
        else:
            if not outcome.done():
                outcome.set_result(first)
        finally:
            self._answered(key, part, position)


class Produced(Protocol):
    """A produce the blocking client sent (its `Pending`, or a call's share of
    a merged batch): `result()` is the index of the call's first record."""

    @property
    def done(self) -> bool:
        """Whether the final answer is in (a result or a failure for good)."""

    def settle(self) -> None:
        """Wait for the final answer (kept for `result()`), raising nothing."""

    def result(self) -> int:
        """The index of the call's first record, or the produce's error."""


SendNow = Callable[
    [Key, Sequence[bytes], Sequence[bytes | None] | None, Sequence[Headers] | None], Produced
]
"""Sends one batch under the client's own producer of a partition now (never
raises: a failure is the `Produced`'s to report)."""


class _Share:
    """A call's records in a merged batch: the batch's answer, moved to them."""

    __slots__ = ("_batch", "_offset")

    def __init__(self, batch: Produced, offset: int) -> None:
        self._batch, self._offset = batch, offset

    @property
    def done(self) -> bool:
        return self._batch.done

    def settle(self) -> None:
        self._batch.settle()

    def result(self) -> int:
        return self._batch.result() + self._offset


class _Slot:
    """Where a queued batch's `Produced` goes once a thread sends it."""

    __slots__ = ("sent",)

    def __init__(self) -> None:
        self.sent: Produced | None = None


class BlockingProducer:
    """The blocking client's idempotent produce: a partition's window, and the
    calls of other threads arriving while it is full merged into batches.

    A produce returns once its records are sent (alone, or in a batch another
    thread sent): its callers may never wait for a pending produce (or wait in
    another order), so a produce without room settles the oldest unanswered
    one itself, its outcome kept for its own `result()`; while it waits,
    without the partition's lock, other threads' calls queue and merge.
    Batches are sent under the lock, in queue order, so sequences keep it."""

    def __init__(self, send: SendNow, limit: int = PRODUCER_WINDOW) -> None:
        self._send = send
        self.limit = limit
        self._lock = threading.Lock()
        self._partitions: dict[Key, _BlockingPartition] = {}

    def produce(
        self,
        key: Key,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Headers] | None = None,
        alone: Callable[[], Produced] | None = None,
    ) -> Produced:
        """Send a call's records once `key`'s window has room (see the class);
        one that must go `alone` (under its caller's producer) is not merged."""
        if alone is None:
            check_records(values, keys, headers)  # one call's mistake is its own
        with self._lock:
            part = self._partitions.get(key)
            if part is None:
                part = self._partitions[key] = _BlockingPartition(self.limit)
        with part.ready:
            part.answer_done()
            if part.window.has_room and not part.queue:
                return part.send(alone or functools.partial(self._send, key, values, keys, headers))
            batch, offset = part.queue.add(values, keys, headers, alone)
            slot = batch.outcome
            while slot.sent is None:
                part.answer_done()
                if part.window.has_room:  # send what waits, in order, ours included
                    queued = part.queue.take()
                    queued.outcome.sent = part.send(
                        queued.alone  # type: ignore[arg-type]
                        or functools.partial(
                            self._send, key, queued.values, queued.keys, queued.headers
                        )
                    )
                    part.ready.notify_all()
                elif part.settling:
                    part.ready.wait()  # another thread waits for the oldest answer
                else:
                    part.settle_oldest()
            return slot.sent if offset == 0 else _Share(slot.sent, offset)


class _BlockingPartition:
    __slots__ = ("pending", "queue", "ready", "settling", "window")

    def __init__(self, limit: int) -> None:
        self.ready = threading.Condition()
        self.window = SequenceWindow(limit)
        self.queue: BatchQueue[_Slot] = BatchQueue(_Slot)
        self.pending: dict[int, Produced] = {}
        self.settling = False

    def send(self, send: Callable[[], Produced]) -> Produced:
        """Send a batch (holding `ready`): it takes the window's next place."""
        position = self.window.sent()
        try:
            sent = send()
        except BaseException:
            self.window.answered(position)
            raise
        self.pending[position] = sent
        return sent

    def answer_done(self) -> None:
        """Free the places of the oldest batches already answered (holding `ready`)."""
        while (oldest := self.window.oldest) is not None and self.pending[oldest].done:
            del self.pending[oldest]
            self.window.answered(oldest)

    def settle_oldest(self) -> None:
        """Wait for the oldest batch's answer, letting other threads queue meanwhile."""
        oldest = self.window.oldest
        assert oldest is not None  # no room: something is outstanding
        pending = self.pending[oldest]
        self.settling = True
        self.ready.release()
        try:
            pending.settle()
        finally:
            self.ready.acquire()
            self.settling = False
            self.ready.notify_all()
