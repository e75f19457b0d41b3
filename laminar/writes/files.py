"""Staging files on disk: durable appends, reads back, and a bound on open files.

Every write here is durable when it returns (`writev(..., sync=True)`), and a
file created for the first time is made durable in its directory too
(`sync_dir`) before anything in it is acknowledged: a staged batch whose file
name a power cut could take back was never durable. Each file has one
writer at a time (the participant holds a lock per attempt and per commit),
so a crash can only tear its tail (`laminar.writes.frames.scan`).

Open files are bounded (`open_max`): the least recently used file that no
operation is using is closed, and opened again when next needed.
"""

from __future__ import annotations

import contextlib
import os
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from typing import Final

from laminar.log.storage import Buffer, Storage, StorageBackend, make_dir_durable

OPEN_FILES_MAX: Final = 256


class StagingFiles:
    """Opens, appends to, reads and removes staging files under one root."""

    def __init__(self, backend: StorageBackend, root: str, open_max: int = OPEN_FILES_MAX) -> None:
        self.backend = backend
        self.root = root
        self.open_max = open_max
        self._open: OrderedDict[str, Storage] = OrderedDict()
        self._busy: dict[str, int] = {}
        self._dirs: set[str] = set()

    async def ensure_dir(self, directory: str) -> None:
        """Create `directory` (under the root) durably, once."""
        if directory in self._dirs:
            return
        await make_dir_durable(self.backend, directory)
        self._dirs.add(directory)

    @contextlib.asynccontextmanager
    async def using(self, path: str, *, create: bool = False) -> AsyncIterator[Storage]:
        """The open file at `path` (opened, or created durably, if needed)."""
        self._busy[path] = self._busy.get(path, 0) + 1
        try:
            storage = self._open.get(path)
            if storage is None:
                storage = await self.backend.open(path, create=create)
                if create and storage.size == 0:
                    await self.backend.sync_dir(os.path.dirname(path))
                self._open[path] = storage
            self._open.move_to_end(path)
            yield storage
        finally:
            left = self._busy[path] - 1
            if left:
                self._busy[path] = left
            else:
                del self._busy[path]
            await self._trim()

    async def append(self, path: str, buffers: Sequence[Buffer], *, create: bool) -> int:
        """Append `buffers` durably; the offset they start at. A write that fails
        is cut off again (best effort; recovery cuts any torn tail anyway), so the
        next append follows the last good frame."""
        async with self.using(path, create=create) as storage:
            offset = storage.size
            try:
                await storage.writev(buffers, offset, sync=True)
            except Exception:
                with contextlib.suppress(Exception):
                    await storage.truncate(offset)
                raise
            return offset

    async def read(self, path: str, offset: int, length: int) -> bytes:
        async with self.using(path) as storage:
            return await storage.read_at(length, offset)

    async def read_all(self, path: str) -> bytes:
        async with self.using(path) as storage:
            return await storage.read_at(storage.size, 0)

    async def truncate(self, path: str, size: int) -> None:
        """Cut a torn tail off (made durable at once)."""
        async with self.using(path) as storage:
            await storage.truncate(size)
            await storage.sync()

    async def remove(self, path: str) -> None:
        storage = self._open.pop(path, None)
        if storage is not None:
            await storage.close()
        await self.backend.remove(path)

    async def list_dir(self, directory: str) -> list[str]:
        try:
            return await self.backend.list_dir(directory)
        except FileNotFoundError:
            return []

    async def _trim(self) -> None:
        while len(self._open) > self.open_max:
            for path in self._open:
                if path not in self._busy:
                    storage = self._open.pop(path)
                    await storage.close()
                    break
            else:
                return

    async def close(self) -> None:
        opened, self._open = self._open, OrderedDict()
        for storage in opened.values():
            await storage.close()
