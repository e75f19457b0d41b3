"""Pipelined idempotent batches of one producer on one partition (`laminar.shards.producers`).

Batches are decided and placed in arrival order without waiting for the one
before to be durable. What must hold: the log never holds a producer's
sequences with a gap or twice; a resend of a batch still in flight gets its
first copy's index; a batch refused before it was placed takes no later batch
into the log past it; a batch that overtook its predecessors waits for them
(boundedly). The first tests run twice: through `append` alone (the
general request path), and as a shard serves produces, trying the fast path
(`place_nowait`, no task) first and `append` when it declines.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import pytest

from laminar.log import LogConfig, LogRecord, SegmentedLog
from laminar.log.simdisk import Fault, SimulatedDisk
from laminar.log.storage import SyscallBackend
from laminar.replication.replica import LocalReplica
from laminar.shards.producers import IdempotentProducers
from laminar.wire import ErrorCode, ProduceRequest
from laminar.wire.errors import RequestError

PRODUCER = 0x51


Serve = Callable[
    [IdempotentProducers, LocalReplica, ProduceRequest], Awaitable[tuple[int, int, int]]
]


async def _as_a_shard(
    producers: IdempotentProducers, replica: LocalReplica, req: ProduceRequest
) -> tuple[int, int, int]:
    """What `Handlers.place_produce` then `Handlers.produce` do with a batch."""
    staged = producers.place_nowait(replica.log, req)
    if staged is None:
        return await producers.append(replica, req)
    first, timestamp_ms, done = staged
    await done
    return first, timestamp_ms, len(req.blobs)


@pytest.fixture(params=["general", "shard"])
def serve(request: pytest.FixtureRequest) -> Serve:
    return IdempotentProducers.append if request.param == "general" else _as_a_shard


def _batch(sequence: int, *values: bytes) -> ProduceRequest:
    return ProduceRequest.from_values(1, list(values), producer_id=PRODUCER, sequence=sequence)


def _other(sequence: int) -> ProduceRequest:
    """A batch of a second producer."""
    return ProduceRequest.from_values(
        1, [b"q%d" % sequence], producer_id=PRODUCER + 1, sequence=sequence
    )


async def _open(tmp_path: Path) -> LocalReplica:
    config = LogConfig(segment_bytes=1 << 20, flush="always", preallocate_bytes=0)
    return LocalReplica(await SegmentedLog.open(str(tmp_path), config, backend=SyscallBackend()))


async def _stored(replica: LocalReplica) -> list[bytes]:
    return [r.value for r in await replica.read_range(0, 1 << 30, 1 << 20)]


def test_pipelined_batches_land_in_order_and_share_flushes(tmp_path: Path, serve: Serve) -> None:
    async def main() -> None:
        replica = await _open(tmp_path)
        producers = IdempotentProducers()
        batches = [_batch(2 * i, b"a%d" % i, b"b%d" % i) for i in range(50)]
        flushes = replica.log.flush_count
        answers = await asyncio.gather(*(serve(producers, replica, b) for b in batches))
        assert [first for first, _, _ in answers] == [2 * i for i in range(50)]
        assert [appended for _, _, appended in answers] == [2] * 50
        assert await _stored(replica) == [blob for b in batches for blob in b.blobs]
        assert replica.log.flush_count - flushes < 50  # not one flush per batch
        await replica.log.close()

    asyncio.run(main())


def test_a_resend_of_a_batch_in_flight_gets_its_first_index(tmp_path: Path, serve: Serve) -> None:
    async def main() -> None:
        replica = await _open(tmp_path)
        producers = IdempotentProducers()
        first_copy = asyncio.create_task(serve(producers, replica, _batch(0, b"x")))
        await asyncio.sleep(0)  # placed, not yet durable
        again = await serve(producers, replica, _batch(0, b"x"))
        assert again[2] == 0 and again[0] == (await first_copy)[0]
        assert await _stored(replica) == [_batch(0, b"x").blobs[0]]
        await replica.log.close()

    asyncio.run(main())


def test_a_batch_refused_before_it_was_placed_lets_no_later_one_past_it(
    tmp_path: Path, serve: Serve
) -> None:
    """The first batch is too large for the log (refused, nothing appended);
    the second was sent right behind it and continues its sequences: it must
    be refused as out of order, or the log would hold a gap the producer
    could never fill (a resend of the first would then count as written)."""

    async def main() -> None:
        replica = await _open(tmp_path)
        producers = IdempotentProducers(gap_wait_s=0.1)
        await serve(producers, replica, _batch(0, b"ok"))
        too_large = _batch(1, b"z" * (replica.log.config.append_threshold_bytes + 1))
        behind = _batch(2, b"next")
        results = await asyncio.gather(
            serve(producers, replica, too_large),
            serve(producers, replica, behind),
            return_exceptions=True,
        )
        assert isinstance(results[0], Exception)
        assert isinstance(results[1], RequestError)
        assert results[1].code is ErrorCode.OUT_OF_ORDER_SEQUENCE
        assert await _stored(replica) == [_batch(0, b"ok").blobs[0]]
        await replica.log.close()

    asyncio.run(main())


def test_batches_placed_behind_one_whose_flush_failed_fail_with_it(
    tmp_path: Path, serve: Serve
) -> None:
    """Two pipelined batches placed, then their flush fails: both fail, nothing
    of them is served, and on the log opened again both are appended once,
    while a resend of a batch that did land is a duplicate."""

    async def main() -> None:
        disk = SimulatedDisk()
        config = LogConfig(segment_bytes=1 << 20, flush="always", preallocate_bytes=0)
        replica = LocalReplica(await SegmentedLog.open("/p", config, backend=disk))
        producers = IdempotentProducers()
        for i in range(3):
            await serve(producers, replica, _batch(i, b"r%d" % i))
        disk.inject(Fault("sync", path_contains=".store", times=None))
        results = await asyncio.gather(
            serve(producers, replica, _batch(3, b"r3")),
            serve(producers, replica, _batch(4, b"r4")),
            return_exceptions=True,
        )
        assert all(isinstance(r, Exception) for r in results), results
        disk.faults.clear()
        await replica.log.close()
        replica = LocalReplica(await SegmentedLog.open("/p", config, backend=disk))
        first, _, appended = await serve(producers, replica, _batch(2, b"r2"))
        assert (first, appended) == (2, 0)
        for i in (3, 4):
            first, _, appended = await serve(producers, replica, _batch(i, b"r%d" % i))
            assert (first, appended) == (i, 1)
        assert await _stored(replica) == [_batch(i, b"r%d" % i).blobs[0] for i in range(5)]
        await replica.log.close()

    asyncio.run(main())


def test_a_batch_that_overtook_its_predecessors_waits_for_them(
    tmp_path: Path, serve: Serve
) -> None:
    """At a leader change a pipelining client's batch sent after it learned
    the new leader reaches it before the earlier ones it resends after a
    backoff: the overtaking batch waits for them, and every batch lands once,
    in sequence order (refusing it would fail the producer's batches)."""

    async def main() -> None:
        replica = await _open(tmp_path)
        producers = IdempotentProducers()
        ahead = asyncio.ensure_future(serve(producers, replica, _batch(3, b"r3")))
        await asyncio.sleep(0.05)
        assert not ahead.done()  # waiting for sequences 0-2
        resent = [_batch(i, b"r%d" % i) for i in range(3)]
        answers = await asyncio.gather(*(serve(producers, replica, b) for b in resent))
        assert [first for first, _, _ in answers] == [0, 1, 2]
        assert (await ahead)[0] == 3
        assert await _stored(replica) == [_batch(i, b"r%d" % i).blobs[0] for i in range(4)]
        await replica.log.close()

    asyncio.run(main())


def test_a_gap_never_filled_is_refused_after_the_wait(tmp_path: Path, serve: Serve) -> None:
    """Bounded: a batch whose predecessors never come is refused once the gap
    wait is over, nothing of it appended and no waiter left behind."""

    async def main() -> None:
        replica = await _open(tmp_path)
        producers = IdempotentProducers(gap_wait_s=0.2)
        with pytest.raises(RequestError) as refused:
            await serve(producers, replica, _batch(5, b"r5"))  # an unknown producer at 5
        assert refused.value.code is ErrorCode.OUT_OF_ORDER_SEQUENCE
        assert "start at sequence 0" in refused.value.message
        assert await _stored(replica) == []
        assert not producers._partitions[replica.leadership]._placed
        await replica.log.close()

    asyncio.run(main())


def test_a_gap_behind_batches_in_flight_is_refused(tmp_path: Path, serve: Serve) -> None:
    async def main() -> None:
        replica = await _open(tmp_path)
        producers = IdempotentProducers(gap_wait_s=0.1)
        results = await asyncio.gather(
            serve(producers, replica, _batch(0, b"a", b"b")),
            serve(producers, replica, _batch(3, b"d")),  # 2 was never sent
            return_exceptions=True,
        )
        assert results[0] == (0, results[0][1], 2)  # type: ignore[index]
        assert isinstance(results[1], RequestError)
        assert results[1].code is ErrorCode.OUT_OF_ORDER_SEQUENCE
        assert await _stored(replica) == list(_batch(0, b"a", b"b").blobs)
        await replica.log.close()

    asyncio.run(main())


def test_a_resend_among_batches_in_flight_is_answered_not_appended(
    tmp_path: Path, serve: Serve
) -> None:
    """A pipelining producer resends batch 1 while 1 and 2 are in flight and
    sends 3 behind it: the resend gets batch 1's index and appends nothing
    (the fast path must leave it to the general path), 3 lands after 2."""

    async def main() -> None:
        replica = await _open(tmp_path)
        producers = IdempotentProducers()
        await serve(producers, replica, _batch(0, b"r0"))  # loads the producer table
        sent = [_batch(1, b"r1"), _batch(2, b"r2"), _batch(1, b"r1"), _batch(3, b"r3")]
        answers = await asyncio.gather(*(serve(producers, replica, b) for b in sent))
        assert [(first, appended) for first, _, appended in answers] == [
            (1, 1),
            (2, 1),
            (1, 0),
            (3, 1),
        ]
        assert await _stored(replica) == [_batch(i, b"r%d" % i).blobs[0] for i in range(4)]
        await replica.log.close()

    asyncio.run(main())


class _CompletingOutOfOrder(LocalReplica):
    """A log whose appends are durable at once but reported when the test says,
    in any order (as replies resolved in one commit round may run), and whose
    readers see only the prefix reported so far (as a Raft log's committed
    prefix): the shape in which a table rebuilt while batches were in flight
    missed them."""

    def __init__(self, log: SegmentedLog) -> None:
        super().__init__(log)
        self.gates: list[tuple[int, asyncio.Future[None]]] = []
        self.reads_wait_for: asyncio.Future[None] | None = None

    async def read_range(
        self, start: int, max_bytes: int, max_records: int = 1 << 20
    ) -> list[LogRecord]:
        if self.reads_wait_for is not None:
            await self.reads_wait_for
        return await super().read_range(start, max_bytes, max_records)

    @property
    def highest_index(self) -> int:
        waiting = [first for first, gate in self.gates if not gate.done()]
        return min(waiting, default=self.log.highest_index)

    def place(self, blobs: Sequence[bytes]) -> Awaitable[tuple[int, int]] | None:
        gate = asyncio.get_running_loop().create_future()
        self.gates.append((self.log.highest_index, gate))
        placed = self.log.place_nowait(blobs)
        assert placed is not None
        return self._reported(gate, *placed)

    async def _reported(
        self, gate: asyncio.Future[None], first: int, timestamp_ms: int, done: Awaitable[object]
    ) -> tuple[int, int]:
        await done
        await gate
        return first, timestamp_ms


def test_batches_reported_out_of_order_are_remembered_in_order(tmp_path: Path) -> None:
    """Three pipelined batches whose completions run last to first, a fourth
    arriving meanwhile: each gets its own index, and a resend of the first
    is answered as a duplicate with its index. A table rebuilt while they
    were in flight (after the out-of-order completion was refused) used to
    miss them: the resend then got DUPLICATE_SEQUENCE, a later sequence
    OUT_OF_ORDER_SEQUENCE (seen on a node with 64 batches in flight)."""

    async def main() -> None:
        config = LogConfig(segment_bytes=1 << 20, flush="always", preallocate_bytes=0)
        log = await SegmentedLog.open(str(tmp_path), config, backend=SyscallBackend())
        replica = _CompletingOutOfOrder(log)
        producers = IdempotentProducers()
        first_three = [
            asyncio.create_task(producers.append(replica, _batch(i, b"v%d" % i))) for i in range(3)
        ]
        while len(replica.gates) < 3:
            await asyncio.sleep(0.001)
        replica.gates[2][1].set_result(None)
        await asyncio.sleep(0.01)
        fourth = asyncio.create_task(producers.append(replica, _batch(3, b"v3")))
        await asyncio.sleep(0.01)
        for _, gate in replica.gates[1::-1]:
            gate.set_result(None)
            await asyncio.sleep(0.01)
        while len(replica.gates) < 4:
            assert not fourth.done(), fourth.result()  # raises its refusal
            await asyncio.sleep(0.001)
        replica.gates[3][1].set_result(None)
        answers = await asyncio.gather(*first_three, fourth)
        assert [(first, appended) for first, _, appended in answers] == [(i, 1) for i in range(4)]
        again = await producers.append(replica, _batch(0, b"v0"))
        assert (again[0], again[2]) == (0, 0)
        assert await _stored(replica) == [_batch(i, b"v%d" % i).blobs[0] for i in range(4)]
        await log.close()

    asyncio.run(main())


def test_no_table_is_rebuilt_from_a_log_with_batches_in_flight(tmp_path: Path) -> None:
    """A batch whose outcome was unknown (a commit that timed out, then came)
    drops the table; another producer's batch needs it rebuilt while the
    first producer's later batches are still in flight. Had the scan run
    then, it would miss them (not yet visible), and so would the table (it
    was not there when they landed): the producer's next batch refused as
    out of order, a resend appended twice."""

    async def main() -> None:
        config = LogConfig(segment_bytes=1 << 20, flush="always", preallocate_bytes=0)
        log = await SegmentedLog.open(str(tmp_path), config, backend=SyscallBackend())
        replica = _CompletingOutOfOrder(log)
        producers = IdempotentProducers()
        first = asyncio.create_task(producers.append(replica, _other(0)))
        while not replica.gates:
            await asyncio.sleep(0.001)
        replica.gates[0][1].set_result(None)
        await first
        pipelined = [
            asyncio.create_task(producers.append(replica, _batch(i, b"v%d" % i))) for i in range(3)
        ]
        while len(replica.gates) < 4:
            await asyncio.sleep(0.001)
        replica.gates[1][1].set_exception(RequestError(ErrorCode.OUTCOME_UNKNOWN, "timed out"))
        await asyncio.sleep(0.01)
        replica.reads_wait_for = asyncio.get_running_loop().create_future()
        other = asyncio.create_task(producers.append(replica, _other(1)))
        await asyncio.sleep(0.01)
        for _, gate in replica.gates[2:4]:
            gate.set_result(None)
        await asyncio.sleep(0.01)
        replica.reads_wait_for.set_result(None)
        while len(replica.gates) < 5:
            await asyncio.sleep(0.001)
        replica.gates[4][1].set_result(None)
        await other
        results = await asyncio.gather(*pipelined, return_exceptions=True)
        assert isinstance(results[0], RequestError)
        assert [r[0] for r in results[1:]] == [2, 3]  # type: ignore[index]
        fourth = asyncio.create_task(producers.append(replica, _batch(3, b"v3")))
        while len(replica.gates) < 6:
            assert not fourth.done(), fourth.result()  # raises its refusal
            await asyncio.sleep(0.001)
        replica.gates[5][1].set_result(None)
        assert (await fourth)[2] == 1
        assert (await producers.append(replica, _batch(0, b"v0")))[2] == 0
        others, mine = (
            [_other(i).blobs[0] for i in range(2)],
            [_batch(i, b"v%d" % i).blobs[0] for i in range(4)],
        )
        assert await _stored(replica) == [others[0], *mine[:3], others[1], mine[3]]
        await log.close()

    asyncio.run(main())
