"""The storage seam: the few file operations the log needs, behind one interface.

A `StorageBackend` opens and removes files in a directory; a `Storage` is one
open file. The log only ever appends at known offsets, reads at known offsets,
syncs, truncates and preallocates, so that is the whole interface. Backends:

- `SimulatedDisk` (`simdisk.py`): files in memory that can lose power the way
  a real disk can (tests; also exported as `MemoryBackend`).
- `SyscallBackend`: `pread` and non-durable `pwritev` on the calling thread
  (page-cache speed); a durable write (pwritev + fdatasync), a directory
  sync, and what waits for the file system's journal (creating a file, a
  rename) on a worker thread, so they do not stop the event loop. Works
  under any asyncio loop.
- the io_uring backend lives in `laminar.reactor` and runs on `UringEventLoop`.

`writev(..., sync=True)` is one operation on purpose: a backend that can chain a
write and its sync in the kernel (io_uring links) does so. For the same reason
a flush's writes to several files (a segment's store and index) are one
`StorageBackend.write_durably`: the io_uring backend submits them together and
wakes its caller once, when every file is synced, instead of resolving a
future per write and per sync; other backends write each file as
`write_each_durably` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Sequence
from typing import NamedTuple, Protocol

Buffer = bytes | bytearray

# Linux caps one pwritev at IOV_MAX (1024) buffers.
IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


class Storage(Protocol):
    """One open file of a segment. Offsets are absolute byte positions."""

    @property
    def size(self) -> int:
        """Current size of the file in bytes (preallocated space included)."""
        ...

    async def read_at(self, length: int, offset: int) -> bytes:
        """Read up to `length` bytes at `offset` (short only at end of file)."""
        ...

    def read_at_nowait(self, length: int, offset: int) -> Buffer | None:
        """Exactly `length` bytes at `offset` if they can be had without waiting
        for the device (they are in the page cache), else None: then `read_at`.
        None is always a correct answer."""
        ...

    async def writev(self, buffers: Sequence[Buffer], offset: int, *, sync: bool) -> None:
        """Write `buffers` back to back at `offset`; if `sync`, fdatasync after."""
        ...

    async def sync(self) -> None:
        """Make every completed write durable (fdatasync)."""
        ...

    async def truncate(self, size: int) -> None:
        """Set the file's size to `size` bytes."""
        ...

    async def allocate(self, size: int) -> None:
        """Reserve disk blocks so the file is at least `size` bytes (zero-filled)."""
        ...

    async def drop_cache(self) -> None:
        """Forget clean cached pages, so the next reads come from the device.

        After a failed fsync Linux marks the unwritten pages clean and keeps
        showing them ("fsyncgate"): recovery drops them to see the disk's truth.
        """
        ...

    async def close(self) -> None:
        """Close the file. Idempotent."""
        ...


class DurableWrite(NamedTuple):
    """Buffers to write back to back at `offset` of `file`, then fdatasync."""

    file: Storage
    buffers: Sequence[Buffer]
    offset: int


async def write_each_durably(writes: Sequence[DurableWrite]) -> None:
    """`write_durably` as each file's own `writev(..., sync=True)`, all at once.

    Waits for every write even when one fails (none may outlive its caller on a
    descriptor that could be closed and reused), then raises the first error."""
    results = await asyncio.gather(
        *(w.file.writev(w.buffers, w.offset, sync=True) for w in writes),
        return_exceptions=True,
    )
    for result in results:
        if isinstance(result, BaseException):
            raise result


class StorageBackend(Protocol):
    """Opens files and changes directories. Paths are `os.PathLike` or `str`."""

    async def open(self, path: str, *, create: bool) -> Storage:
        """Open `path` for reading and writing; create it if `create`."""
        ...

    async def remove(self, path: str) -> None:
        """Delete a file or an empty directory (missing is fine). Durable once
        its directory is synced."""
        ...

    async def rename(self, source: str, target: str) -> None:
        """Atomically rename a file, replacing `target`. Durable once the directory is synced."""
        ...

    async def list_dir(self, path: str) -> list[str]:
        """Names in a directory (not paths)."""
        ...

    async def make_dir(self, path: str) -> list[str]:
        """Create a directory and its parents (existing is fine); return the paths
        created, outermost first. Each is durable once its parent is synced."""
        ...

    async def sync_dir(self, path: str) -> None:
        """Make creations, renames and removals in a directory durable."""
        ...

    async def write_durably(self, writes: Sequence[DurableWrite]) -> None:
        """Write each of `writes` and fdatasync its file, as one operation on
        files this backend opened; return once all are durable, or raise the
        first error once none is running any more."""
        ...


