"""File operations of UringEventLoop, for the io_uring storage backend.

- `file_writev` is one IORING_OP_WRITEV per IOV_MAX buffers, linked
  (IOSQE_IO_LINK) to an IORING_OP_FSYNC(DATASYNC) when `sync` is set, so the
  kernel starts the sync as soon as the write is done and several such chains
  (group-commit flushes) can be in flight at once. PLATFORM.md measured 1 / 4 /
  8 chains in flight at 287k / 607k / 682k 1 KiB records/s.
- A chain breaks at a short write: the kernel completes the rest of the chain
  with -ECANCELED. Short writes happen only near real errors (ENOSPC), so we then
  write the remainder one plain write at a time and sync after it. A chain the
  kernel took in two submissions (`Ring.chain_split`) is synced again too.
- `files_write_durably` does the same for several files at once (a flush's
  store and index): one chain per file, all submitted together, and one future
  for the lot, resolved by the completions' finishers when the last arrives.
  Two `file_writev(..., sync=True)` would resolve a future per write and per
  sync and wake two coroutines and a gather (measured: a lone flush 269 ->
  214 us of CPU, a node's lone produce 468 -> 408; `benchmarks/RESULTS.md`,
  "A flush's two files as one durable write"). The chains
  stay apart so that the files' fdatasyncs run in parallel on two io-wq
  workers: one chain would make the second wait for the first.
- Buffers (bytes, bytearray or anything with the buffer protocol) and the
  iovec array stay referenced by the ring until their completions.
"""

from __future__ import annotations

import asyncio
import errno
import os
import struct
from collections.abc import Sequence
from typing import Any

from laminar.iouring import abi, supports
from laminar.iouring.native import BYTES_DATA_OFFSET, bytes_address, readable_address

from .core import UringLoopCore, _oserror

_Future = asyncio.Future
AT_FDCWD = -100
IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


def _iovecs(buffers: Sequence[Any]) -> tuple[bytes, list[object], int]:
    """The iovec array for `buffers`, the objects to keep alive, the byte total."""
    flat: list[int] = []
    keep: list[object] = []
    total = 0
    for buf in buffers:
        if type(buf) is bytes:
            n = len(buf)
            flat += (id(buf) + BYTES_DATA_OFFSET, n)
            keep.append(buf)
        else:
            with memoryview(buf) as view:
                n = view.nbytes
            if n:
                address, pin = readable_address(buf)
            else:
                address, pin = 0, None
            flat += (address, n)
            keep.append(pin)
        total += n
    iov = struct.pack(f"<{len(flat)}Q", *flat)
    keep.append(iov)
    return iov, keep, total


class _DurableGroup:
    """The state of one `files_write_durably`: its completions still to come."""

    __slots__ = ("broken", "done", "error", "pending")

    def __init__(self, done: asyncio.Future[None], pending: int) -> None:
        self.done = done
        self.pending = pending
        self.broken = False
        self.error: OSError | None = None


