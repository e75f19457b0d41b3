"""Atomic writes from the client: stage records anywhere, commit them once, all or none.

    with client.begin_write() as w:        # one writer
        w.send("events", 0, [b"a", b"b"])
        w.send("audit", 3, [b"c"])
        w.commit()                          # visible now, exactly once; abort() if never reached

A distributed job (what the Spark sink does) splits the roles:

    write_id = new_write_id()                                     # the driver
    stager = client.stager(write_id, task=7)                      # each task attempt
    stager.send("events", 2, values); parts = stager.finish()     # -> its StagedParts
    client.commit_write(write_id, all_winning_parts)              # the driver, once
    client.abort_write(write_id)                                  # or this, if the job failed

`AsyncClient` has the same, with coroutines (`async with client.begin_write()
as w: await w.send(...); await w.commit()`, `await stager.finish()`): one
attempt's bookkeeping (`Attempt`) is I/O-free and shared; `Stager` and
`AtomicWrite` wait with blocking sockets, `AsyncStager` and `AsyncAtomicWrite`
on the event loop.

What is guaranteed (the node's side is `laminar.writes`):

- Staged records are durable once `send` (or `finish`) returned and are
  invisible to every reader until a commit publishes them.
- A commit publishes exactly the parts it names, each record once, or nothing:
  sending it again (after a lost answer) returns the first outcome and appends
  nothing; a commit id committed before is answered with `first=False`.
- Records of one partition appear in the order the parts are named, each part's
  batches in the order sent. Partitions become visible one after another, not
  at one instant; a partition's share larger than the node's publish append
  size appears in several appends.
- Staged data nobody commits is dropped after the node's staging timeout (or
  `timeout_s`, counted from the last batch); a commit after that fails with
  `StagedDataMissingError` and publishes nothing.
- On a cluster an attempt's records of one partition are staged on one node:
  the partition's leader when its first batch went out, and there whoever
  leads later (each part names that node). If that node cannot be reached,
  staging more to the partition, or committing, fails with
  `StagedDataUnreachableError` naming it; nothing is published, and a commit
  succeeds once the node is back (staged data is durable there).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, NoReturn, Protocol, TypeVar

from laminar.client.calls import Call
from laminar.client.errors import (
    ConnectionLostError,
    LaminarError,
    NotLeaderError,
    RequestTimeoutError,
    StagedDataUnreachableError,
)
from laminar.client.results import expect
from laminar.client.routing import Address, ClusterView
from laminar.wire import Frame, Message, ProduceRequest
from laminar.wire.writes import (
    AbortWriteRequest,
    AbortWriteResponse,
    CommitWriteRequest,
    CommitWriteResponse,
    Published,
    StagedPart,
    StageRequest,
    StageResponse,
    WriteStateResponse,
    WriteStatusRequest,
    coordinator_pid,
)

T = TypeVar("T")
W = TypeVar("W")
C = TypeVar("C")
T_co = TypeVar("T_co", covariant=True)

_LOST = (ConnectionLostError, RequestTimeoutError, NotLeaderError)
"""A stage that failed so: the node holding the attempt's batches is out of reach."""


def new_write_id() -> int:
    """A random 64-bit id for a write (or a task attempt)."""
    return secrets.randbits(64)


class CommitResult(NamedTuple):
    """A commit's outcome: where its records are, per partition id. `first` is
    False when the commit id had been committed before by another request
    (nothing was appended now); a commit whose answer was lost and that was
    sent again counts its first attempt as its own."""

    commit_id: int
    first: bool
    published: tuple[Published, ...]

    @property
    def records(self) -> int:
        return sum(p.records for p in self.published)


# --- calls ------------------------------------------------------------------------------


def stage(
    write_id: int,
    task: int,
    attempt: int,
    sequence: int,
    topic: str,
    partition: int,
    blobs: tuple[bytes, ...],
    timeout_ms: int,
    node: str | None = None,
) -> Call[tuple[int, str]]:
    """Stage one batch; idempotent by its sequence, so it is retried like a fetch.
    It goes to `node` when given (where the attempt's earlier batches of the
    partition are), else to the partition's leader. The result is the
    partition id and the node it was staged on."""

    def target(view: ClusterView) -> tuple[Address, Message]:
        route = view.route(topic, partition)
        if node and view.nodes:
            if node not in view.nodes:
                raise StagedDataUnreachableError(f"node {node} is no longer a member")
            route = view.route_to(route.partition_id, node)
        request = StageRequest(
            route.partition_id, write_id, task, attempt, sequence, blobs, timeout_ms
        )
        return route.address, request

    def parse(frame: Frame) -> tuple[int, str]:
        answer = expect(frame, StageResponse)
        return answer.partition_id, answer.node

    return Call(
        f"stage of {len(blobs)} records to {topic}/{partition}",
        target,
        parse,
        idempotent=True,
        topic=topic,
    )