class WrappedBackend:
    """A backend that adds to another's files (subclasses override `open`) and
    passes every directory operation through unchanged. Its durable writes go
    through its own files (`write_each_durably`): a subclass whose files only
    observe may hand the inner files to the inner backend instead."""

    def __init__(self, inner: StorageBackend) -> None:
        self._inner = inner

    async def open(self, path: str, *, create: bool) -> Storage:
        return await self._inner.open(path, create=create)

    async def remove(self, path: str) -> None:
        await self._inner.remove(path)

    async def rename(self, source: str, target: str) -> None:
        await self._inner.rename(source, target)

    async def list_dir(self, path: str) -> list[str]:
        return await self._inner.list_dir(path)

    async def make_dir(self, path: str) -> list[str]:
        return await self._inner.make_dir(path)

    async def sync_dir(self, path: str) -> None:
        await self._inner.sync_dir(path)

    async def write_durably(self, writes: Sequence[DurableWrite]) -> None:
        await write_each_durably(writes)


# --------------------------------------------------------------------------
# Plain syscalls


class FdFile:
    """What the file-descriptor backends share: the fd, its path, the size."""

    def __init__(self, fd: int, path: str, size: int) -> None:
        self._fd = fd
        self._path = path
        self._size = size

    @property
    def size(self) -> int:
        return self._size

    def _check_open(self) -> int:
        """The fd; ValueError (as for a closed Python file) once closed."""
        if self._fd < 0:
            raise ValueError(f"I/O operation on closed file {self._path}")
        return self._fd

    def read_at_nowait(self, length: int, offset: int) -> Buffer | None:
        """One `preadv2(RWF_NOWAIT)`: the kernel copies what the page cache holds
        and refuses (EAGAIN) or stops short where it would have to go to disk."""
        buf = bytearray(length)
        try:
            got = os.preadv(self._check_open(), [buf], offset, os.RWF_NOWAIT)
        except BlockingIOError:
            return None
        return buf if got == length else None


class SyscallStorage(FdFile):
    """A file driven by plain syscalls; durable writes run on a worker thread."""

    def __init__(self, fd: int, path: str) -> None:
        super().__init__(fd, path, os.fstat(fd).st_size)

    async def read_at(self, length: int, offset: int) -> bytes:
        return os.pread(self._check_open(), length, offset)

    async def writev(self, buffers: Sequence[Buffer], offset: int, *, sync: bool) -> None:
        fd = self._check_open()
        end = offset + sum(map(len, buffers))
        if sync:
            # Copying into the page cache costs about as much as the Python that
            # placed the records: do it on the worker thread with the sync, so
            # the loop thread places the next flush meanwhile.
            await asyncio.get_running_loop().run_in_executor(
                None, _write_all_and_sync, fd, buffers, offset
            )
        else:
            _write_all(fd, buffers, offset)
        self._size = max(self._size, end)

    async def sync(self) -> None:
        fd = self._check_open()
        await asyncio.get_running_loop().run_in_executor(None, os.fdatasync, fd)

    async def truncate(self, size: int) -> None:
        os.ftruncate(self._check_open(), size)
        self._size = size

    async def allocate(self, size: int) -> None:
        if size > self._size:
            os.posix_fallocate(self._check_open(), self._size, size - self._size)
            self._size = size

    async def drop_cache(self) -> None:
        os.posix_fadvise(self._check_open(), 0, 0, os.POSIX_FADV_DONTNEED)

    async def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)


def _write_all(fd: int, buffers: Sequence[Buffer], offset: int) -> None:
    """pwritev all of `buffers` at `offset`, IOV_MAX at a time, finishing short writes."""
    position = offset
    for start in range(0, len(buffers), IOV_MAX):
        chunk = buffers[start : start + IOV_MAX]
        expected = sum(map(len, chunk))
        written = os.pwritev(fd, chunk, position)
        if written != expected:  # only on real trouble: ENOSPC midway, a signal
            rest = b"".join(chunk)[written:]
            while rest:
                n = os.pwrite(fd, rest, position + expected - len(rest))
                rest = rest[n:]
        position += expected


def _write_all_and_sync(fd: int, buffers: Sequence[Buffer], offset: int) -> None:
    _write_all(fd, buffers, offset)
    os.fdatasync(fd)


