"""Idempotent produce on a shard: the producer tables of its open partition logs.

The decisions live in `laminar.shards.idempotence` (pure, with the rules and
the guarantee); this module is their I/O. For each open partition log it
keeps one `ProducerTable`, rebuilt from the log's tail on the first idempotent
produce after the log was opened (once the log has settled: nothing in it
still waiting to be committed). Each producer's batches on a partition are
decided and placed in the log one at a time, in the order they arrived, but
need not wait for the one before to be durable: batches in flight count as
appended for the next decision (it must continue after them), so a
pipelining producer keeps its batches in order and they still share
group-commit flushes (Raft commit rounds). A resend of a batch still in
flight waits for it to land, then gets the duplicate answer. Placed batches
keep their order in the log, and a batch that fails after it was placed takes
every later one with it (a failed flush fails the log; a lost Raft proposal
loses its suffix), so a gap in a producer's sequences never reaches the log.

Tables are keyed (weakly) by the replica's `leadership`: the log object of
a single node's partition, so one closed and opened again (a shard restart, a
topic deleted and created again) is a new log and gets a table rebuilt from
what is on disk, never a stale one; for a Raft replica, its current
leadership, so a new leader rebuilds from the committed log. A log whose
flush failed refuses every append until it is opened again, so a table never
has to guess whether a failed batch reached the disk; a Raft replica's
append that failed may still commit (its outcome was unknown), so any failed
append drops the table, and the rebuild waits until no batch is in flight
and the log has settled. Finished batches are recorded in the order they
were placed, whatever order their completions run in.
An append runs in its own task whose completion records the batch, so a
request cancelled half-way (a client gone, a drain) cannot leave a durable
batch unrecorded.

A batch that arrives ahead of its producer's next sequence (a gap) waits up
to `GAP_WAIT_S` for the batches before it, then is refused OUT_OF_ORDER if
they never came. At a leader change a pipelining client resends its
unanswered batches to the new leader after a backoff, while batches sent
after it learned the leader go there at once and overtake them; refusing
those would fail tens of a producer's batches per handover. A waiting batch
gives up its turn (the ones it waits for must get theirs), and each placed
batch of its producer wakes it to look again. Bounded: a connection has at
most `MAX_IN_FLIGHT` requests, a client `PRODUCER_WINDOW` batches per
partition.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref
from collections import deque
from collections.abc import Awaitable
from typing import Any, Final, NamedTuple

from laminar.log import IndexOutOfRange, SegmentedLog
from laminar.replication.replica import PartitionReplica
from laminar.shards.idempotence import (
    SCAN_BYTES_MAX,
    AppendedBatch,
    Decision,
    Owner,
    ProducerTable,
    Verdict,
)
from laminar.wire import PRODUCER_HEADER, ErrorCode, ProduceRequest, ProducerStamp, ProtocolError
from laminar.wire.errors import RequestError
from laminar.wire.records import HAS_HEADERS, producer_stamp

logger = logging.getLogger("laminar.shards")

SCAN_CHUNK_RECORDS: Final = 4096
GAP_WAIT_S: Final = 2.0
"""How long a batch past its producer's next sequence waits for the ones before it."""
_STAMP_NAME: Final = PRODUCER_HEADER.encode()


