"""SegmentedLog: an append-only sequence of records split into segments.

Records are addressed by index, from `lowest_index` (inclusive) to
`highest_index` (exclusive). The last segment takes appends; the others are
sealed and read-only. Appends go through group commit (`commit.py`); truncate,
rollover, retention and close take the log's structure lock and first drain
what is in flight, so they never race a flush. Recovery on open is
`recovery.py`.

Failures are loud and final: a failed write or sync (or a truncation that
could not finish) fails the log (`LogFailed`) until it is reopened; close then
cuts the files back to what was released, and reopening recovers from what is
really on disk (never from the page cache a failed fsync left behind).

Readable means released: under flush="always" a record becomes readable only
once it is durable, so a reader never sees a record a crash could take back.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import os
import time
from collections.abc import Callable, Sequence

from .commit import FlushPipeline, PendingFlush
from .config import LogConfig
from .errors import AppendTooLarge, IndexOutOfRange, LogClosed
from .record import LogBatch, LogRecord
from .recovery import recover_segments
from .segment import Segment
from .storage import StorageBackend, SyscallBackend, make_dir_durable

log = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class SegmentedLog:
    """A durable log of records. Create with `await SegmentedLog.open(...)`."""

    def __init__(
        self,
        directory: str,
        config: LogConfig,
        backend: StorageBackend,
        segments: list[Segment],
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.directory = directory
        self.config = config
        self._backend = backend
        self._segments = segments
        self._bases = [s.base_index for s in segments]
        self._clock_ms = clock_ms
        self._lock = asyncio.Lock()
        self._closed = False
        self._last_timestamp_ms = self._tail_timestamp_ms()
        self._append_waiters: dict[asyncio.Future[None], None] = {}
        self._relaxed = config.flush != "always"
        self._pipeline = FlushPipeline(config, backend, self._released)
        self._interval_task = (
            asyncio.get_running_loop().create_task(self._sync_every_interval())
            if config.flush == "interval"
            else None
        )

    @classmethod
    async def open(
        cls,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        backend: StorageBackend | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> SegmentedLog:
        """Open (or create) the log in `directory`, recovering from any crash.

        `clock_ms` stamps appends and judges retention by age (tests inject one).
        """
        path = os.fspath(directory)
        config = config or LogConfig()
        backend = backend or SyscallBackend()
        await make_dir_durable(backend, path)
        segments = await recover_segments(backend, path)
        if not segments:
            segments = [await Segment.create(backend, path, 0)]
        return cls(path, config, backend, segments, clock_ms)

    # -- properties ------------------------------------------------------------

    @property
    def backend(self) -> StorageBackend:
        """The storage seam this log's files go through (its neighbours' too:
        the Raft state file next to the segments)."""
        return self._backend

    @property
    def lowest_index(self) -> int:
        """The first index still held (retention and truncation move it)."""
        return self._segments[0].base_index

    @property
    def highest_index(self) -> int:
        """One past the last readable record: the next index to be released."""
        return self._segments[-1].end_index

    @property
    def size_bytes(self) -> int:
        """Payload bytes held, over all segments."""
        return sum(s.store_bytes for s in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def failure(self) -> BaseException | None:
        """Why the log failed (`LogFailed`), or None. A failed log refuses appends
        until it is closed and opened again, which recovers from the disk."""
        return self._pipeline.failure

    @property
    def flush_count(self) -> int:
        """Group-commit flushes released since open (a measure of coalescing)."""
        return self._pipeline.flushes

    # -- appending -------------------------------------------------------------

    async def append(
        self, values: Sequence[bytes], term: int = 0, timestamp_ms: int | None = None
    ) -> int:
        """Append a batch; return the index of its first record.

        Under flush="always" the records are durable when this returns.
        Cancelling the call does not withdraw the records. `timestamp_ms`
        (a Raft follower storing its leader's) replaces the clock; either way
        the batch gets at least the last batch's timestamp.
        """
        first, _ = await self.append_stamped(values, term, timestamp_ms)
        return first

    async def append_stamped(
        self, values: Sequence[bytes], term: int = 0, timestamp_ms: int | None = None
    ) -> tuple[int, int]:
        """`append`, returning (first index, the timestamp_ms the batch was given)."""
        values, size = self._checked_batch(values)
        async with self._lock:
            self._check_appendable()
            segment = self._segments[-1]
            if self._rollover_due(segment, size):
                segment = await self._roll_over()
            first, timestamp_ms, done = self._place(segment, values, term, timestamp_ms)
        await done
        return first, timestamp_ms

    def place_nowait(
        self, values: Sequence[bytes], term: int = 0, timestamp_ms: int | None = None
    ) -> tuple[int, int, asyncio.Future[None]] | None:
        """`append_stamped` without the wait, when placing needs none: (first
        index, timestamp_ms, a future resolved once the batch is released).
        None when it would have to wait (the structure lock is held or wanted,
        or a rollover is due): call `append_stamped` then. Raises what
        `append_stamped` raises. Batches placed either way keep their order."""
        values, size = self._checked_batch(values)
        lock = self._lock
        if lock.locked() or lock._waiters:
            return None
        self._check_appendable()
        segment = self._segments[-1]
        if self._rollover_due(segment, size):
            return None
        return self._place(segment, values, term, timestamp_ms)

    def _checked_batch(self, values: Sequence[bytes]) -> tuple[list[bytes], int]:
        if not values:
            raise ValueError("append needs at least one record")
        batch = [v if type(v) is bytes else bytes(v) for v in values]
        size = sum(map(len, batch))
        threshold = self.config.append_threshold_bytes
        if size > threshold:
            raise AppendTooLarge(
                f"a batch of {size} bytes exceeds the append threshold of {threshold} bytes "
                f"(segment_bytes + overflow_bytes); split it into smaller batches"
            )
        return batch, size

    def _rollover_due(self, segment: Segment, size: int) -> bool:
        used = segment.store_end
        return used >= self.config.segment_bytes or bool(
            used and used + size > self.config.append_threshold_bytes
        )

    @property
    def last_timestamp_ms(self) -> int:
        """The timestamp of the last record placed (0 for an empty log)."""
        return self._last_timestamp_ms

    def _place(
        self, segment: Segment, values: list[bytes], term: int, timestamp_ms: int | None = None
    ) -> tuple[int, int, asyncio.Future[None]]:
        if timestamp_ms is None:
            timestamp_ms = self._clock_ms()
        timestamp_ms = max(timestamp_ms, self._last_timestamp_ms)
        self._last_timestamp_ms = timestamp_ms
        first = segment.placed_end_index
        return first, timestamp_ms, self._pipeline.place(segment, values, term, timestamp_ms)

    def _check_appendable(self) -> None:
        self._check_open()
        if self._pipeline.failure is not None:
            raise self._pipeline.failure

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosed(f"the log in {self.directory} is closed")

    async def _roll_over(self) -> Segment:
        """Seal the write segment and start a new one. Caller holds the lock.

        Recovery trusts a segment followed by another to be durable whole, so
        the old one's flushes are drained first (under "always" that makes them
        durable) and synced by the seal otherwise, before the new files exist.
        `Segment.create` makes the new files and their directory entries
        durable before anything is appended to them.
        """
        await self._pipeline.drain()
        self._check_appendable()
        old = self._segments[-1]
        try:
            await old.seal(sync=self._relaxed)
            new = await Segment.create(self._backend, self.directory, old.end_index)
        except Exception as exc:
            raise self._pipeline.fail(exc) from exc
        self._segments.append(new)
        self._bases.append(new.base_index)
        config = self.config
        if config.retention_bytes is not None or config.retention_ms is not None:
            await self._remove_expired(
                self._clock_ms(), config.retention_bytes, config.retention_ms
            )
        return new

    def _released(self, flush: PendingFlush) -> None:
        waiters, self._append_waiters = self._append_waiters, {}
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_for_append(self, index: int, timeout: float | None = None) -> bool:
        """Wait until `index` is readable (True) or `timeout` seconds pass (False).

        This is what long-polling readers use instead of polling.
        """
        while index >= self.highest_index:
            self._check_open()
            waiter = asyncio.get_running_loop().create_future()
            self._append_waiters[waiter] = None
            try:
                await asyncio.wait_for(waiter, timeout)
            except TimeoutError:
                return index < self.highest_index
            finally:  # a reader that timed out or was cancelled leaves nothing behind
                self._append_waiters.pop(waiter, None)
        return True

    @property
    def waiting_readers(self) -> int:
        """Readers waiting in `wait_for_append` now."""
        return len(self._append_waiters)

    # -- reading ---------------------------------------------------------------

    def _segment_for(self, index: int) -> Segment:
        self._check_open()
        if not self.lowest_index <= index < self.highest_index:
            raise IndexOutOfRange(
                f"index {index} is outside the log: it holds [{self.lowest_index}, "
                f"{self.highest_index})"
            )
        return self._segments[bisect.bisect_right(self._bases, index) - 1]

    async def read(self, index: int) -> LogRecord:
        """The record at `index`. Raises IndexOutOfRange or RecordCorrupted."""
        return await self._segment_for(index).read(index)

    async def read_range(
        self, start: int, max_bytes: int = 1 << 20, max_records: int | None = None
    ) -> list[LogRecord]:
        """Records from `start` on, up to `max_bytes` of values and `max_records`.

        At least one record comes back if `start < highest_index`, however large,
        so a reader always makes progress. `start == highest_index` gives [].
        """
        self._check_open()
        if max_bytes < 1 or (max_records is not None and max_records < 1):
            raise ValueError("max_bytes and max_records must be positive")
        if start == self.highest_index:
            return []
        self._segment_for(start)  # raises IndexOutOfRange for a start outside the log
        remaining = max_records if max_records is not None else 1 << 62
        records: list[LogRecord] = []
        index = start
        budget = max_bytes
        while remaining and index < self.highest_index:
            segment = self._segment_for(index)
            chunk = await segment.read_range(index, budget, remaining, at_least_one=not records)
            if not chunk:
                break
            records += chunk
            budget -= sum([len(r.value) for r in chunk])
            remaining -= len(chunk)
            index = chunk[-1].index + 1
            if index < segment.end_index or budget < 0:
                break  # a limit or a damaged record stopped it (or one oversized record)
        return records

    async def read_batch(
        self, start: int, max_bytes: int = 1 << 20, max_records: int | None = None
    ) -> LogBatch:
        """Records from `start` on as one `LogBatch`: values back to back as
        stored, metadata in columns, checksums verified. The cheap way to serve
        a fetch. Stops at the end of `start`'s segment; like `read_range` it
        returns at least one record if `start < highest_index`, and an empty
        batch at `highest_index`."""
        self._check_open()
        if max_bytes < 1 or (max_records is not None and max_records < 1):
            raise ValueError("max_bytes and max_records must be positive")
        if start == self.highest_index:
            return LogBatch(start, (), (), (), b"")
        segment = self._segment_for(start)
        return await segment.read_batch(start, max_bytes, max_records or 1 << 62)

    def read_batch_nowait(
        self, start: int, max_bytes: int = 1 << 20, max_records: int | None = None
    ) -> LogBatch | None:
        """`read_batch` without waiting: the same batch, verified the same way,
        when its bytes are in the page cache; None when `read_batch` has to read
        from the device or has an error to raise (it then serves the request).
        Lets a server answer a fetch of recent records without a task."""
        if self._closed or max_bytes < 1 or (max_records is not None and max_records < 1):
            return None
        if not self.lowest_index <= start <= self.highest_index:
            return None
        if start == self.highest_index:
            return LogBatch(start, (), (), (), b"")
        segment = self._segment_for(start)
        return segment.read_batch_nowait(start, max_bytes, max_records or 1 << 62)

    def term_of(self, index: int) -> int:
        """The term stored with record `index`, from the in-memory index (no I/O):
        Raft reads terms synchronously. Raises IndexOutOfRange."""
        return self._segment_for(index).term_of(index)

    def count_top_bit_terms(self, start: int, end: int) -> int:
        """How many records in [start, end) (within the log) have the top bit
        of their term set, from the in-memory index (no I/O)."""
        self._check_open()
        count = 0
        first = max(bisect.bisect_right(self._bases, start) - 1, 0)
        for segment in self._segments[first:]:
            if segment.base_index >= end:
                break
            lo, hi = max(start, segment.base_index), min(end, segment.end_index)
            if lo < hi:
                count += segment.count_top_bit_terms(lo, hi)
        return count

    async def index_for_timestamp(self, timestamp_ms: int) -> int:
        """The first index whose record was appended at or after `timestamp_ms`
        (`highest_index` if none was)."""
        self._check_open()
        for segment in self._segments:
            if segment.entries and segment.timestamp_of(segment.end_index - 1) >= timestamp_ms:
                return segment.first_index_at_or_after(timestamp_ms)
        return self.highest_index

    # -- changing the structure ------------------------------------------------

    async def truncate(self, index: int) -> None:
        """Remove the record at `index` and every record after it, durably.

        Whole segments after the cut go first, newest first, each removal made
        durable before the next (so a power cut leaves a prefix of the log,
        never a gap); then the segment holding the cut is cut (see
        `Segment.truncate_to`). If any step fails the log fails (`LogFailed`):
        appending after a half-done truncation would keep what was to go.
        """
        async with self._lock:
            self._check_appendable()
            await self._pipeline.drain()
            self._check_appendable()
            if not self.lowest_index <= index <= self.highest_index:
                raise IndexOutOfRange(
                    f"cannot truncate at {index}: the log holds [{self.lowest_index}, "
                    f"{self.highest_index})"
                )
            if index == self.highest_index:
                return
            try:
                while len(self._segments) > 1 and self._segments[-1].base_index >= index:
                    await self._remove_segment(len(self._segments) - 1)
                await self._segments[-1].truncate_to(index)
            except Exception as exc:
                self._pipeline.fail(exc)
                raise
            # A Raft follower truncates a leader's suffix and appends the next
            # leader's records with their own (possibly older) timestamps.
            self._last_timestamp_ms = self._tail_timestamp_ms()

    def _tail_timestamp_ms(self) -> int:
        """The last record's timestamp (timestamps never decrease along the log)."""
        return max(
            (s.timestamp_of(s.end_index - 1) for s in self._segments if s.entries), default=0
        )

    def reconfigure(self, config: LogConfig) -> None:
        """Take new segment and retention settings on a live log (a topic's config
        changed); they apply from the next append and retention pass. The flush
        settings must stay as they are."""
        old = self.config
        if (config.flush, config.flush_interval_ms, config.max_flushes_in_flight) != (
            old.flush,
            old.flush_interval_ms,
            old.max_flushes_in_flight,
        ):
            raise ValueError("a live log's flush settings cannot change; reopen it")
        self.config = config

    async def roll_over(self) -> bool:
        """Seal the write segment now and start a new one, if it holds any record
        (time-based rolling, so retention can remove what it held; a snapshot that
        must start a segment). Returns whether it rolled."""
        async with self._lock:
            self._check_appendable()
            if self._segments[-1].placed_end_index == self._segments[-1].base_index:
                return False
            await self._roll_over()
            return True

    @property
    def write_segment_base_index(self) -> int:
        """The first index of the segment being written."""
        return self._segments[-1].base_index

    @property
    def write_segment_first_timestamp_ms(self) -> int | None:
        """When the write segment's first record was appended (None: it is empty)."""
        segment = self._segments[-1]
        return segment.timestamp_of(segment.base_index) if segment.entries else None

    async def remove_before(self, index: int) -> int:
        """Remove the oldest segments that hold only records below `index` (a prefix
        the caller has compacted into a snapshot); return how many. The write
        segment is never removed."""
        async with self._lock:
            self._check_open()
            removed = 0
            while len(self._segments) > 1 and self._segments[0].end_index <= index:
                await self._remove_segment(0)
                removed += 1
            return removed

    async def reset(self, base_index: int) -> None:
        """Remove every record and continue, empty, at `base_index`, durably.

        A Raft replica that installs a leader's log starting past its own end
        needs its log to start there. A crash part-way leaves either a suffix
        of the old segments or an empty log; the caller repeats the reset."""
        if base_index < 0:
            raise ValueError("base_index must be >= 0")
        async with self._lock:
            self._check_appendable()
            await self._pipeline.drain()
            self._check_appendable()
            try:
                while self._segments:
                    await self._remove_segment(0)  # oldest first, each durable
                new = await Segment.create(self._backend, self.directory, base_index)
            except Exception as exc:
                raise self._pipeline.fail(exc) from exc
            self._segments = [new]
            self._bases = [base_index]

    async def apply_retention(self, now_ms: int | None = None) -> int:
        """Remove whole oldest segments past the retention limits; return how many.

        A removal that fails raises (`OSError`); the log stays consistent and
        usable, and the files left behind are cleaned up by the next open.
        """
        config = self.config
        removed, _ = await self.remove_expired(config.retention_bytes, config.retention_ms, now_ms)
        return removed

    async def remove_expired(
        self,
        retention_bytes: int | None,
        retention_ms: int | None,
        now_ms: int | None = None,
        keep_from: int | None = None,
    ) -> tuple[int, int]:
        """`apply_retention` with these limits instead of the config's, for an owner
        that keeps retention out of the log (on a timer of its own, never inside an
        append); returns (segments, bytes) removed. A segment holding a record
        at or after `keep_from` stays whatever the limits say (a Raft partition
        keeps what is not yet applied)."""
        async with self._lock:
            self._check_open()
            now = self._clock_ms() if now_ms is None else now_ms
            return await self._remove_expired(now, retention_bytes, retention_ms, keep_from)

    async def _remove_expired(
        self,
        now_ms: int,
        retention_bytes: int | None,
        retention_ms: int | None,
        keep_from: int | None = None,
    ) -> tuple[int, int]:
        removed = 0
        total = start = self.size_bytes
        while len(self._segments) > 1:
            oldest = self._segments[0]
            if keep_from is not None and oldest.end_index > keep_from:
                break
            too_big = retention_bytes is not None and total - oldest.store_bytes >= retention_bytes
            too_old = (
                retention_ms is not None
                and oldest.entries > 0
                and oldest.timestamp_of(oldest.end_index - 1) < now_ms - retention_ms
            )
            if not (too_big or too_old):
                break
            total -= oldest.store_bytes
            await self._remove_segment(0)
            removed += 1
        return removed, start - total

    async def _remove_segment(self, position: int) -> None:
        """Delete one segment's files and take it out of the chain, keeping the
        segment list and the base list in step whatever fails."""
        segment = self._segments[position]
        await segment.remove_index(self._backend)  # failure: nothing changed
        del self._segments[position]
        del self._bases[position]
        await segment.remove_store(self._backend)

    async def _sync_every_interval(self) -> None:
        """Policy "interval": every `flush_interval_ms`, start a background sync of
        what was released. No lock is held across the fsyncs (appends go on);
        a round is skipped while a structure change holds the lock, and every
        structure change drains a running sync first. A failed sync fails the log."""
        while not self._closed:
            await asyncio.sleep(self.config.flush_interval_ms / 1000)
            if not self._lock.locked():
                self._pipeline.start_sync()

    async def close(self) -> None:
        """Finish in-flight flushes, make everything durable, release the files."""
        async with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._interval_task is not None:
                self._interval_task.cancel()
            await self._pipeline.stop()
            for waiter in list(self._append_waiters):
                if not waiter.done():
                    waiter.set_exception(LogClosed(f"the log in {self.directory} was closed"))
            write_segment = self._segments[-1]
            try:
                if self._pipeline.failure is None:
                    await write_segment.seal(sync=False)
                    if self._relaxed:
                        await write_segment.sync_and_mark_durable()
                        await write_segment.index.sync()
                else:
                    # Drop what was never released, from the files too: after a
                    # failed fsync the page cache may show bytes the disk lost.
                    write_segment.drop_unreleased()
                    await write_segment.trim_files()
            finally:
                for segment in self._segments:
                    await segment.close()

    async def __aenter__(self) -> SegmentedLog:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
