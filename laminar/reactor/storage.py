"""The io_uring storage backend for `laminar.log` (the `StorageBackend` seam).

Every data operation is a completion on the shard's ring: reads are
IORING_OP_READ, `writev(..., sync=True)` is one WRITEV entry (per IOV_MAX
buffers) linked to an fdatasync entry, so the log's group commit can keep
several flushes in flight; `write_durably` submits such a chain per file at
once and resolves one future when all are done; truncate, allocate and
close are ring operations too. Directory listing, creation, directory
removal, cache dropping and a directory sync's open and close stay plain
syscalls (quick, metadata-only);
a rename, which waits for the journal, runs on a worker thread.
It must run on a `UringEventLoop`; on the stock loop use `SyscallBackend`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Sequence

from laminar.log.storage import (
    Buffer,
    DurableWrite,
    FdFile,
    Storage,
    make_dirs,
    write_each_durably,
)

from .files import FileOps


def _uring_loop() -> FileOps:
    loop = asyncio.get_running_loop()
    if not isinstance(loop, FileOps):
        raise TypeError(
            "UringBackend needs a running UringEventLoop "
            f"(got {type(loop).__name__}); use SyscallBackend on other loops"
        )
    return loop


class UringStorage(FdFile):
    """One open file whose I/O goes through the ring."""

    def __init__(self, loop: FileOps, fd: int, path: str, size: int) -> None:
        super().__init__(fd, path, size)
        self._loop = loop

    async def read_at(self, length: int, offset: int) -> bytes:
        return await self._loop.file_read(self._check_open(), length, offset)

    async def writev(self, buffers: Sequence[Buffer], offset: int, *, sync: bool) -> None:
        fd = self._check_open()
        written = await self._loop.file_writev(fd, buffers, offset, sync=sync)
        self.written_to(offset + written)

    def written_to(self, end: int) -> None:
        """Bytes up to `end` were written: the file is at least that long."""
        self._size = max(self._size, end)

    async def sync(self) -> None:
        await self._loop.file_fdatasync(self._check_open())

    async def truncate(self, size: int) -> None:
        await self._loop.file_ftruncate(self._check_open(), size)
        self._size = size

    async def allocate(self, size: int) -> None:
        if size > self._size:
            await self._loop.file_fallocate(self._check_open(), self._size, size - self._size)
            self._size = size

    async def drop_cache(self) -> None:
        os.posix_fadvise(self._check_open(), 0, 0, os.POSIX_FADV_DONTNEED)

    async def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            await self._loop.file_close(fd)


class UringBackend:
    """Files whose reads, writes and syncs are io_uring operations."""

    async def open(self, path: str, *, create: bool) -> Storage:
        loop = _uring_loop()
        path = os.fspath(path)
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        fd = await loop.file_open(path, flags, 0o644)
        try:
            size = os.fstat(fd).st_size
        except OSError:
            os.close(fd)
            raise
        return UringStorage(loop, fd, path, size)

    async def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            try:
                await _uring_loop().file_unlink(path)
            except IsADirectoryError:
                os.rmdir(path)  # a whole partition's removal ends so: rare

    async def rename(self, source: str, target: str) -> None:
        # On a worker thread: a rename waits for the journal behind other
        # files' fsyncs (a fifth of a shard's time while many groups write
        # their Raft state, when it ran on the loop).
        await asyncio.get_running_loop().run_in_executor(None, os.rename, source, target)

    async def list_dir(self, path: str) -> list[str]:
        return os.listdir(path)

    async def make_dir(self, path: str) -> list[str]:
        return make_dirs(path)

    async def write_durably(self, writes: Sequence[DurableWrite]) -> None:
        files = [w.file for w in writes if isinstance(w.file, UringStorage)]
        if len(files) < len(writes):
            await write_each_durably(writes)
            return
        written = await files[0]._loop.files_write_durably(
            [(f._check_open(), w.buffers, w.offset) for f, w in zip(files, writes, strict=True)]
        )
        for f, w, n in zip(files, writes, written, strict=True):
            f.written_to(w.offset + n)

    async def sync_dir(self, path: str) -> None:
        # One completion, not three: opening and closing a directory are quick
        # syscalls, and every completion waits for a turn of a busy loop (a
        # Raft group's vote waits for its state file's directory sync).
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            await _uring_loop().file_fsync(fd)
        finally:
            os.close(fd)


__all__ = ["UringBackend", "UringStorage"]