class IdempotentProducers:
    """Appends idempotent batches to this shard's partition logs."""

    def __init__(
        self, scan_bytes_max: int = SCAN_BYTES_MAX, gap_wait_s: float = GAP_WAIT_S
    ) -> None:
        self.scan_bytes_max = scan_bytes_max
        self.gap_wait_s = gap_wait_s
        self._partitions: weakref.WeakKeyDictionary[object, _Partition] = (
            weakref.WeakKeyDictionary()
        )

    async def append(
        self, log: PartitionReplica, req: ProduceRequest, owner: Owner = None
    ) -> tuple[int, int, int]:
        """Serve an idempotent produce on `log`: `(first_index, timestamp_ms,
        records appended now)`, the latter 0 for a duplicate. Raises
        `RequestError` for a bad stamp, a gap, or a forgotten duplicate.
        `owner`: the client connection (`ProducerTable`'s per-owner bound)."""
        producer_id, sequence = req.producer_id, req.sequence
        if producer_id is None or sequence is None:
            raise ValueError("not an idempotent produce")
        count = len(req.blobs)
        _check_stamps(req, ProducerStamp(producer_id, sequence, count))
        log.check_writable()  # a follower's table is never consulted
        key = log.leadership
        part = self._partitions.get(key)
        if part is None:
            part = self._partitions[key] = _Partition()
        # A producer's batches are decided and placed in the log in the order
        # they arrived (a pipelining client sends them in sequence order): each
        # takes its turn before this coroutine first yields, and holds it only
        # until its batch is placed, not until it is durable.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.gap_wait_s
        outcome: asyncio.Task[tuple[int, int]] | tuple[int, int, int] | _Gap
        while True:
            ahead = part.turns.get(producer_id)
            turn = part.turns[producer_id] = loop.create_future()
            try:
                if ahead is not None:
                    await asyncio.wait([ahead])
                outcome = await self._decide_and_place(log, req, part, owner)
            except _Gap as gap:
                outcome = gap
            finally:
                turn.set_result(None)
                if part.turns.get(producer_id) is turn:
                    del part.turns[producer_id]
            if not isinstance(outcome, _Gap):
                break
            if not await part.progress(producer_id, deadline - loop.time()):
                raise RequestError(ErrorCode.OUT_OF_ORDER_SEQUENCE, outcome.reason)
        if isinstance(outcome, asyncio.Task):
            first, timestamp_ms = await asyncio.shield(outcome)
            return first, timestamp_ms, count
        return outcome

    async def _decide_and_place(
        self,
        log: PartitionReplica,
        req: ProduceRequest,
        part: _Partition,
        owner: Owner,
    ) -> asyncio.Task[tuple[int, int]] | tuple[int, int, int]:
        """The placed batch's append (APPEND), or a duplicate's answer; raises
        the refusals. Batches in flight count as appended for what comes next:
        the next one must continue after the last of them."""
        producer_id, sequence, count = req.producer_id, req.sequence, len(req.blobs)
        assert producer_id is not None and sequence is not None
        while True:
            flights = part.in_flight.get(producer_id)
            if not flights:  # this producer places nothing while it holds the turn
                table = await part.table(log, self.scan_bytes_max)
                decision = table.decide(producer_id, sequence, count)
                break
            expected = flights[-1].end_sequence
            if sequence == expected:
                decision = Decision(Verdict.APPEND, expected)
                break
            if sequence > expected:
                raise _Gap(
                    f"producer {producer_id:#018x} must continue at sequence {expected}, but "
                    f"the batch starts at {sequence}: sequences {expected}..{sequence - 1} "
                    "were never appended (send them first)"
                )
            # Sent again while (part of) it may be in flight: decide once they land.
            await asyncio.wait([flight.task for flight in flights])
        if decision.verdict is Verdict.APPEND:
            task, placed = self._place(log, req.blobs, part, (producer_id, sequence, count), owner)
            if not placed:  # placed inside the append: keep the turn until it is done
                await asyncio.wait([task])
            return task
        if decision.verdict is Verdict.DUPLICATE:
            assert decision.first_index is not None and decision.timestamp_ms is not None
            return decision.first_index, decision.timestamp_ms, 0
        known = decision.expected_sequence
        if decision.verdict is Verdict.OUT_OF_ORDER and (known is None or sequence > known):
            raise _Gap(decision.reason)
        code = (
            ErrorCode.DUPLICATE_SEQUENCE
            if decision.verdict is Verdict.DUPLICATE_INDEX_UNKNOWN
            else ErrorCode.OUT_OF_ORDER_SEQUENCE
        )
        raise RequestError(code, decision.reason)

    def place_nowait(
        self, log: SegmentedLog, req: ProduceRequest, owner: Owner = None
    ) -> tuple[int, int, asyncio.Future[None]] | None:
        """`append` for a partition of this node alone, without a wait: the
        batch placed now (`SegmentedLog.place_nowait`) when its producer's
        table is loaded, none of the producer's batches is being decided, the
        stamp is right, and the batch continues the producer's sequence (a
        pipelining producer's every batch but its first). Returns (first
        index, timestamp_ms, the flush future) and records the batch when
        durable; None, with nothing done, when `append` must serve it (it
        then gives the same answer). This is the request fast path's
        (`laminar.shards.fastpath`): no task, no coroutine."""
        producer_id, sequence = req.producer_id, req.sequence
        part = self._partitions.get(log)
        if producer_id is None or sequence is None or part is None or producer_id in part.turns:
            return None
        table = part.loaded
        count = len(req.blobs)
        if table is None or not _stamped_as(req, producer_id, sequence, count):
            return None
        flights = part.in_flight.get(producer_id)
        if flights:
            if sequence != flights[-1].end_sequence:
                return None
        elif table.decide(producer_id, sequence, count).verdict is not Verdict.APPEND:
            return None
        placed = log.place_nowait(req.blobs)
        if placed is None:
            return None
        first, timestamp_ms, done = placed
        part.track((producer_id, sequence, count), owner, done, (first, timestamp_ms))
        return placed

    def _place(
        self,
        log: PartitionReplica,
        blobs: tuple[bytes, ...],
        part: _Partition,
        batch: tuple[int, int, int],
        owner: Owner,
    ) -> tuple[asyncio.Task[tuple[int, int]], bool]:
        """Append in the log's order now if the log can place it without a wait
        (a refusal raises, nothing appended), else in a plain append: the task
        is the batch becoming durable (committed), and records it; the flag
        says whether it was placed already."""
        placed = log.place(blobs)
        loop = asyncio.get_running_loop()
        task = loop.create_task(
            _awaited(placed if placed is not None else log.append_stamped(blobs))
        )
        part.track(batch, owner, task, None)
        return task, placed is not None


