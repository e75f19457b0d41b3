"""The storage seam's conformance, on SyscallBackend/stock loop and UringBackend/UringEventLoop."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from laminar.iouring import abi
from laminar.log.storage import IOV_MAX, DurableWrite, StorageBackend, SyscallBackend
from laminar.reactor import StockEventLoop, UringEventLoop
from laminar.reactor.storage import UringBackend

from .conftest import URING_REASON, needs_uring, open_fds

Env = tuple[StorageBackend, Callable[[Coroutine[Any, Any, Any]], Any]]


@pytest.fixture(params=["uring", "syscall"])
def env(request: pytest.FixtureRequest) -> Env:
    if request.param == "uring":
        if URING_REASON is not None:
            pytest.skip(f"io_uring unavailable: {URING_REASON}")
        factory: Any = UringEventLoop
        backend: StorageBackend = UringBackend()
    else:
        factory, backend = StockEventLoop, SyscallBackend()

    def run(coro: Coroutine[Any, Any, Any]) -> Any:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coro)

    return backend, run


def test_write_read_sync_truncate_allocate_close(env: Env, tmp_path: Path) -> None:
    backend, run = env
    path = str(tmp_path / "seg" / "00000000000000000000.store")

    async def main() -> None:
        await backend.make_dir(str(tmp_path / "seg"))
        with pytest.raises(FileNotFoundError):
            await backend.open(path, create=False)
        file = await backend.open(path, create=True)
        assert file.size == 0
        await file.writev([b"hello ", bytearray(b"world")], 0, sync=True)
        assert file.size == 11
        assert await file.read_at(100, 0) == b"hello world"
        assert await file.read_at(5, 6) == b"world"
        assert await file.read_at(10, 50) == b""
        await file.writev([b"!"], 11, sync=False)
        await file.sync()
        assert await file.read_at(100, 0) == b"hello world!"
        await file.allocate(4096)
        assert file.size == 4096 and os.stat(path).st_size == 4096
        assert await file.read_at(4, 12) == b"\0\0\0\0"
        await file.truncate(5)
        assert file.size == 5 and await file.read_at(100, 0) == b"hello"
        await file.close()
        await file.close()
        with pytest.raises(ValueError, match="closed file"):
            await file.read_at(1, 0)
        with pytest.raises(ValueError, match="closed file"):
            await file.writev([b"x"], 0, sync=True)
        again = await backend.open(path, create=False)
        assert again.size == 5
        await again.close()
        assert await backend.list_dir(str(tmp_path / "seg")) == ["00000000000000000000.store"]
        await backend.sync_dir(str(tmp_path / "seg"))
        await backend.remove(path)
        await backend.remove(path)  # missing is fine
        assert await backend.list_dir(str(tmp_path / "seg")) == []

    before = open_fds()
    run(main())
    assert open_fds() == before


def test_concurrent_flushes_and_more_than_iov_max_buffers(env: Env, tmp_path: Path) -> None:
    backend, run = env
    path = str(tmp_path / "f")
    record = 1024

    async def main() -> bytes:
        file = await backend.open(path, create=True)
        await file.allocate(16 * 64 * record)
        # Sixteen group-commit flushes of 64 records each, all in flight at once.
        flushes = [
            file.writev(
                [bytes([flush]) * record for _ in range(64)], flush * 64 * record, sync=True
            )
            for flush in range(16)
        ]
        await asyncio.gather(*flushes)
        big = [b"%06d" % i for i in range(IOV_MAX * 2 + 10)]
        await file.writev(big, 16 * 64 * record, sync=True)
        data = await file.read_at(16 * 64 * record + len(big) * 6, 0)
        await file.close()
        return data

    data = run(main())
    for flush in range(16):
        assert data[flush * 64 * record : (flush + 1) * 64 * record] == bytes([flush]) * (
            64 * record
        )
    assert data[16 * 64 * record :] == b"".join(b"%06d" % i for i in range(IOV_MAX * 2 + 10))


@needs_uring
def test_a_synced_writev_is_one_writev_linked_to_one_fdatasync(tmp_path: Path) -> None:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, UringEventLoop)
        file = await UringBackend().open(str(tmp_path / "f"), create=True)
        before = loop.stats().sqes_submitted
        await file.writev([b"x" * 100] * 64, 0, sync=True)
        used = loop.stats().sqes_submitted - before
        await file.close()
        return used

    with asyncio.Runner(loop_factory=UringEventLoop) as runner:
        assert runner.run(main()) == 2


def test_a_durable_write_of_several_files(env: Env, tmp_path: Path) -> None:
    """A flush's shape: many buffers to one file (more than IOV_MAX: chunks of
    one chain) and one to another, at offsets past each file's start."""
    backend, run = env
    many = [b"%06d" % i for i in range(IOV_MAX * 2 + 10)]

    async def main() -> tuple[bytes, bytes, int, int]:
        store = await backend.open(str(tmp_path / "s"), create=True)
        index = await backend.open(str(tmp_path / "i"), create=True)
        await store.writev([b"head"], 0, sync=True)
        await backend.write_durably(
            [DurableWrite(store, many, 4), DurableWrite(index, [bytearray(b"entry")], 16)]
        )
        got = (await store.read_at(1 << 20, 0), await index.read_at(100, 0), store.size, index.size)
        await store.close()
        await index.close()
        return got

    store_bytes, index_bytes, store_size, index_size = run(main())
    assert store_bytes == b"head" + b"".join(many) and store_size == len(store_bytes)
    assert index_bytes == bytes(16) + b"entry" and index_size == 21


@needs_uring
def test_a_durable_write_is_a_chain_per_file_submitted_together(tmp_path: Path) -> None:
    """Each file's writev linked to its own fdatasync (so the syncs run side by
    side), both chains in the ring before the loop waits once for them."""

    async def main() -> tuple[int, list[tuple[int, int]]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, UringEventLoop)
        backend = UringBackend()
        store = await backend.open(str(tmp_path / "s"), create=True)
        index = await backend.open(str(tmp_path / "i"), create=True)
        ring = loop._ring
        seen: list[tuple[int, int]] = []
        prep = ring.prep

        def spy(opcode: int, *args: Any, **kwargs: Any) -> int:
            seen.append((opcode, args[7] if len(args) > 7 else kwargs.get("sqe_flags", 0)))
            return prep(opcode, *args, **kwargs)

        ring.prep = spy  # type: ignore[method-assign]
        before = loop.stats().sqes_submitted
        await backend.write_durably(
            [DurableWrite(store, [b"x" * 100] * 64, 0), DurableWrite(index, [b"y" * 48], 0)]
        )
        used = loop.stats().sqes_submitted - before
        del ring.prep
        await store.close()
        await index.close()
        return used, seen

    with asyncio.Runner(loop_factory=UringEventLoop) as runner:
        used, seen = runner.run(main())
    link = abi.IOSQE_IO_LINK
    assert used == 4
    assert seen == [
        (abi.OP_WRITEV, link),
        (abi.OP_FSYNC, 0),
        (abi.OP_WRITEV, link),
        (abi.OP_FSYNC, 0),
    ]


@needs_uring
def test_uring_backend_refuses_the_stock_loop(tmp_path: Path) -> None:
    async def main() -> None:
        with pytest.raises(TypeError, match="UringEventLoop"):
            await UringBackend().open(str(tmp_path / "f"), create=True)

    asyncio.run(main())
