"""Group commit: concurrent appends share one write and one sync per flush.

Theory of operation. `place()` is synchronous: it gives the batch its indices,
adds its index entries to the segment's in-memory index and its values to the
open `PendingFlush`, and returns a future. A flusher task takes the open
flush, reserves disk space, and starts a commit: one `writev` of the store and
one of the index, each followed by fdatasync under policy "always" (then one
`write_durably` of the backend, which may chain all four in the kernel).
While that runs, new appends gather in the next flush, so the more
appenders wait on a sync, the more records each sync carries.

Up to `max_flushes_in_flight` commits run at once, but they are *released*
(made readable, acknowledged) strictly in order: each commit awaits its
predecessor before releasing. A record is thus never acknowledged while an
earlier one could still be lost. An interval sync ("interval") runs beside the
commits, never in their way: it syncs what was released when it started and
then marks it DURABLE; `drain()` waits for it too, so nothing closes a file
under it.

Any write or sync error fails that flush, every later one, and every future
append (`LogFailed`): after a failed fdatasync the page cache may no longer hold
what the disk lacks, so only reopening (recovery from the disk) is safe. A
commit whose store write fails still waits for its index write, so no
operation outlives the log on a closed (and perhaps reused) descriptor.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from .config import LogConfig
from .errors import LogFailed
from .index import ENTRY_BYTES, FLUSH_END, HEADER_BYTES, SYNCED, set_marks
from .segment import Segment
from .storage import DurableWrite, StorageBackend

# Preallocation starts at one block and doubles while a partition keeps filling
# its reservation quickly, up to the configured step (see `Reservation`).
MIN_PREALLOCATE_BYTES = 4 << 10
FAST_REFILL_S = 1.0


class PendingFlush:
    """Appends placed for one segment that will reach the disk together."""

    __slots__ = (
        "end_index",
        "finished",
        "first_index",
        "index_offset",
        "segment",
        "store_end",
        "store_offset",
        "values",
        "waiters",
    )

    def __init__(self, segment: Segment, loop: asyncio.AbstractEventLoop) -> None:
        self.segment = segment
        self.first_index = segment.placed_end_index
        self.end_index = self.first_index
        self.store_offset = segment.store_end
        self.store_end = self.store_offset
        self.index_offset = HEADER_BYTES + segment.placed_entries * ENTRY_BYTES
        self.values: list[bytes] = []
        self.waiters: list[asyncio.Future[None]] = []
        self.finished: asyncio.Future[None] = loop.create_future()

    def index_bytes(self) -> bytes:
        end = HEADER_BYTES + (self.end_index - self.segment.base_index) * ENTRY_BYTES
        return bytes(self.segment.index_buf[self.index_offset : end])

    def resolve(self, error: BaseException | None) -> None:
        for waiter in self.waiters:
            if waiter.done():
                continue  # the appender was cancelled; its records are written anyway
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)
        self.finished.set_result(None)


class Reservation:
    """How far ahead to preallocate a partition's files.

    Every open partition reserving the full configured step would cost 10,000
    idle partitions 40 GB; so the step starts at `MIN_PREALLOCATE_BYTES` (one
    block) and doubles each time the previous reservation was used up within
    `FAST_REFILL_S` (a busy partition: 4 KiB to 4 MiB in ten steps), halving
    again when it was not.
    """

    def __init__(self, step_max: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.step_max = step_max
        self.step = min(step_max, MIN_PREALLOCATE_BYTES)
        self._clock = clock
        self._last = -FAST_REFILL_S

    def next_step(self) -> int:
        now = self._clock()
        if now - self._last < FAST_REFILL_S:
            self.step = min(self.step_max, self.step * 2)
        else:
            self.step = max(min(self.step_max, MIN_PREALLOCATE_BYTES), self.step // 2)
        self._last = now
        return self.step


class FlushPipeline:
    """Places appends into flushes and commits them in order."""

    def __init__(
        self,
        config: LogConfig,
        backend: StorageBackend,
        on_release: Callable[[PendingFlush], None],
    ) -> None:
        self._config = config
        self._backend = backend
        self._sync = config.flush == "always"
        self._flags = SYNCED if self._sync else 0
        self._on_release = on_release
        self._loop = asyncio.get_running_loop()
        self._open: PendingFlush | None = None
        self._last: PendingFlush | None = None
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(config.max_flushes_in_flight)
        self._tail: asyncio.Future[None] | None = None  # the last commit
        self._syncing: asyncio.Task[None] | None = None
        self._stopping = False
        self._released: tuple[Segment, int] | None = None  # last released (segment, entries)
        self._synced: tuple[Segment, int] | None = None
        self._reservation = Reservation(config.preallocate_bytes)
        self.failure: BaseException | None = None
        self.flushes = 0
        self._task = self._loop.create_task(self._run(), name="laminar-log-flusher")

    # -- appending -------------------------------------------------------

    def place(
        self, segment: Segment, values: Sequence[bytes], term: int, timestamp_ms: int
    ) -> asyncio.Future[None]:
        """Place `values` into the open flush; the future resolves once released."""
        flush = self._open
        if flush is None or flush.segment is not segment:
            flush = self._open = self._last = PendingFlush(segment, self._loop)
        segment.place(values, term, timestamp_ms, self._flags)
        flush.values.extend(values)
        flush.end_index = segment.placed_end_index
        flush.store_end = segment.store_end
        waiter = self._loop.create_future()
        flush.waiters.append(waiter)
        self._wake.set()
        return waiter

    async def drain(self) -> None:
        """Wait until everything placed so far is released (or has failed), and
        every sync started so far has finished."""
        if self._last is not None:
            self._wake.set()
            await asyncio.shield(self._last.finished)
        if self._tail is not None:
            await asyncio.shield(self._tail)
        if self._syncing is not None:
            await asyncio.shield(self._syncing)

    async def stop(self) -> None:
        """Drain, then end the flusher task."""
        await self.drain()
        self._stopping = True
        self._wake.set()
        await self._task

    def start_sync(self) -> None:
        """Start syncing what was released since the last sync, in the background,
        unless a sync is running (policy "interval"). A failure fails the log."""
        if self._syncing is not None and not self._syncing.done():
            return
        if self.failure is None and self._released != self._synced:
            self._syncing = self._loop.create_task(self._sync_released())

    # -- the flusher -------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await self._slots.acquire()
            while self._open is None and not self._stopping:
                self._wake.clear()
                await self._wake.wait()
            flush, self._open = self._open, None
            if flush is None:
                break
            segment = flush.segment
            set_marks(segment.index_buf, flush.end_index - 1 - segment.base_index, FLUSH_END)
            try:
                await self._reserve(flush)
            except Exception as exc:
                self.fail(exc)
            self._tail = self._loop.create_task(self._commit(flush, self._tail))
        if self._tail is not None:
            await self._tail

    async def _reserve(self, flush: PendingFlush) -> None:
        """Grow the files in preallocation steps before the write needs the room."""
        if not self._config.preallocate_bytes or self.failure is not None:
            return
        segment = flush.segment
        if flush.store_end > segment.store.size:
            step = self._reservation.next_step()
            await segment.store.allocate(_round_up(flush.store_end, step))
        index_end = HEADER_BYTES + (flush.end_index - segment.base_index) * ENTRY_BYTES
        if index_end > segment.index.size:
            step = max(4096, self._reservation.step // 16)
            await segment.index.allocate(_round_up(index_end, step))

    async def _commit(self, flush: PendingFlush, previous: asyncio.Future[None] | None) -> None:
        error: BaseException | None = None
        if self.failure is None:
            error = await _write_flush(flush, self._backend if self._sync else None)
        if previous is not None:
            await previous  # release in order; jobs never raise
        if error is not None:
            self.fail(error)
        if self.failure is not None:
            flush.resolve(self.failure)
        else:
            self.flushes += 1
            entries = flush.end_index - flush.segment.base_index
            flush.segment.release(entries, flush.store_end)
            self._released = (flush.segment, entries)
            self._on_release(flush)
            flush.resolve(None)
        self._slots.release()

    async def _sync_released(self) -> None:
        released = self._released
        if self.failure is not None or released is None or released == self._synced:
            return
        if released[0].closed:  # removed by a truncation or reset since
            return
        try:
            await released[0].sync_and_mark_durable()
        except Exception as exc:
            self.fail(exc)
            return
        self._synced = released

    def fail(self, exc: BaseException) -> BaseException:
        """Fail the log with `exc` as the cause (the first failure wins); return it."""
        if self.failure is None:
            failure = LogFailed(
                f"a storage write or sync failed ({exc}); appends are refused until the "
                "log is reopened, which recovers what is on disk"
            )
            failure.__cause__ = exc
            self.failure = failure
        if self._open is not None:
            # Placed after the failing flush: their indices can never be released.
            flush, self._open = self._open, None
            flush.resolve(self.failure)
        return self.failure


async def _write_flush(flush: PendingFlush, durably: StorageBackend | None) -> BaseException | None:
    """Write a flush's store and index bytes at once (through `durably`'s
    `write_durably` when they must be synced); the first error.

    Waits for both writes even when one fails: none may outlive the log."""
    segment = flush.segment
    store = DurableWrite(segment.store, flush.values, flush.store_offset)
    index = DurableWrite(segment.index, [flush.index_bytes()], flush.index_offset)
    if durably is not None:
        try:
            await durably.write_durably((store, index))
        except Exception as exc:
            return exc
        return None
    results = await asyncio.gather(
        *(w.file.writev(w.buffers, w.offset, sync=False) for w in (store, index)),
        return_exceptions=True,
    )
    return next((r for r in results if isinstance(r, BaseException)), None)


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step