def _check_stamps(req: ProduceRequest, expected: ProducerStamp) -> None:
    """The first record must carry exactly the request's stamp (decoding already
    refused a stamp anywhere else): the log's stamps are what a restarted
    partition trusts, so every one of them is one this check passed."""
    try:
        found = producer_stamp(req.blobs[0])
    except ProtocolError as exc:
        raise RequestError(exc.code, exc.message) from None
    if found != expected:
        raise RequestError(
            ErrorCode.INVALID_REQUEST,
            f"an idempotent produce's first record must carry the {PRODUCER_HEADER!r} header "
            f"{tuple(expected)} (producer id, first sequence, count); it carries "
            f"{None if found is None else tuple(found)}",
        )


def _stamped_as(req: ProduceRequest, producer_id: int, sequence: int, count: int) -> bool:
    """Whether the first record carries exactly the request's stamp
    (`_check_stamps` without the refusal)."""
    try:
        return producer_stamp(req.blobs[0]) == (producer_id, sequence, count)
    except ProtocolError:
        return False


class _Gap(Exception):
    """The batch starts past its producer's next sequence: wait, or refuse with
    the reason (`IdempotentProducers.append`)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def _awaited(placed: Awaitable[tuple[int, int]]) -> tuple[int, int]:
    return await placed


class _InFlight(NamedTuple):
    """A batch placed in the log, not yet durable (committed)."""

    first_sequence: int
    records: int
    task: asyncio.Future[Any]
    """Done once the batch is durable (committed) or failed."""
    placed_at: tuple[int, int] | None
    """(first index, timestamp_ms) when known at placing; else the task's result."""
    owner: Owner
    """The client connection that sent it."""

    @property
    def end_sequence(self) -> int:
        return self.first_sequence + self.records


