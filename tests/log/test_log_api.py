"""The public interface of the segmented log and its errors."""

from __future__ import annotations

import asyncio

import pytest

from laminar.log import (
    AppendTooLarge,
    IndexOutOfRange,
    LogClosed,
    LogConfig,
    LogRecord,
    SegmentedLog,
)

from .conftest import LogEnv


def test_append_read_and_bounds(env: LogEnv) -> None:
    async def main() -> None:
        log = await SegmentedLog.open(env.directory, LogConfig(), backend=env.backend)
        assert (log.lowest_index, log.highest_index) == (0, 0)
        first = await log.append([b"v1", b"v2"], term=0)
        assert first == 0
        assert await log.append([b"v3"], term=7) == 2
        assert (log.lowest_index, log.highest_index) == (0, 3)
        rec = await log.read(2)
        assert isinstance(rec, LogRecord)
        assert (rec.index, rec.term, rec.value) == (2, 7, b"v3")
        assert rec.timestamp_ms > 0
        assert [r.value for r in await log.read_range(0)] == [b"v1", b"v2", b"v3"]
        await log.close()

    env.run(main)


def test_errors_are_specific(env: LogEnv) -> None:
    async def main() -> None:
        config = LogConfig(segment_bytes=1000, overflow_bytes=100)
        log = await SegmentedLog.open(env.directory, config, backend=env.backend)
        await log.append([b"x"])
        with pytest.raises(IndexOutOfRange, match=r"outside the log: it holds \[0, 1\)"):
            await log.read(1)
        with pytest.raises(IndexOutOfRange):
            await log.read(-1)
        with pytest.raises(IndexOutOfRange):
            await log.read_range(2)
        with pytest.raises(AppendTooLarge, match="append threshold of 1100 bytes"):
            await log.append([b"y" * 600, b"z" * 501])
        with pytest.raises(ValueError, match="at least one record"):
            await log.append([])
        with pytest.raises(IndexOutOfRange):
            await log.truncate(5)
        await log.close()
        with pytest.raises(LogClosed):
            await log.append([b"late"])
        with pytest.raises(LogClosed):
            await log.read(0)
        await log.close()  # idempotent

    env.run(main)


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="flush must be one of"):
        LogConfig(flush="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="segment_bytes"):
        LogConfig(segment_bytes=0)


def test_read_range_limits(env: LogEnv) -> None:
    async def main() -> None:
        log = await SegmentedLog.open(env.directory, backend=env.backend)
        await log.append([bytes([i]) * 100 for i in range(10)])
        assert len(await log.read_range(0, max_bytes=250)) == 2
        assert len(await log.read_range(0, max_records=3)) == 3
        # One record always comes back, however small the byte budget.
        assert [r.index for r in await log.read_range(4, max_bytes=1)] == [4]
        assert await log.read_range(10) == []
        with pytest.raises(ValueError):
            await log.read_range(0, max_records=0)
        await log.close()

    env.run(main)


def test_rollover_truncate_and_reopen(env: LogEnv) -> None:
    async def main() -> None:
        config = LogConfig(segment_bytes=1000, preallocate_bytes=4096)
        log = await SegmentedLog.open(env.directory, config, backend=env.backend)
        values = [bytes([i % 251]) * (50 + i) for i in range(100)]
        for start in range(0, 100, 7):
            await log.append(values[start : start + 7], term=start)
        assert log.segment_count > 5
        assert [r.value for r in await log.read_range(0, max_bytes=1 << 30)] == values
        await log.truncate(42)
        assert log.highest_index == 42
        assert await log.append([b"after"]) == 42
        await log.close()

        log = await SegmentedLog.open(env.directory, config, backend=env.backend)
        assert (log.lowest_index, log.highest_index) == (0, 43)
        got = await log.read_range(0, max_bytes=1 << 30)
        assert [r.value for r in got] == [*values[:42], b"after"]
        assert got[10].term == 7
        await log.truncate(0)
        assert (log.lowest_index, log.highest_index, log.segment_count) == (0, 0, 1)
        await log.close()

    env.run(main)


def test_concurrent_appends_share_flushes(env: LogEnv) -> None:
    """Group commit: 32 concurrent appenders need far fewer than 32 flushes."""

    async def main() -> None:
        log = await SegmentedLog.open(env.directory, backend=env.backend)
        firsts = await asyncio.gather(*(log.append([bytes([i])] * 4) for i in range(32)))
        assert sorted(firsts) == list(range(0, 128, 4))
        assert log.flush_count < 8
        for first in firsts:
            batch = await log.read_range(first, max_records=4)
            assert len({r.value for r in batch}) == 1
        await log.close()

    env.run(main)


def test_timestamps_never_decrease_and_seek(env: LogEnv) -> None:
    async def main() -> None:
        log = await SegmentedLog.open(
            env.directory, LogConfig(segment_bytes=64), backend=env.backend
        )
        stamps = []
        for i in range(20):
            await log.append([bytes([i]) * 10])
            stamps.append((await log.read(i)).timestamp_ms)
            if i % 5 == 4:
                await asyncio.sleep(0.003)
        assert stamps == sorted(stamps)
        assert await log.index_for_timestamp(0) == 0
        assert await log.index_for_timestamp(stamps[-1] + 1) == 20
        for i, ts in enumerate(stamps):
            assert await log.index_for_timestamp(ts) == stamps.index(ts)
            assert (await log.read(await log.index_for_timestamp(ts))).timestamp_ms >= ts
            assert i >= stamps.index(ts)
        await log.close()

    env.run(main)


def test_wait_for_append(env: LogEnv) -> None:
    async def main() -> None:
        log = await SegmentedLog.open(env.directory, backend=env.backend)
        assert not await log.wait_for_append(0, timeout=0.01)
        waiter = asyncio.ensure_future(log.wait_for_append(1, timeout=5))
        await log.append([b"a"])
        await asyncio.sleep(0)
        assert not waiter.done()
        await log.append([b"b"])
        assert await waiter
        await log.close()

    env.run(main)


def test_timed_out_and_cancelled_readers_leave_no_waiter_behind(env: LogEnv) -> None:
    """5,000 timed-out long-polls on an idle log once left 5,000 futures behind."""

    async def main() -> None:
        log = await SegmentedLog.open(env.directory, backend=env.backend)
        for _ in range(200):
            assert not await log.wait_for_append(0, timeout=0)
        waiting = [asyncio.ensure_future(log.wait_for_append(0, timeout=60)) for _ in range(50)]
        await asyncio.sleep(0)
        assert log.waiting_readers == 50
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        assert log.waiting_readers == 0
        await log.close()

    env.run(main)


def test_roll_over_and_remove_before_drop_a_compacted_prefix(env: LogEnv) -> None:
    async def main() -> None:
        log = await SegmentedLog.open(env.directory, LogConfig(), backend=env.backend)
        assert not await log.roll_over()  # nothing to seal
        assert log.write_segment_first_timestamp_ms is None
        await log.append([b"a", b"b"])
        assert log.write_segment_first_timestamp_ms is not None
        assert await log.roll_over() and log.segment_count == 2
        assert log.write_segment_first_timestamp_ms is None
        await log.append([b"c"])
        assert await log.remove_before(1) == 0  # segment 0 still holds index 1
        assert await log.remove_before(2) == 1
        assert (log.lowest_index, log.highest_index) == (2, 3)
        assert await log.remove_before(10) == 0  # the write segment stays
        await log.close()
        log = await SegmentedLog.open(env.directory, LogConfig(), backend=env.backend)
        assert [r.value for r in await log.read_range(log.lowest_index)] == [b"c"]
        await log.close()

    env.run(main)


@pytest.mark.parametrize("flush", ["interval", "never"])
def test_relaxed_flush_policies_still_persist_on_close(env: LogEnv, flush: str) -> None:
    async def main() -> None:
        config = LogConfig(flush=flush, flush_interval_ms=5)  # type: ignore[arg-type]
        log = await SegmentedLog.open(env.directory, config, backend=env.backend)
        await asyncio.gather(*(log.append([bytes([i]) * 10]) for i in range(50)))
        await asyncio.sleep(0.02)
        await log.close()
        log = await SegmentedLog.open(env.directory, config, backend=env.backend)
        assert log.highest_index == 50
        await log.close()

    env.run(main)


def test_append_stamped_reports_the_stored_timestamp(env: LogEnv) -> None:
    async def main() -> None:
        log = await SegmentedLog.open(env.directory, backend=env.backend)
        first, timestamp_ms = await log.append_stamped([b"a", b"b"])
        assert [(await log.read(first + i)).timestamp_ms for i in range(2)] == [timestamp_ms] * 2
        await log.close()

    env.run(main)


def test_top_bit_terms_are_counted_over_segments_and_after_a_truncation(env: LogEnv) -> None:
    """What lag counts on: records whose term has the top bit set (Raft's own
    entries), over any range; a segment's kept count is dropped when a
    truncation rewrites its end with as many records as before."""
    top = 1 << 63

    async def main() -> None:
        config = LogConfig(segment_bytes=1000)
        log = await SegmentedLog.open(env.directory, config, backend=env.backend)
        terms = [top | 2 if i % 5 == 0 else 2 for i in range(60)]
        for term in terms:
            await log.append([bytes(40)], term=term)
        assert log.segment_count > 2

        def expected(lo: int, hi: int) -> int:
            return sum(1 for t in terms[lo:hi] if t & top)

        for lo, hi in ((0, 60), (0, 1), (3, 41), (17, 60), (59, 60), (30, 30)):
            assert log.count_top_bit_terms(lo, hi) == expected(lo, hi), (lo, hi)
        await log.truncate(55)  # within the last segment: then as many records again
        terms[55:] = [3] * 5
        for term in terms[55:]:
            await log.append([bytes(40)], term=term)
        assert log.count_top_bit_terms(0, 60) == expected(0, 60)
        await log.close()

    env.run(main)