def commit_write(commit_id: int, parts: tuple[StagedPart, ...]) -> Call[CommitResult]:
    """Commit; idempotent (the first decision wins), so retried."""

    def target(view: ClusterView) -> tuple[Address, Message]:
        return view.route_pid(coordinator_pid(commit_id)).address, CommitWriteRequest(
            commit_id, parts
        )

    def parse(frame: Frame) -> CommitResult:
        answer = expect(frame, CommitWriteResponse)
        return CommitResult(answer.commit_id, answer.first, answer.published)

    def again(result: CommitResult) -> CommitResult:
        # "Committed before" after an attempt whose answer was lost: that
        # attempt was this call's own (write ids are random), so this call
        # published the records.
        return result._replace(first=True)

    return Call(f"commit of write {commit_id:#x}", target, parse, idempotent=True, again=again)


def abort_write(commit_id: int, final: bool, parts: tuple[StagedPart, ...]) -> Call[str]:
    def target(view: ClusterView) -> tuple[Address, Message]:
        return view.route_pid(coordinator_pid(commit_id)).address, AbortWriteRequest(
            commit_id, final, parts
        )

    def parse(frame: Frame) -> str:
        return expect(frame, AbortWriteResponse).state

    return Call(f"abort of write {commit_id:#x}", target, parse, idempotent=True)


def write_status(commit_id: int) -> Call[str]:
    def target(view: ClusterView) -> tuple[Address, Message]:
        return view.route_pid(coordinator_pid(commit_id)).address, WriteStatusRequest(commit_id)

    def parse(frame: Frame) -> str:
        return expect(frame, WriteStateResponse).state

    return Call(f"status of write {commit_id:#x}", target, parse, idempotent=True)


# --- what the writes need of a client ------------------------------------------------


class _Waiting(Protocol[T_co]):
    def result(self) -> T_co: ...


class BlockingCalls(Protocol):
    """What `Stager` and `AtomicWrite` need of `Client`."""

    def _start(self, call: Call[T]) -> _Waiting[T]: ...

    def commit_write(self, commit_id: int, parts: Sequence[StagedPart]) -> CommitResult: ...

    def abort_write(
        self, commit_id: int, parts: Sequence[StagedPart] = (), *, final: bool = True
    ) -> str: ...


class AsyncCalls(Protocol):
    """What `AsyncStager` and `AsyncAtomicWrite` need of `AsyncClient`."""

    def _start(self, call: Call[T]) -> asyncio.Future[T]: ...

    async def commit_write(self, commit_id: int, parts: Sequence[StagedPart]) -> CommitResult: ...

    async def abort_write(
        self, commit_id: int, parts: Sequence[StagedPart] = (), *, final: bool = True
    ) -> str: ...


# --- one task attempt ----------------------------------------------------------------------


@dataclass(slots=True)
class _Partition(Generic[W]):
    where: str
    """The topic/partition, for messages."""
    sequence: int = 0
    records: int = 0
    partition_id: int = 0
    node: str | None = None
    """Where the attempt's batches of this partition are staged (the first answer's)."""
    in_flight: W | None = None
    """The batch on its way (the shell's handle for its answer)."""


