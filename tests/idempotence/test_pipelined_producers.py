"""Pipelined idempotent batches of one producer on one partition (`laminar.shards.producers`).

Batches are decided and placed in arrival order without waiting for the one
before to be durable. What must hold: the log never holds a producer's
sequences with a gap or twice; a resend of a batch still in flight gets its
first copy's index; a batch refused before it was placed takes no later batch
into the log past it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from laminar.log import LogConfig, SegmentedLog
from laminar.log.simdisk import Fault, SimulatedDisk
from laminar.log.storage import SyscallBackend
from laminar.shards.errors import RequestError
from laminar.shards.producers import IdempotentProducers
from laminar.shards.replica import LocalReplica
from laminar.wire import ErrorCode, ProduceRequest

PRODUCER = 0x51


def _batch(sequence: int, *values: bytes) -> ProduceRequest:
    return ProduceRequest.from_values(1, list(values), producer_id=PRODUCER, sequence=sequence)


async def _open(tmp_path: Path) -> LocalReplica:
    config = LogConfig(segment_bytes=1 << 20, flush="always", preallocate_bytes=0)
    return LocalReplica(await SegmentedLog.open(str(tmp_path), config, backend=SyscallBackend()))


async def _stored(replica: LocalReplica) -> list[bytes]:
    return [r.value for r in await replica.read_range(0, 1 << 30, 1 << 20)]


def test_pipelined_batches_land_in_order_and_share_flushes(tmp_path: Path) -> None:
    async def main() -> None:
        replica = await _open(tmp_path)
        producers = IdempotentProducers()
        batches = [_batch(2 * i, b"a%d" % i, b"b%d" % i) for i in range(50)]
        flushes = replica.log.flush_count
        answers = await asyncio.gather(*(producers.append(replica, b) for b in batches))
        assert [first for first, _, _ in answers] == [2 * i for i in range(50)]
        assert [appended for _, _, appended in answers] == [2] * 50
        assert await _stored(replica) == [blob for b in batches for blob in b.blobs]
        assert replica.log.flush_count - flushes < 50  # not one flush per batch
        await replica.log.close()

    asyncio.run(main())


def test_a_resend_of_a_batch_in_flight_gets_its_first_index(tmp_path: Path) -> None:
    async def main() -> None:
        replica = await _open(tmp_path)
        producers = IdempotentProducers()
        first_copy = asyncio.create_task(producers.append(replica, _batch(0, b"x")))
        await asyncio.sleep(0)  # placed, not yet durable
        again = await producers.append(replica, _batch(0, b"x"))
        assert again[2] == 0 and again[0] == (await first_copy)[0]
        assert await _stored(replica) == [_batch(0, b"x").blobs[0]]
        await replica.log.close()

    asyncio.run(main())


def test_a_batch_refused_before_it_was_placed_lets_no_later_one_past_it(
    tmp_path: Path,
) -> None:
    """The first batch is too large for the log (refused, nothing appended);
    the second was sent right behind it and continues its sequences: it must
    be refused as out of order, or the log would hold a gap the producer
    could never fill (a resend of the first would then count as written)."""

    async def main() -> None:
        replica = await _open(tmp_path)
        producers = IdempotentProducers()
        await producers.append(replica, _batch(0, b"ok"))
        too_large = _batch(1, b"z" * (replica.log.config.append_threshold_bytes + 1))
        behind = _batch(2, b"next")
        results = await asyncio.gather(
            producers.append(replica, too_large),
            producers.append(replica, behind),
            return_exceptions=True,
        )
        assert isinstance(results[0], Exception)
        assert isinstance(results[1], RequestError)
        assert results[1].code is ErrorCode.OUT_OF_ORDER_SEQUENCE
        assert await _stored(replica) == [_batch(0, b"ok").blobs[0]]
        await replica.log.close()

    asyncio.run(main())


def test_batches_placed_behind_one_whose_flush_failed_fail_with_it(tmp_path: Path) -> None:
    """Two pipelined batches placed, then their flush fails: both fail, nothing
    of them is served, and on the log opened again both are appended once,
    while a resend of a batch that did land is a duplicate."""

    async def main() -> None:
        disk = SimulatedDisk()
        config = LogConfig(segment_bytes=1 << 20, flush="always", preallocate_bytes=0)
        replica = LocalReplica(await SegmentedLog.open("/p", config, backend=disk))
        producers = IdempotentProducers()
        for i in range(3):
            await producers.append(replica, _batch(i, b"r%d" % i))
        disk.inject(Fault("sync", path_contains=".store", times=None))
        results = await asyncio.gather(
            producers.append(replica, _batch(3, b"r3")),
            producers.append(replica, _batch(4, b"r4")),
            return_exceptions=True,
        )
        assert all(isinstance(r, Exception) for r in results), results
        disk.faults.clear()
        await replica.log.close()
        replica = LocalReplica(await SegmentedLog.open("/p", config, backend=disk))
        first, _, appended = await producers.append(replica, _batch(2, b"r2"))
        assert (first, appended) == (2, 0)
        for i in (3, 4):
            first, _, appended = await producers.append(replica, _batch(i, b"r%d" % i))
            assert (first, appended) == (i, 1)
        assert await _stored(replica) == [_batch(i, b"r%d" % i).blobs[0] for i in range(5)]
        await replica.log.close()

    asyncio.run(main())


def test_a_gap_behind_batches_in_flight_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        replica = await _open(tmp_path)
        producers = IdempotentProducers()
        results = await asyncio.gather(
            producers.append(replica, _batch(0, b"a", b"b")),
            producers.append(replica, _batch(3, b"d")),  # 2 was never sent
            return_exceptions=True,
        )
        assert results[0] == (0, results[0][1], 2)  # type: ignore[index]
        assert isinstance(results[1], RequestError)
        assert results[1].code is ErrorCode.OUT_OF_ORDER_SEQUENCE
        assert await _stored(replica) == list(_batch(0, b"a", b"b").blobs)
        await replica.log.close()

    asyncio.run(main())