class FileOps(UringLoopCore):
    """File coroutines over io_uring (regular files and directories)."""

    async def file_open(
        self, path: str | bytes | os.PathLike[Any], flags: int, mode: int = 0o644
    ) -> int:
        """Open `path` with `os.open` flags through IORING_OP_OPENAT; return the fd."""
        cpath = os.fsencode(path) + b"\0"
        fut: asyncio.Future[int] = _Future(loop=self)
        ud = self._ring.prep(
            abi.OP_OPENAT,
            AT_FDCWD,
            bytes_address(cpath),
            mode,
            0,
            flags,
            (self._fin_fd, fut),
            cpath,
        )
        return await self._await_op(fut, ud)

    async def file_unlink(self, path: str | bytes | os.PathLike[Any]) -> None:
        cpath = os.fsencode(path) + b"\0"
        await self._simple_op(
            lambda token: self._ring.prep(
                abi.OP_UNLINKAT, AT_FDCWD, bytes_address(cpath), 0, 0, 0, token, cpath
            )
        )

    async def file_read(self, fd: int, length: int, offset: int) -> bytes:
        """Read up to `length` bytes at `offset`; short only at end of file."""
        if length <= 0:
            return b""
        buf = self._bufs.take(length)
        view, address, _home = buf
        got = 0
        try:
            while got < length:
                fut: asyncio.Future[int] = _Future(loop=self)
                ud = self._ring.prep_read(
                    fd, address + got, length - got, offset + got, (self._fin_result, fut), buf
                )
                n = await self._await_op(fut, ud)
                if n == 0:
                    break
                got += n
            return view[:got].tobytes()
        finally:
            if not self._ring.is_pending(ud):
                self._bufs.give(buf)

    async def file_write(self, fd: int, data: Any, offset: int) -> int:
        """Write all of `data` at `offset` (plain writes, retried when short)."""
        with memoryview(data) as view:
            total = view.nbytes
        if not total:
            return 0
        address, keep = readable_address(data)
        done = 0
        while done < total:
            fut: asyncio.Future[int] = _Future(loop=self)
            ud = self._ring.prep_write(
                fd, address + done, total - done, offset + done, (self._fin_result, fut), keep
            )
            n = await self._await_op(fut, ud)
            if n == 0:
                raise _oserror(errno.EIO)
            done += n
        return total

    async def file_writev(self, fd: int, buffers: Sequence[Any], offset: int, *, sync: bool) -> int:
        """Write `buffers` back to back at `offset`; if `sync`, a linked fdatasync.

        One WRITEV SQE per IOV_MAX buffers, all linked in one chain ending in the
        fdatasync. Returns the number of bytes written.
        """
        ring = self._ring
        plans: list[tuple[int, int, Any]] = []  # (offset, bytes, buffers) per chunk
        position = offset
        chunks = [buffers[i : i + IOV_MAX] for i in range(0, len(buffers), IOV_MAX)]
        if len(chunks) + 1 > ring.sq_entries:
            # A chain longer than the SQ cannot be submitted whole: split it.
            half = len(chunks) // 2 * IOV_MAX
            head = await self.file_writev(fd, buffers[:half], offset, sync=False)
            tail = await self.file_writev(fd, buffers[half:], offset + head, sync=sync)
            return head + tail
        ring.reserve(len(chunks) + (1 if sync else 0))
        futs: list[asyncio.Future[int]] = []
        uds: list[int] = []
        for index, chunk in enumerate(chunks):
            iov, keep, total = _iovecs(chunk)
            last = index == len(chunks) - 1
            flags = abi.IOSQE_IO_LINK if (sync or not last) else 0
            fut: asyncio.Future[int] = _Future(loop=self)
            uds.append(
                ring.prep_writev(
                    fd,
                    bytes_address(iov),
                    len(chunk),
                    position,
                    (self._fin_result, fut),
                    keep,
                    flags,
                )
            )
            futs.append(fut)
            plans.append((position, total, chunk))
            position += total
        if sync:
            fut = _Future(loop=self)
            uds.append(ring.prep_fdatasync(fd, (self._fin_result, fut)))
            futs.append(fut)
        results: list[int | BaseException] = []
        try:
            for fut in futs:
                try:
                    results.append(await fut)
                except OSError as exc:
                    results.append(exc)
        except asyncio.CancelledError:
            for ud in uds:
                self._cancel_op(ud)
            raise
        broken = False
        for (chunk_offset, total, chunk), result in zip(plans, results, strict=False):
            if isinstance(result, BaseException):
                if getattr(result, "errno", None) != errno.ECANCELED:
                    raise result
                broken = True
                await self.file_write(fd, b"".join(chunk), chunk_offset)
            elif result < total:
                broken = True
                rest = b"".join(chunk)[result:]
                await self.file_write(fd, rest, chunk_offset + result)
        split = ring.chain_split(uds)
        if sync:
            sync_result = results[-1]
            if isinstance(sync_result, OSError) and sync_result.errno != errno.ECANCELED:
                raise sync_result  # a failed fsync is final: never retried (fsyncgate)
            if broken or split:
                # Rewritten, or the kernel took the chain in two submissions and
                # the sync may have run before the write finished: sync again.
                await self.file_fdatasync(fd)
        return position - offset

    async def files_write_durably(
        self, writes: Sequence[tuple[int, Sequence[Any], int]]
    ) -> list[int]:
        """Write each (fd, buffers, offset) and fdatasync each fd, as one operation;
        return the bytes written to each.

        A failed write or fdatasync is raised once every operation has ended; a
        failed fdatasync is never retried (fsyncgate). A chain broken by a short
        write (its later entries cancelled) or taken by the kernel in two
        submissions is done again by `file_writev`, which rewrites the same
        bytes at the same offsets and syncs.
        """
        ring = self._ring
        chunked = [
            [bufs[i : i + IOV_MAX] for i in range(0, len(bufs), IOV_MAX)] for _, bufs, _ in writes
        ]
        entries = sum(len(chunks) + 1 for chunks in chunked)
        if entries > ring.sq_entries:
            return await self._write_each_durably(writes)
        ring.reserve(entries)
        group = _DurableGroup(_Future(loop=self), entries)
        uds: list[int] = []
        written: list[int] = []
        for (fd, _, offset), chunks in zip(writes, chunked, strict=True):
            position = offset
            for chunk in chunks:
                iov, keep, total = _iovecs(chunk)
                token = (self._fin_group_write, group, total)
                uds.append(
                    ring.prep_writev(
                        fd, bytes_address(iov), len(chunk), position, token, keep, abi.IOSQE_IO_LINK
                    )
                )
                position += total
            written.append(position - offset)
            uds.append(ring.prep_fdatasync(fd, (self._fin_group_sync, group)))
        try:
            await group.done
        except asyncio.CancelledError:
            for ud in uds:
                self._cancel_op(ud)
            raise
        if group.error is not None:
            raise group.error  # a failed fdatasync above all is final
        # `|`, not `or`: chain_split must forget these entries either way.
        if group.broken | ring.chain_split(uds):
            return await self._write_each_durably(writes)
        return written

    async def _write_each_durably(
        self, writes: Sequence[tuple[int, Sequence[Any], int]]
    ) -> list[int]:
        """Each file on its own (`file_writev`), all at once; the first error
        once all have ended, else the bytes written to each."""
        results = await asyncio.gather(
            *(self.file_writev(fd, b, o, sync=True) for fd, b, o in writes),
            return_exceptions=True,
        )
        written: list[int] = []
        for result in results:
            if isinstance(result, BaseException):
                raise result
            written.append(result)
        return written

    def _fin_group_write(self, token: tuple[Any, ...], res: int) -> None:
        self._fin_group(token[1], res, token[2])

    def _fin_group_sync(self, token: tuple[Any, ...], res: int) -> None:
        self._fin_group(token[1], res, 0)

    def _fin_group(self, group: _DurableGroup, res: int, expected: int) -> None:
        """A write's completion (`expected` bytes) or a sync's (0)."""
        if res == -errno.ECANCELED or 0 <= res < expected:
            group.broken = True  # short, or cancelled by its chain's break: redone
        elif res < 0 and group.error is None:
            group.error = _oserror(-res)
        group.pending -= 1
        if not group.pending and not group.done.done():
            group.done.set_result(None)

    async def file_fdatasync(self, fd: int) -> None:
        await self._simple_op(lambda token: self._ring.prep_fdatasync(fd, token))

    async def file_fsync(self, fd: int) -> None:
        await self._simple_op(lambda token: self._ring.prep(abi.OP_FSYNC, fd, 0, 0, 0, 0, token))

    async def file_fallocate(self, fd: int, offset: int, length: int, mode: int = 0) -> None:
        await self._simple_op(
            lambda token: self._ring.prep_fallocate(fd, mode, offset, length, token)
        )

    async def file_ftruncate(self, fd: int, length: int) -> None:
        if not supports(abi.OP_FTRUNCATE):  # kernels before 6.9
            os.ftruncate(fd, length)
            return
        await self._simple_op(lambda token: self._ring.prep_ftruncate(fd, length, token))

    async def file_close(self, fd: int) -> None:
        await self._simple_op(lambda token: self._ring.prep_close(fd, token))
