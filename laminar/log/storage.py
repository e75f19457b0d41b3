"""The storage seam: the few file operations the log needs, behind one interface.

A `StorageBackend` opens and removes files in a directory; a `Storage` is one
open file. The log only ever appends at known offsets, reads at known offsets,
syncs, truncates and preallocates, so that is the whole interface. Backends:

- `MemoryBackend`: files in memory, with a "durable" copy per file so that tests
  can simulate a crash (everything not synced is lost).
- `SyscallBackend`: `pread` and non-durable `pwritev` on the calling thread
  (page-cache speed); a durable write (pwritev + fdatasync) on a worker
  thread, so a flush in progress does not stop the event loop. Works under any
  asyncio loop.
- the io_uring backend lives in `laminar.reactor` and runs on `UringEventLoop`.

`writev(..., sync=True)` is one operation on purpose: a backend that can chain a
write and its sync in the kernel (io_uring links) does so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import Sequence
from typing import Protocol

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

    async def close(self) -> None:
        """Close the file. Idempotent."""
        ...


class StorageBackend(Protocol):
    """Opens files and changes directories. Paths are `os.PathLike` or `str`."""

    async def open(self, path: str, *, create: bool) -> Storage:
        """Open `path` for reading and writing; create it if `create`."""
        ...

    async def remove(self, path: str) -> None:
        """Delete a file (missing is fine)."""
        ...

    async def list_dir(self, path: str) -> list[str]:
        """Names in a directory (not paths)."""
        ...

    async def make_dir(self, path: str) -> None:
        """Create a directory and its parents (existing is fine)."""
        ...

    async def sync_dir(self, path: str) -> None:
        """Make creations, renames and removals in a directory durable."""
        ...


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
            # staged the records: do it on the worker thread with the sync, so
            # the loop thread stages the next flush meanwhile.
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
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        return SyscallStorage(os.open(path, flags, 0o644), path)

    async def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    async def list_dir(self, path: str) -> list[str]:
        return os.listdir(path)

    async def make_dir(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    async def sync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# --------------------------------------------------------------------------
# Memory


class MemoryFile:
    """The contents of one in-memory file: what was written and what was synced."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.durable = bytearray()


class MemoryStorage:
    """An open handle on a `MemoryFile`."""

    def __init__(self, file: MemoryFile, path: str) -> None:
        self._file: MemoryFile | None = file
        self._path = path

    def _open_file(self) -> MemoryFile:
        if self._file is None:
            raise ValueError(f"I/O operation on closed file {self._path}")
        return self._file

    @property
    def size(self) -> int:
        return len(self._open_file().data)

    async def read_at(self, length: int, offset: int) -> bytes:
        return bytes(self._open_file().data[offset : offset + length])

    def read_at_nowait(self, length: int, offset: int) -> Buffer | None:
        data = self._open_file().data
        return bytes(data[offset : offset + length]) if offset + length <= len(data) else None

    async def writev(self, buffers: Sequence[Buffer], offset: int, *, sync: bool) -> None:
        data = self._open_file().data
        blob = b"".join(buffers)
        if offset > len(data):
            data.extend(bytes(offset - len(data)))
        data[offset : offset + len(blob)] = blob
        if sync:
            await self.sync()

    async def sync(self) -> None:
        # Yield first, as a real device would: a crash test can then cut the
        # power between a write and its sync.
        await asyncio.sleep(0)
        file = self._open_file()
        file.durable = bytearray(file.data)

    async def truncate(self, size: int) -> None:
        data = self._open_file().data
        if size < len(data):
            del data[size:]
        else:
            data.extend(bytes(size - len(data)))

    async def allocate(self, size: int) -> None:
        data = self._open_file().data
        if size > len(data):
            data.extend(bytes(size - len(data)))

    async def close(self) -> None:
        self._file = None


class MemoryBackend:
    """An in-memory file system for tests, able to simulate a crash."""

    def __init__(self) -> None:
        self.files: dict[str, MemoryFile] = {}
        self.dirs: set[str] = set()
        self._handles: list[MemoryStorage] = []

    async def open(self, path: str, *, create: bool) -> Storage:
        path = os.fspath(path)
        file = self.files.get(path)
        if file is None:
            if not create:
                raise FileNotFoundError(path)
            file = self.files[path] = MemoryFile()
        handle = MemoryStorage(file, path)
        self._handles.append(handle)
        return handle

    async def remove(self, path: str) -> None:
        self.files.pop(os.fspath(path), None)

    async def list_dir(self, path: str) -> list[str]:
        prefix = os.fspath(path).rstrip("/") + "/"
        return [p[len(prefix) :] for p in self.files if p.startswith(prefix)]

    async def make_dir(self, path: str) -> None:
        self.dirs.add(os.fspath(path))

    async def sync_dir(self, path: str) -> None:
        return None

    def crash(self, rng: random.Random | None = None) -> None:
        """Simulate a power cut: what was not synced is lost.

        With `rng`, each file instead keeps a random prefix of its unsynced
        bytes (a torn write). Every open handle is closed, as the process died.
        """
        for handle in self._handles:
            handle._file = None
        self._handles.clear()
        for file in self.files.values():
            if rng is None:
                file.data = bytearray(file.durable)
                continue
            keep = rng.randint(0, len(file.data))
            file.data = bytearray(file.data[:keep] + file.durable[keep:])