class _Partition:
    """One log's producer table, its loading, and each producer's batches in flight."""

    __slots__ = ("_loading", "_placed", "_table", "in_flight", "turns")

    def __init__(self) -> None:
        self._table: ProducerTable | None = None
        self._loading: asyncio.Task[ProducerTable] | None = None
        self.in_flight: dict[int, deque[_InFlight]] = {}
        """producer id -> its batches placed in the log and not yet recorded, in order."""
        self.turns: dict[int, asyncio.Future[None]] = {}
        """producer id -> done when its latest arrived batch is decided and placed."""
        self._placed: dict[int, list[asyncio.Future[None]]] = {}
        """producer id -> the batches waiting on a gap, each done when the
        producer's next batch is placed."""

    @property
    def loaded(self) -> ProducerTable | None:
        """The table if it is loaded (None while it is to be rebuilt)."""
        return self._table

    def track(
        self,
        batch: tuple[int, int, int],
        owner: Owner,
        landing: asyncio.Future[Any],
        placed_at: tuple[int, int] | None,
    ) -> None:
        """A batch (producer id, first sequence, count) of `owner` placed in the
        log: in flight until `landing` is done, then recorded (`finish`) at
        `placed_at` (first index, timestamp_ms), or where `landing`'s result
        says when that is not known yet."""
        producer_id, sequence, count = batch
        flight = _InFlight(sequence, count, landing, placed_at, owner)
        self.in_flight.setdefault(producer_id, deque()).append(flight)
        landing.add_done_callback(functools.partial(self.finish, producer_id))
        for waiter in self._placed.pop(producer_id, ()):
            if not waiter.done():
                waiter.set_result(None)

    async def progress(self, producer_id: int, timeout_s: float) -> bool:
        """Wait until a batch of the producer is placed; False if none was
        within `timeout_s` (the waiter is then gone: nothing is left behind)."""
        if timeout_s <= 0:
            return False
        waiter = asyncio.get_running_loop().create_future()
        waiters = self._placed.setdefault(producer_id, [])
        waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            if waiter in waiters:
                waiters.remove(waiter)
            if not waiters and self._placed.get(producer_id) is waiters:
                del self._placed[producer_id]

    async def table(self, log: PartitionReplica, scan_bytes_max: int) -> ProducerTable:
        """The table; when there is none, rebuilt from the log's tail once no
        batch is in flight (one landing during the scan could be missed by
        both), shared by concurrent callers. Nothing is placed meanwhile: a
        producer without batches in flight needs the table to decide."""
        while self._table is None:
            if self.in_flight:
                await asyncio.wait([f.task for fs in self.in_flight.values() for f in fs])
                continue
            if self._loading is None:
                self._loading = asyncio.get_running_loop().create_task(
                    _rebuild(log, scan_bytes_max)
                )
            loading = self._loading
            try:
                table = await asyncio.shield(loading)
            except BaseException:
                if loading.done() and self._loading is loading:
                    self._loading = None  # the next produce tries again
                raise
            if self._table is None and self._loading is loading:
                self._table = table
        return self._table

    def finish(self, producer_id: int, _task: asyncio.Future[Any]) -> None:
        """Record the producer's finished batches in the order they were placed,
        whatever order their completions run in (the table refuses a gap)."""
        flights = self.in_flight.get(producer_id)
        while flights and flights[0].task.done():
            self._record(producer_id, flights.popleft())
        if not flights:
            self.in_flight.pop(producer_id, None)

    def _record(self, producer_id: int, flight: _InFlight) -> None:
        """A durable batch goes in the table. One that failed may be in the log
        after all (a replicated batch whose commit timed out stays and may
        commit later), and the batches placed after it share its fate: forget
        the table; the next decision rebuilds it once the log has settled."""
        task = flight.task
        if task.cancelled() or task.exception() is not None:
            self._table = self._loading = None
            return
        if self._table is None:
            return
        first, timestamp_ms = task.result() if flight.placed_at is None else flight.placed_at
        batch = AppendedBatch(flight.first_sequence, flight.records, first, timestamp_ms)
        try:
            self._table.appended(producer_id, batch, flight.owner)
        except ValueError:  # the log, not the table, is the truth
            self._table = self._loading = None


async def _rebuild(log: PartitionReplica, bytes_max: int) -> ProducerTable:
    """A table from the log once every entry in it is committed or gone
    (`settle`): a stamp still in flight would otherwise be missed, and its
    batch appended again when retried."""
    await log.settle()
    return await _scan_tail(log, bytes_max)


async def _scan_tail(log: PartitionReplica, bytes_max: int) -> ProducerTable:
    """Rebuild a table from the stamps in the last `bytes_max` bytes of `log`,
    read backwards in chunks so the newest stamps come first."""
    found: list[tuple[ProducerStamp, int, int]] = []
    end = log.highest_index
    budget = bytes_max
    scanned = 0
    try:
        while budget > 0 and end > log.lowest_index:
            start = max(log.lowest_index, end - SCAN_CHUNK_RECORDS)
            chunk = []
            index = start
            while index < end:
                records = await log.read_range(index, 8 << 20, end - index)
                if not records:  # only protocol entries (a Raft no-op) were left
                    break
                chunk += records
                index = records[-1].index + 1
            for record in reversed(chunk):
                blob = record.value
                budget -= len(blob)
                if blob[:1] and blob[0] & HAS_HEADERS and _STAMP_NAME in blob:
                    try:
                        stamp = producer_stamp(blob)
                    except ProtocolError:
                        logger.warning(
                            "%s: record %d has a bad producer stamp", log.directory, record.index
                        )
                        continue
                    if stamp is not None:
                        found.append((stamp, record.index, record.timestamp_ms))
            scanned += end - start
            end = start
    except IndexOutOfRange:
        pass  # retention removed the oldest segment meanwhile: that is the start
    table = ProducerTable.restored(found)
    if found:
        logger.info(
            "%s: producer table rebuilt from %d records (%d producers)",
            log.directory,
            scanned,
            len(table),
        )
    return table
