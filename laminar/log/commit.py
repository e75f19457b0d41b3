"""Group commit: concurrent appends share one write and one sync per flush.

Theory of operation. `stage()` is synchronous: it gives the batch its indices,
adds its index entries to the segment's in-memory index and its values to the
open `PendingFlush`, and returns a future. A flusher task takes the open
flush, reserves disk space, and starts a commit: one `writev` of the store and
one of the index, each followed by fdatasync under policy "always" (backends
link the two). While that runs, new appends gather in the next flush, so the
more appenders wait on a sync, the more records each sync carries.

Up to `max_flushes_in_flight` commits run at once, but they are *published*
(made readable, acknowledged) strictly in order: each commit awaits its
predecessor before publishing. A record is thus never acknowledged while an
earlier one could still be lost.

Any write or sync error fails that flush, every later one, and every future
append (`LogFailed`): after a failed fdatasync the page cache may no longer hold
what the disk lacks, so only reopening (recovery from the disk) is safe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from .config import LogConfig
from .errors import LogFailed
from .index import ENTRY_BYTES, HEADER_BYTES, mark_flush_end
from .segment import Segment


class PendingFlush:
    """Appends staged for one segment that will reach the disk together."""

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
        self.first_index = segment.staged_end_index
        self.end_index = self.first_index
        self.store_offset = segment.store_end
        self.store_end = self.store_offset
        self.index_offset = HEADER_BYTES + segment.staged_entries * ENTRY_BYTES
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


class FlushPipeline:
    """Stages appends into flushes and commits them in order."""

    def __init__(self, config: LogConfig, on_publish: Callable[[PendingFlush], None]) -> None:
        self._config = config
        self._sync = config.flush == "always"
        self._on_publish = on_publish
        self._loop = asyncio.get_running_loop()
        self._open: PendingFlush | None = None
        self._last: PendingFlush | None = None
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(config.max_flushes_in_flight)
        self._tail: asyncio.Future[None] | None = None
        self._stopping = False
        self.failure: BaseException | None = None
        self.flushes = 0
        self._task = self._loop.create_task(self._run(), name="laminar-log-flusher")

    # -- appending -------------------------------------------------------

    def stage(
        self, segment: Segment, values: Sequence[bytes], term: int, timestamp_ms: int
    ) -> asyncio.Future[None]:
        """Stage `values` into the open flush; the future resolves once published."""
        flush = self._open
        if flush is None or flush.segment is not segment:
            flush = self._open = self._last = PendingFlush(segment, self._loop)
        segment.stage(values, term, timestamp_ms)
        flush.values.extend(values)
        flush.end_index = segment.staged_end_index
        flush.store_end = segment.store_end
        waiter = self._loop.create_future()
        flush.waiters.append(waiter)
        self._wake.set()
        return waiter

    async def drain(self) -> None:
        """Wait until everything staged so far is published (or has failed)."""
        if self._last is not None:
            self._wake.set()
            await asyncio.shield(self._last.finished)

    async def stop(self) -> None:
        """Drain, then end the flusher task."""
        await self.drain()
        self._stopping = True
        self._wake.set()
        await self._task

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
            mark_flush_end(segment.index_buf, flush.end_index - 1 - segment.base_index)
            try:
                await self._reserve(flush)
            except Exception as exc:
                self._fail(exc)
            self._tail = self._loop.create_task(self._commit(flush, self._tail))
        if self._tail is not None:
            await self._tail

    async def _reserve(self, flush: PendingFlush) -> None:
        """Grow the files in preallocation steps before the write needs the room."""
        step = self._config.preallocate_bytes
        if not step or self.failure is not None:
            return
        segment = flush.segment
        if flush.store_end > segment.store.size:
            await segment.store.allocate(_round_up(flush.store_end, step))
        index_end = HEADER_BYTES + (flush.end_index - segment.base_index) * ENTRY_BYTES
        if index_end > segment.index.size:
            await segment.index.allocate(_round_up(index_end, max(4096, step // 16)))

    async def _commit(self, flush: PendingFlush, previous: asyncio.Future[None] | None) -> None:
        error: BaseException | None = None
        try:
            if self.failure is None:
                segment = flush.segment
                await asyncio.gather(
                    segment.store.writev(flush.values, flush.store_offset, sync=self._sync),
                    segment.index.writev(
                        [flush.index_bytes()], flush.index_offset, sync=self._sync
                    ),
                )
        except Exception as exc:
            error = exc
        if previous is not None:
            await previous  # publish in order; commits never raise
        if error is not None:
            self._fail(error)
        if self.failure is not None:
            flush.resolve(self.failure)
        else:
            self.flushes += 1
            flush.segment.publish(flush.end_index - flush.segment.base_index, flush.store_end)
            self._on_publish(flush)
            flush.resolve(None)
        self._slots.release()

    def _fail(self, exc: BaseException) -> None:
        if self.failure is None:
            failure = LogFailed(
                f"a storage write or sync failed ({exc}); appends are refused until the "
                "log is reopened, which recovers what is on disk"
            )
            failure.__cause__ = exc
            self.failure = failure
        if self._open is not None:
            # Staged after the failing flush: their indices can never be published.
            flush, self._open = self._open, None
            flush.resolve(self.failure)


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step