class SyscallBackend:
    """Files opened with `os.open`; works under any asyncio event loop."""

    async def open(self, path: str, *, create: bool) -> Storage:
        if not create:
            return SyscallStorage(os.open(path, os.O_RDWR | os.O_CLOEXEC), path)
        # Creating an inode waits for the journal behind other files' fsyncs
        # (a quarter of a millisecond while many groups write their state),
        # so it runs on a worker thread.
        fd = await asyncio.get_running_loop().run_in_executor(
            None, os.open, path, os.O_RDWR | os.O_CLOEXEC | os.O_CREAT, 0o644
        )
        return SyscallStorage(fd, path)

    async def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            remove_entry(path)

    async def rename(self, source: str, target: str) -> None:
        # A rename waits for the journal too (see `open`).
        await asyncio.get_running_loop().run_in_executor(None, os.rename, source, target)

    async def list_dir(self, path: str) -> list[str]:
        return os.listdir(path)

    async def make_dir(self, path: str) -> list[str]:
        return make_dirs(path)

    async def sync_dir(self, path: str) -> None:
        await asyncio.get_running_loop().run_in_executor(None, _fsync_dir, path)

    async def write_durably(self, writes: Sequence[DurableWrite]) -> None:
        await write_each_durably(writes)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_entry(path: str) -> None:
    """Unlink a file, or remove an empty directory."""
    try:
        os.unlink(path)
    except IsADirectoryError:
        os.rmdir(path)


def make_dirs(path: str) -> list[str]:
    """`os.makedirs(path, exist_ok=True)`, returning the directories it created."""
    missing: list[str] = []
    at = os.path.abspath(path)
    while not os.path.isdir(at):
        missing.append(at)
        parent = os.path.dirname(at)
        if parent == at:
            break
        at = parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory)
    return missing[::-1]


async def make_dir_durable(backend: StorageBackend, path: str) -> None:
    """Create `path` (and parents) and make every new directory entry durable."""
    for created in await backend.make_dir(path):
        await backend.sync_dir(os.path.dirname(created) or ".")


# --------------------------------------------------------------------------
# Whole small files and trees, written once against the seam for every backend

TEMPORARY_SUFFIX = ".tmp"
"""What `atomic_replace` appends to a file's name for its temporary copy."""


async def atomic_replace(backend: StorageBackend, path: str, data: bytes) -> None:
    """Replace the file at `path` by one holding `data`, atomically and durably.

    Write a temporary file (`path` + TEMPORARY_SUFFIX) in the same directory,
    sync it, rename it over `path`, sync the directory: a power cut leaves the
    old file or the new one whole, and once this returns, the new one. A crash
    may leave the temporary file behind; the next replace of `path` reuses it.
    Callers must not replace one path from two tasks at once.
    """
    temporary = path + TEMPORARY_SUFFIX
    file = await backend.open(temporary, create=True)
    try:
        if file.size > len(data):  # a longer leftover of a crash
            await file.truncate(len(data))
        await file.writev([data], 0, sync=True)
        await backend.rename(temporary, path)
    except BaseException:
        await file.close()
        raise
    # Closing needs not wait for the directory sync, nor it for the close:
    # one turn of the event loop less (a Raft vote waits for all of this).
    await asyncio.gather(file.close(), backend.sync_dir(os.path.dirname(path) or "."))


def atomic_replace_blocking(path: str, data: bytes) -> None:
    """`atomic_replace` on plain syscalls, for code with no event loop running
    (a process starting up)."""
    asyncio.run(atomic_replace(SyscallBackend(), path, data))


async def read_whole(backend: StorageBackend, path: str) -> bytes | None:
    """The content of a small file, read at once; None if there is no such file."""
    try:
        file = await backend.open(path, create=False)
    except FileNotFoundError:
        return None
    try:
        return await file.read_at(file.size, 0)
    finally:
        await file.close()


async def remove_tree(backend: StorageBackend, path: str) -> None:
    """Remove `path` and everything under it (missing is fine), one backend
    operation at a time, yielding to the event loop between entries. Not
    durable by itself: sync the parent directory, or finish it after a crash."""
    try:
        names = await backend.list_dir(path)
    except NotADirectoryError:
        names = None
    except FileNotFoundError:
        return
    for name in names or ():
        await remove_tree(backend, os.path.join(path, name))
        await asyncio.sleep(0)
    await backend.remove(path)
