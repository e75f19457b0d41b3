"""Hand-made damage to real files: torn tails are trimmed, corruption is reported."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from laminar.log import LogConfig, LogCorrupted, RecordCorrupted, SegmentedLog
from laminar.log.errors import UnsupportedFormat
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


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_damage_at_the_end_of_a_sealed_segment_is_kept_and_reported(tmp_path: Path) -> None:
    """A sealed segment was durable whole before the next one existed: a damaged
    entry near its end is not a torn tail. Nothing is trimmed; the damaged
    record raises, its neighbours (in that segment and after it) read fine."""
    config = LogConfig(segment_bytes=1000)

    async def main() -> None:
        await write_one_flush_per_record(tmp_path, config)
        first_index = files(tmp_path, ".index")[0]
        entries = (first_index.stat().st_size - HEADER_BYTES) // ENTRY_BYTES
        victim = entries - 2
        with first_index.open("r+b") as f:  # flip a bit of the victim's term
            f.seek(HEADER_BYTES + victim * ENTRY_BYTES + 24)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x01]))
        damaged = snapshot(tmp_path)
        log = await SegmentedLog.open(tmp_path, config)
        assert log.highest_index == len(VALUES)
        with pytest.raises(RecordCorrupted):
            await log.read(victim)
        assert [r.value for r in await log.read_range(0, 1 << 30)] == VALUES[:victim]
        assert [r.value for r in await log.read_range(victim + 1, 1 << 30)] == VALUES[victim + 1 :]
        await log.close()
        after = snapshot(tmp_path)
        for name in (first_index.name, first_index.with_suffix(".store").name):
            assert after[name] == damaged[name], f"{name} was changed"

    asyncio.run(main())


def test_a_lost_index_is_an_error_and_the_store_is_not_touched(tmp_path: Path) -> None:
    """An index reduced to a zeroed header (its entries gone too) beside a store
    full of acknowledged records: refuse, never re-create the segment (which
    would cut the store to nothing)."""

    async def main() -> None:
        await write_one_flush_per_record(tmp_path)
        (index,) = files(tmp_path, ".index")
        with index.open("r+b") as f:
            f.write(bytes(HEADER_BYTES))
            f.truncate(HEADER_BYTES)
        before = snapshot(tmp_path)
        with pytest.raises(LogCorrupted, match="header is lost or damaged but records follow"):
            await SegmentedLog.open(tmp_path, CONFIG)
        assert snapshot(tmp_path) == before

    asyncio.run(main())


def test_recovery_decides_before_it_touches_a_file(tmp_path: Path) -> None:
    """A gap between segments is an error; the torn tail of the last segment,
    which recovery would otherwise trim, is left exactly as it was."""
    config = LogConfig(segment_bytes=1000)

    async def main() -> None:
        await write_one_flush_per_record(tmp_path, config)
        middle = files(tmp_path, ".store")[1]
        middle.unlink()
        middle.with_suffix(".index").unlink()
        with files(tmp_path, ".store")[-1].open("ab") as f:
            f.write(b"torn tail bytes")
        before = snapshot(tmp_path)
        with pytest.raises(LogCorrupted, match="records are missing"):
            await SegmentedLog.open(tmp_path, config)
        assert snapshot(tmp_path) == before

    asyncio.run(main())


def test_a_damaged_index_entry_is_never_served(tmp_path: Path) -> None:
    """Its term flipped, the entry fails its checksum: read, read_range and
    read_batch all refuse it, rather than serve metadata nobody wrote."""
    victim = 5
    assert len(VALUES) - victim > MAX_FLUSHES_IN_FLIGHT  # acknowledged for sure

    async def main() -> None:
        log = await SegmentedLog.open(tmp_path, CONFIG)
        for value in VALUES:
            await log.append([value], term=3)
        await log.close()
        (index,) = files(tmp_path, ".index")
        with index.open("r+b") as f:
            f.seek(HEADER_BYTES + victim * ENTRY_BYTES + 24 + 2)  # the term's third byte
            f.write(b"\x01")
        log = await SegmentedLog.open(tmp_path, CONFIG)
        assert log.highest_index == len(VALUES)
        with pytest.raises(RecordCorrupted):
            await log.read(victim)
        with pytest.raises(RecordCorrupted):
            await log.read_range(victim, 1 << 30)
        with pytest.raises(RecordCorrupted):
            await log.read_batch(victim, 1 << 30)
        records = await log.read_range(0, 1 << 30)
        assert [r.index for r in records] == list(range(victim))
        assert {r.term for r in records} == {3}
        assert len(await log.read_batch(0, 1 << 30)) == victim
        after = await log.read_range(victim + 1, 1 << 30)
        assert {r.term for r in after} == {3} and len(after) == len(VALUES) - victim - 1
        await log.close()

    asyncio.run(main())


def test_a_log_of_another_format_version_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    async def main() -> None:
        await write_one_flush_per_record(tmp_path)
        (index,) = files(tmp_path, ".index")
        with index.open("r+b") as f:
            f.seek(4)
            f.write((1).to_bytes(2, "little"))  # version 1: marks inside the checksum
        before = snapshot(tmp_path)
        with pytest.raises(UnsupportedFormat, match=r"format version 1 .* reads version 2"):
            await SegmentedLog.open(tmp_path, CONFIG)
        assert snapshot(tmp_path) == before

    asyncio.run(main())