class Attempt(Generic[W]):
    """One task attempt's bookkeeping, I/O-free: each partition's next
    sequence, where its batches are staged, and what was staged (`parts`).
    A partition has one batch in flight at a time (`W`, the shell's handle)."""

    def __init__(
        self, write_id: int, task: int, attempt: int | None, timeout_s: float | None
    ) -> None:
        self.write_id = write_id
        self.task = task
        self.attempt = new_write_id() if attempt is None else attempt
        self.timeout_ms = 0 if timeout_s is None else max(1, round(timeout_s * 1000))
        self.partitions: dict[tuple[str, int], _Partition[W]] = {}

    def partition(self, topic: str, partition: int) -> _Partition[W]:
        return self.partitions.setdefault((topic, partition), _Partition(f"{topic}/{partition}"))

    @staticmethod
    def encode(
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None,
        headers: Sequence[Mapping[str, bytes] | None] | None,
    ) -> tuple[bytes, ...]:
        """A batch's records, checked and encoded (before waiting for anything)."""
        if not values:
            raise ValueError("a staged batch needs at least one value")
        return ProduceRequest.from_values(0, values, keys, headers).blobs

    def stage(
        self, state: _Partition[W], topic: str, partition: int, blobs: tuple[bytes, ...]
    ) -> Call[tuple[int, str]]:
        """The next batch of `state`'s partition (its previous one answered)."""
        call = stage(
            self.write_id,
            self.task,
            self.attempt,
            state.sequence,
            topic,
            partition,
            blobs,
            self.timeout_ms,
            state.node,
        )
        state.sequence += 1
        state.records += len(blobs)
        return call

    @staticmethod
    def staged(state: _Partition[W], answer: tuple[int, str]) -> None:
        """A batch of `state`'s partition is durable."""
        state.partition_id, node = answer
        state.node = state.node or node

    @staticmethod
    def lost(state: _Partition[W], exc: LaminarError) -> NoReturn:
        """A batch failed with one of `_LOST`: once the partition has a node,
        the attempt cannot go on elsewhere."""
        if state.node is None:
            raise exc
        raise StagedDataUnreachableError(
            f"node {state.node}, which holds the batches this attempt staged for "
            f"{state.where}, cannot take more ({exc}): the attempt cannot go on elsewhere. "
            "Stage its records again as a new attempt; nothing of this one is published"
        ) from exc

    def parts(self) -> tuple[StagedPart, ...]:
        """What the attempt staged, per partition (every batch answered)."""
        return tuple(
            StagedPart(
                s.partition_id,
                self.write_id,
                self.task,
                self.attempt,
                s.sequence,
                s.records,
                s.node or "",
            )
            for s in self.partitions.values()
            if s.sequence
        )


class _Staging(Generic[C, W]):
    """A stager's attempt, whatever the shell (`C`: the client it stages
    through; `W`: its handle on a batch in flight)."""

    def __init__(
        self,
        client: C,
        write_id: int,
        task: int = 0,
        attempt: int | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.client = client
        self._attempt: Attempt[W] = Attempt(write_id, task, attempt, timeout_s)

    @property
    def write_id(self) -> int:
        return self._attempt.write_id

    @property
    def task(self) -> int:
        return self._attempt.task

    @property
    def attempt(self) -> int:
        return self._attempt.attempt

    @property
    def timeout_ms(self) -> int:
        return self._attempt.timeout_ms


class Stager(_Staging[BlockingCalls, _Waiting[tuple[int, str]]]):
    """One task attempt of a write: stages batches, one in flight per partition
    (pipelined across partitions), and reports what it staged (`finish`)."""

    def send_nowait(
        self,
        topic: str,
        partition: int,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Mapping[str, bytes] | None] | None = None,
    ) -> None:
        """Stage a batch; waits only for this partition's previous batch."""
        blobs = self._attempt.encode(values, keys, headers)
        state = self._attempt.partition(topic, partition)
        self._settle(state)
        call = self._attempt.stage(state, topic, partition, blobs)
        state.in_flight = self.client._start(call)

    def send(
        self,
        topic: str,
        partition: int,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Mapping[str, bytes] | None] | None = None,
    ) -> None:
        """Stage a batch and wait until it is durable."""
        self.send_nowait(topic, partition, values, keys, headers)
        self._settle(self._attempt.partition(topic, partition))

    def finish(self) -> tuple[StagedPart, ...]:
        """Wait for every batch; what this attempt staged, per partition."""
        for state in self._attempt.partitions.values():
            self._settle(state)
        return self._attempt.parts()

    def _settle(self, state: _Partition[_Waiting[tuple[int, str]]]) -> None:
        if state.in_flight is None:
            return
        waiting, state.in_flight = state.in_flight, None
        try:
            answer = waiting.result()
        except _LOST as exc:
            self._attempt.lost(state, exc)
        self._attempt.staged(state, answer)


