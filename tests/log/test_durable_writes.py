"""`StorageBackend.write_durably` through the layers a node stacks on its
backend (the file pool, the fsync timer): each passes one durable write of
several files down as one, over the files it wraps, so the io_uring backend
at the bottom can chain them (`tests/reactor/test_storage.py`)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

from laminar.log import SimulatedDisk
from laminar.log.filepool import FilePool
from laminar.log.storage import DurableWrite, Storage, StorageBackend
from laminar.shards.metrics import LatencySummary, TimedBackend


class RecordingDisk(SimulatedDisk):
    """A simulated disk that notes the files of every durable write it gets."""

    def __init__(self) -> None:
        super().__init__()
        self.durable_writes: list[list[Storage]] = []

    async def write_durably(self, writes: Sequence[DurableWrite]) -> None:
        self.durable_writes.append([w.file for w in writes])
        await super().write_durably(writes)


async def contents(disk: SimulatedDisk, *paths: str) -> list[bytes]:
    out = []
    for path in paths:
        file = await disk.open(path, create=False)
        out.append(await file.read_at(1 << 20, 0))
        await file.close()
    return out


def test_the_pool_passes_a_durable_write_down_whole_reopening_closed_files() -> None:
    async def main() -> None:
        disk = RecordingDisk()
        await disk.make_dir("/d")
        await disk.sync_dir("/")
        pool = FilePool(2)
        backend = pool.backend(disk)
        store = await backend.open("/d/s", create=True)
        await backend.sync_dir("/d")
        index = await backend.open("/d/i", create=True)
        await backend.open("/d/other", create=True)  # the budget of 2: closes the store
        await backend.sync_dir("/d")
        assert pool.evictions == 1
        await backend.write_durably(
            [DurableWrite(store, [b"rec", b"ords"], 0), DurableWrite(index, [b"entry"], 0)]
        )
        assert pool.reopens >= 1
        (inner,) = disk.durable_writes
        assert len(inner) == 2 and not any(f is store or f is index for f in inner)
        assert not store.dirty and not index.dirty  # covered: no sync before closing
        disk.power_cut(random.Random(1), loss=1.0)
        assert await contents(disk, "/d/s", "/d/i") == [b"records", b"entry"]

    asyncio.run(main())


def test_the_fsync_timer_passes_a_durable_write_down_whole_as_one_sample() -> None:
    async def main() -> None:
        disk = RecordingDisk()
        summary = LatencySummary()
        backend: StorageBackend = TimedBackend(disk, summary)
        await disk.make_dir("/d")
        await disk.sync_dir("/")
        a = await backend.open("/d/a", create=True)
        b = await backend.open("/d/b", create=True)
        await backend.sync_dir("/d")
        await backend.write_durably([DurableWrite(a, [b"x"], 0), DurableWrite(b, [b"y"], 0)])
        assert summary.count == 1
        (inner,) = disk.durable_writes
        assert len(inner) == 2 and inner[0] is not a and inner[1] is not b
        disk.power_cut(random.Random(1), loss=1.0)
        assert await contents(disk, "/d/a", "/d/b") == [b"x", b"y"]

    asyncio.run(main())


def test_files_a_layer_did_not_open_are_written_each_on_its_own() -> None:
    """A layer can only unwrap its own files; anything else still gets a
    correct durable write, file by file."""

    async def main() -> None:
        disk = RecordingDisk()
        pool = FilePool(4)
        backend = pool.backend(disk)
        await disk.make_dir("/d")
        await disk.sync_dir("/")
        pooled = await backend.open("/d/p", create=True)
        plain = await disk.open("/d/q", create=True)
        await disk.sync_dir("/d")
        await backend.write_durably(
            [DurableWrite(pooled, [b"p"], 0), DurableWrite(plain, [b"q"], 0)]
        )
        assert disk.durable_writes == []
        assert not pooled.dirty
        disk.power_cut(random.Random(1), loss=1.0)
        assert await contents(disk, "/d/p", "/d/q") == [b"p", b"q"]

    asyncio.run(main())
