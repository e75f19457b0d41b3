"""Hand-made damage to real files: torn tails are trimmed, corruption is reported."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from laminar.log import LogConfig, LogCorrupted, RecordCorrupted, SegmentedLog
from laminar.log.index import ENTRY_BYTES, HEADER_BYTES, MAX_FLUSHES_IN_FLIGHT

VALUES = [bytes([i]) * (100 + i) for i in range(40)]
CONFIG = LogConfig(segment_bytes=1 << 20)


async def write_one_flush_per_record(directory: Path, config: LogConfig = CONFIG) -> None:
    log = await SegmentedLog.open(directory, config)
    for value in VALUES:
        await log.append([value])
    await log.close()


def files(directory: Path, suffix: str) -> list[Path]:
    return sorted(directory.glob(f"*{suffix}"))


async def read_all(log: SegmentedLog) -> list[bytes]:
    return [r.value for r in await log.read_range(log.lowest_index, max_bytes=1 << 30)]


def test_truncated_index_entry_drops_only_the_torn_record(tmp_path: Path) -> None:
    async def main() -> None:
        await write_one_flush_per_record(tmp_path)
        (index,) = files(tmp_path, ".index")
        os.truncate(index, index.stat().st_size - 10)
        log = await SegmentedLog.open(tmp_path, CONFIG)
        assert await read_all(log) == VALUES[:-1]
        assert await log.append([b"next"]) == len(VALUES) - 1
        await log.close()
        log = await SegmentedLog.open(tmp_path, CONFIG)
        assert await read_all(log) == [*VALUES[:-1], b"next"]
        await log.close()

    asyncio.run(main())


@pytest.mark.parametrize("suffix", [".store", ".index"])
def test_garbage_after_the_last_record_is_trimmed(tmp_path: Path, suffix: str) -> None:
    async def main() -> None:
        await write_one_flush_per_record(tmp_path)
        (path,) = files(tmp_path, suffix)
        with path.open("ab") as f:
            f.write(os.urandom(777))
        log = await SegmentedLog.open(tmp_path, CONFIG)
        assert await read_all(log) == VALUES
        await log.append([b"after the garbage"])
        await log.close()
        log = await SegmentedLog.open(tmp_path, CONFIG)
        assert await read_all(log) == [*VALUES, b"after the garbage"]
        await log.close()
        store_bytes = sum(map(len, VALUES)) + len(b"after the garbage")
        assert files(tmp_path, ".store")[0].stat().st_size == store_bytes
        entries = len(VALUES) + 1
        assert files(tmp_path, ".index")[0].stat().st_size == HEADER_BYTES + entries * ENTRY_BYTES

    asyncio.run(main())


def test_flipped_payload_byte_is_reported_not_served_and_not_trimmed(tmp_path: Path) -> None:
    victim = 5
    assert len(VALUES) - victim > MAX_FLUSHES_IN_FLIGHT  # old enough to be acknowledged

    async def main() -> None:
        await write_one_flush_per_record(tmp_path)
        (store,) = files(tmp_path, ".store")
        with store.open("r+b") as f:
            f.seek(sum(map(len, VALUES[:victim])) + 3)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xFF]))
        log = await SegmentedLog.open(tmp_path, CONFIG)
        assert log.highest_index == len(VALUES)  # nothing after the damage was dropped
        with pytest.raises(RecordCorrupted, match="do not match the checksum"):
            await log.read(victim)
        assert [r.value for r in await log.read_range(0, 1 << 30)] == VALUES[:victim]
        with pytest.raises(RecordCorrupted):
            await log.read_range(victim, 1 << 30)
        assert len(await log.read_batch(0, 1 << 30)) == victim  # stops before the damage
        with pytest.raises(RecordCorrupted):
            await log.read_batch(victim, 1 << 30)
        assert [r.value for r in await log.read_range(victim + 1, 1 << 30)] == VALUES[victim + 1 :]
        await log.close()

    asyncio.run(main())


def test_flipped_byte_in_a_sealed_segment(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1000)

    async def main() -> None:
        await write_one_flush_per_record(tmp_path, config)
        first_store = files(tmp_path, ".store")[0]
        with first_store.open("r+b") as f:
            f.seek(0)
            f.write(b"\xff\xff")
        log = await SegmentedLog.open(tmp_path, config)
        assert log.highest_index == len(VALUES)
        with pytest.raises(RecordCorrupted):
            await log.read(0)
        assert (await log.read(1)).value == VALUES[1]
        await log.close()

    asyncio.run(main())


def test_damaged_header_with_entries_refuses_to_guess(tmp_path: Path) -> None:
    async def main() -> None:
        await write_one_flush_per_record(tmp_path)
        (index,) = files(tmp_path, ".index")
        with index.open("r+b") as f:
            f.write(b"XXXX")
        with pytest.raises(LogCorrupted, match="header is lost or damaged"):
            await SegmentedLog.open(tmp_path, CONFIG)

    asyncio.run(main())


def test_missing_middle_segment_is_corruption(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1000)

    async def main() -> None:
        await write_one_flush_per_record(tmp_path, config)
        middle = files(tmp_path, ".store")[2]
        middle.unlink()
        middle.with_suffix(".index").unlink()
        with pytest.raises(LogCorrupted, match="records are missing"):
            await SegmentedLog.open(tmp_path, config)

    asyncio.run(main())


def test_leftover_files_of_an_interrupted_removal_are_cleaned(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1000)

    async def main() -> None:
        await write_one_flush_per_record(tmp_path, config)
        # Retention removes the index first, then the store: crash in between.
        files(tmp_path, ".index")[0].unlink()
        log = await SegmentedLog.open(tmp_path, config)
        assert log.lowest_index > 0
        assert await read_all(log) == VALUES[log.lowest_index :]
        await log.close()
        assert len(files(tmp_path, ".store")) == len(files(tmp_path, ".index"))

    asyncio.run(main())