class AsyncStager(_Staging[AsyncCalls, asyncio.Future[tuple[int, str]]]):
    """`Stager` for `AsyncClient`: the same, with coroutines."""

    async def send_nowait(
        self,
        topic: str,
        partition: int,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Mapping[str, bytes] | None] | None = None,
    ) -> None:
        """Stage a batch; waits only for this partition's previous batch."""
        blobs = self._attempt.encode(values, keys, headers)
        state = self._attempt.partition(topic, partition)
        await self._settle(state)
        call = self._attempt.stage(state, topic, partition, blobs)
        state.in_flight = self.client._start(call)
        # Retrieved here too: an abort after a failure leaves the others unawaited.
        state.in_flight.add_done_callback(_retrieve)

    async def send(
        self,
        topic: str,
        partition: int,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Mapping[str, bytes] | None] | None = None,
    ) -> None:
        """Stage a batch and wait until it is durable."""
        await self.send_nowait(topic, partition, values, keys, headers)
        await self._settle(self._attempt.partition(topic, partition))

    async def finish(self) -> tuple[StagedPart, ...]:
        """Wait for every batch; what this attempt staged, per partition."""
        for state in self._attempt.partitions.values():
            await self._settle(state)
        return self._attempt.parts()

    async def _settle(self, state: _Partition[asyncio.Future[tuple[int, str]]]) -> None:
        if state.in_flight is None:
            return
        waiting, state.in_flight = state.in_flight, None
        try:
            answer = await waiting
        except _LOST as exc:
            self._attempt.lost(state, exc)
        self._attempt.staged(state, answer)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class _Write:
    """What both kinds of atomic write decide without I/O: whether it may still
    be sent to, committed or aborted."""

    def __init__(self, write_id: int | None) -> None:
        self.write_id = new_write_id() if write_id is None else write_id
        self.result: CommitResult | None = None
        self._aborted = False

    def _check_open(self) -> None:
        if self.result is not None or self._aborted:
            raise RuntimeError("this atomic write is finished; begin another")

    def _check_commit(self) -> None:
        if self._aborted:
            raise RuntimeError("this atomic write was aborted")

    def _check_abort(self) -> None:
        if self.result is not None:
            raise RuntimeError("this atomic write is committed")
        self._aborted = True

    def _must_abort(self) -> bool:
        """Whether leaving its `with` block aborts it (never committed nor aborted)."""
        return self.result is None and not self._aborted

    def _nothing_staged(self) -> CommitResult:
        return CommitResult(self.write_id, True, ())


class AtomicWrite(_Write):
    """One writer's atomic write (module docstring). Leaving a `with` block
    without `commit()` aborts it."""

    def __init__(
        self, client: BlockingCalls, write_id: int | None = None, timeout_s: float | None = None
    ):
        super().__init__(write_id)
        self.client = client
        self._stager = Stager(client, self.write_id, 0, None, timeout_s)

    def send(
        self,
        topic: str,
        partition: int,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Mapping[str, bytes] | None] | None = None,
    ) -> None:
        """Stage records (pipelined; `commit` waits for them all)."""
        self._check_open()
        self._stager.send_nowait(topic, partition, values, keys, headers)

    def commit(self) -> CommitResult:
        """Publish everything sent, once, or raise and publish nothing."""
        self._check_commit()
        if self.result is None:
            parts = self._stager.finish()
            self.result = (
                self.client.commit_write(self.write_id, parts) if parts else self._nothing_staged()
            )
        return self.result

    def abort(self) -> None:
        """Drop everything sent; a later commit is refused."""
        self._check_abort()
        try:  # name what was staged, so the node drops it at once
            parts = self._stager.finish()
        except LaminarError:
            parts = ()
        self.client.abort_write(self.write_id, parts)

    def __enter__(self) -> AtomicWrite:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._must_abort():
            self.abort()


class AsyncAtomicWrite(_Write):
    """`AtomicWrite` for `AsyncClient`: the same, with coroutines; leaving an
    `async with` block without `commit()` aborts it."""

    def __init__(
        self, client: AsyncCalls, write_id: int | None = None, timeout_s: float | None = None
    ):
        super().__init__(write_id)
        self.client = client
        self._stager = AsyncStager(client, self.write_id, 0, None, timeout_s)

    async def send(
        self,
        topic: str,
        partition: int,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Mapping[str, bytes] | None] | None = None,
    ) -> None:
        """Stage records (pipelined; `commit` waits for them all)."""
        self._check_open()
        await self._stager.send_nowait(topic, partition, values, keys, headers)

    async def commit(self) -> CommitResult:
        """Publish everything sent, once, or raise and publish nothing."""
        self._check_commit()
        if self.result is None:
            parts = await self._stager.finish()
            self.result = (
                await self.client.commit_write(self.write_id, parts)
                if parts
                else self._nothing_staged()
            )
        return self.result

    async def abort(self) -> None:
        """Drop everything sent; a later commit is refused."""
        self._check_abort()
        try:  # name what was staged, so the node drops it at once
            parts = await self._stager.finish()
        except LaminarError:
            parts = ()
        await self.client.abort_write(self.write_id, parts)

    async def __aenter__(self) -> AsyncAtomicWrite:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._must_abort():
            await self.abort()
