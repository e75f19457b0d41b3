"""A budget of open segment files shared by many logs: idle files are closed.

A node may hold tens of thousands of partitions, each with two open files per
segment; descriptors would run out long before memory does. A `FilePool`
keeps at most `open_files_max` files open and closes the least recently used
idle ones to make room. Everything else about a segment stays in memory (its
index, sizes, recovery's verdict), so a file closed by the pool is reopened
by path on its next use with no scan: only the descriptor comes and goes.

Rules (each one is what keeps the log's durability story unchanged):

- The pool sits behind the storage seam: `FilePool.backend(inner)` is a
  `StorageBackend` whose files are `PooledFile`s; every byte still goes
  through `inner`.
- A file in use (an operation under way: a write, its fdatasync, a read) is
  pinned and never closed.
- A file with writes no fdatasync has covered yet (a non-durable write, a
  truncate, an allocation) is never closed as it is: the pool syncs it first.
  That sync is an extra fdatasync, which can only make more data durable. If
  it fails, the file stays open and its owner's next sync (or durable write)
  raises the error, so a failed fsync is never swallowed by the pool.
- Room is made before a file is opened, so the count of open files exceeds
  the budget only while more files than that are pinned at once (operations
  in flight, which the node bounds by its connection and input limits); once
  they finish, the pool trims itself back in the background. A hard bound
  would make an operation wait for a descriptor while holding one (a flush
  writes its two files at once), which can deadlock.
- A read that would need to reopen a file cannot be served without waiting:
  `read_at_nowait` answers None (always correct) and `read_at` reopens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence

from .storage import (
    Buffer,
    DurableWrite,
    Storage,
    StorageBackend,
    WrappedBackend,
    write_each_durably,
)

log = logging.getLogger(__name__)


class FilePool:
    """At most `open_files_max` open files over every log that shares it."""

    def __init__(self, open_files_max: int) -> None:
        if open_files_max < 2:
            raise ValueError(f"open_files_max must be at least 2, got {open_files_max}")
        self.open_files_max = open_files_max
        self._open: OrderedDict[PooledFile, None] = OrderedDict()  # least recently used first
        self.reopens = 0
        """Files opened again after the pool had closed them."""
        self.evictions = 0
        """Files the pool closed to make room."""
        self.eviction_syncs = 0
        """Evictions that had to fdatasync first (the file had unsynced writes)."""
        self.open_files_peak = 0
        self._trimming: asyncio.Task[None] | None = None

    @property
    def open_files(self) -> int:
        return len(self._open)

    def backend(self, inner: StorageBackend) -> StorageBackend:
        """A backend over `inner` whose files this pool keeps within its budget."""
        return PooledBackend(inner, self)

    def stats(self) -> dict[str, int]:
        """Figures for /metrics."""
        return {
            "segment_files_open": len(self._open),
            "segment_files_open_max": self.open_files_max,
            "segment_files_open_peak": self.open_files_peak,
            "segment_file_reopens": self.reopens,
            "segment_file_evictions": self.evictions,
            "segment_file_eviction_syncs": self.eviction_syncs,
        }

    async def make_room(self) -> None:
        """Close idle files, least recently used first, until one more fits."""
        await self._shrink_to(self.open_files_max - 1)

    async def _shrink_to(self, count: int) -> None:
        for _ in range(len(self._open)):  # each try closes one or finds it busy
            if len(self._open) <= count:
                return
            victim = next((f for f in self._open if f.evictable), None)
            if victim is None:
                return  # everything is in use: over budget until some finishes
            await victim.evict()

    def released(self) -> None:
        """An operation finished: if a burst took the pool over budget, trim it
        back in the background."""
        if len(self._open) > self.open_files_max and self._trimming is None:
            self._trimming = asyncio.get_running_loop().create_task(self._trim())

    async def _trim(self) -> None:
        try:
            await self._shrink_to(self.open_files_max)
        finally:
            self._trimming = None

    def added(self, file: PooledFile) -> None:
        self._open[file] = None
        self.open_files_peak = max(self.open_files_peak, len(self._open))

    def touched(self, file: PooledFile) -> None:
        self._open.move_to_end(file)

    def removed(self, file: PooledFile) -> None:
        self._open.pop(file, None)


class PooledBackend(WrappedBackend):
    """A `StorageBackend` whose files are `PooledFile`s of one pool."""

    def __init__(self, inner: StorageBackend, pool: FilePool) -> None:
        super().__init__(inner)
        self._pool = pool

    async def open(self, path: str, *, create: bool) -> Storage:
        await self._pool.make_room()
        file = await self._inner.open(path, create=create)
        return PooledFile(self._pool, self._inner, path, file)

    async def write_durably(self, writes: Sequence[DurableWrite]) -> None:
        """The inner backend's durable write over the pooled files' open files,
        each pinned (and reopened if the pool had closed it) until it ends."""
        pooled = [w.file for w in writes if isinstance(w.file, PooledFile)]
        if len(pooled) < len(writes):
            await write_each_durably(writes)
            return
        pinned: list[tuple[PooledFile, Storage, int]] = []
        try:
            for owner in pooled:
                pinned.append((owner, *await owner.pin_for_durable_write()))
            await self._inner.write_durably(
                [
                    DurableWrite(file, w.buffers, w.offset)
                    for (_, file, _), w in zip(pinned, writes, strict=True)
                ]
            )
            for owner, _, covered in pinned:
                owner.covered(covered)
        finally:
            for owner, file, _ in pinned:
                owner._done(file)


class PooledFile:
    """A `Storage` whose descriptor the pool may close while it is idle."""

    __slots__ = (
        "_backend",
        "_closed",
        "_deferred",
        "_file",
        "_idle",
        "_path",
        "_pool",
        "_reopening",
        "_size",
        "_synced_writes",
        "_users",
        "_writes",
    )

    def __init__(self, pool: FilePool, backend: StorageBackend, path: str, file: Storage) -> None:
        self._pool = pool
        self._backend = backend
        self._path = path
        self._file: Storage | None = file
        self._size = file.size
        self._users = 0
        self._writes = 0  # changes made so far (writes, truncates, allocations)
        self._synced_writes = 0  # changes an fdatasync has covered
        self._reopening: asyncio.Future[None] | None = None
        self._deferred: OSError | None = None  # an eviction's failed sync, for the owner
        self._idle: asyncio.Future[None] | None = None  # a close waiting for operations
        self._closed = False
        pool.added(self)

    @property
    def size(self) -> int:
        return self._size

    @property
    def evictable(self) -> bool:
        """Idle, and not holding a failed sync its owner has yet to hear of."""
        return not self._users and self._deferred is None

    @property
    def dirty(self) -> bool:
        """Changes no fdatasync has covered yet: the pool must sync before closing."""
        return self._writes != self._synced_writes

    # -- pinning ---------------------------------------------------------------

    async def _use(self) -> Storage:
        """The open file, reopened if the pool closed it; pinned until `_done`."""
        self._users += 1
        try:
            while self._file is None:
                if self._closed:
                    raise ValueError(f"I/O operation on closed file {self._path}")
                if self._reopening is not None:
                    await asyncio.shield(self._reopening)
                    continue
                await self._reopen()
        except BaseException:
            self._users -= 1
            raise
        self._pool.touched(self)
        return self._file

    async def _reopen(self) -> None:
        waiters = self._reopening = asyncio.get_running_loop().create_future()
        try:
            await self._pool.make_room()
            self._file = await self._backend.open(self._path, create=False)
            self._pool.reopens += 1
            self._pool.added(self)
        finally:
            self._reopening = None
            waiters.set_result(None)  # waiters look again (and retry a failed reopen)

    @contextlib.asynccontextmanager
    async def _pinned(self) -> AsyncIterator[Storage]:
        """The open file for one operation (`_use`, then `_done`)."""
        file = await self._use()
        try:
            yield file
        finally:
            self._done(file)

    def _done(self, file: Storage) -> None:
        self._users -= 1
        self._size = file.size
        if not self._users and self._idle is not None:
            self._idle.set_result(None)
            self._idle = None
        self._pool.released()

    async def evict(self) -> None:
        """Close the descriptor (the pool needs room); sync first if dirty."""
        file = self._file
        assert file is not None and not self._users
        if self.dirty:
            self._pool.eviction_syncs += 1
            try:
                await self.sync()
            except OSError as exc:
                # Keep the file open and hand the error to its owner's next sync.
                self._deferred = exc
                self._pool.touched(self)
                log.error("%s: syncing before closing an idle file failed: %s", self._path, exc)
                return
            if self._users or self.dirty or self._file is not file:
                return  # used (or closed) meanwhile: choose again
        self._file = None
        self._pool.removed(self)
        self._pool.evictions += 1
        await file.close()

    def _raise_deferred(self) -> None:
        exc, self._deferred = self._deferred, None
        if exc is not None:
            raise exc

    # -- Storage ---------------------------------------------------------------

    async def read_at(self, length: int, offset: int) -> bytes:
        async with self._pinned() as file:
            return await file.read_at(length, offset)

    def read_at_nowait(self, length: int, offset: int) -> Buffer | None:
        file = self._file
        if file is None:
            return None  # reopening needs a wait
        self._pool.touched(self)
        return file.read_at_nowait(length, offset)

    async def writev(self, buffers: Sequence[Buffer], offset: int, *, sync: bool) -> None:
        if sync:
            file, covered = await self.pin_for_durable_write()
            try:
                await file.writev(buffers, offset, sync=True)
                self.covered(covered)
            finally:
                self._done(file)
            return
        async with self._pinned() as file:
            self._writes += 1
            await file.writev(buffers, offset, sync=False)

    async def pin_for_durable_write(self) -> tuple[Storage, int]:
        """The open file, pinned for a durable write (release with `_done`), and
        the count of changes that write's sync will cover (for `covered`). Raises
        an eviction's failed sync first: it is this write's to report."""
        file = await self._use()
        self._writes += 1
        try:
            self._raise_deferred()
        except BaseException:
            self._done(file)
            raise
        return file, self._writes

    def covered(self, writes: int) -> None:
        """A sync covered the first `writes` changes."""
        self._synced_writes = max(self._synced_writes, writes)

    async def sync(self) -> None:
        async with self._pinned() as file:
            covered = self._writes
            self._raise_deferred()
            await file.sync()
            self.covered(covered)

    async def truncate(self, size: int) -> None:
        async with self._pinned() as file:
            self._writes += 1
            await file.truncate(size)

    async def allocate(self, size: int) -> None:
        async with self._pinned() as file:
            self._writes += 1
            await file.allocate(size)

    async def drop_cache(self) -> None:
        async with self._pinned() as file:
            await file.drop_cache()

    async def close(self) -> None:
        self._closed = True
        while self._users:  # the pool's own sync before an eviction, most likely
            self._idle = asyncio.get_running_loop().create_future()
            await self._idle
        file, self._file = self._file, None
        if file is not None:
            self._pool.removed(self)
            await file.close()
