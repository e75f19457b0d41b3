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

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

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

if TYPE_CHECKING:
    from laminar.client.sync import Client, Pending


def new_write_id() -> int:
    """A random 64-bit id for a write (or a task attempt)."""
    return secrets.randbits(64)


class CommitResult(NamedTuple):
    """A commit's outcome: where its records are, per partition id. `first` is
    False when the commit id had been committed before (nothing was appended now)."""

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

    return Call(f"commit of write {commit_id:#x}", target, parse, idempotent=True)


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


# --- one task attempt ----------------------------------------------------------------------


@dataclass(slots=True)
class _Partition:
    where: str
    """The topic/partition, for messages."""
    sequence: int = 0
    records: int = 0
    partition_id: int = 0
    node: str | None = None
    """Where the attempt's batches of this partition are staged (the first answer's)."""
    in_flight: Pending[tuple[int, str]] | None = None


class Stager:
    """One task attempt of a write: stages batches, one in flight per partition
    (pipelined across partitions), and reports what it staged (`finish`)."""

    def __init__(
        self,
        client: Client,
        write_id: int,
        task: int = 0,
        attempt: int | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.client = client
        self.write_id = write_id
        self.task = task
        self.attempt = new_write_id() if attempt is None else attempt
        self.timeout_ms = 0 if timeout_s is None else max(1, round(timeout_s * 1000))
        self._partitions: dict[tuple[str, int], _Partition] = {}

    def send_nowait(
        self,
        topic: str,
        partition: int,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Mapping[str, bytes] | None] | None = None,
    ) -> None:
        """Stage a batch; waits only for this partition's previous batch."""
        if not values:
            raise ValueError("a staged batch needs at least one value")
        blobs = ProduceRequest.from_values(0, values, keys, headers).blobs
        state = self._partitions.setdefault((topic, partition), _Partition(f"{topic}/{partition}"))
        self._settle(state)
        from laminar.client.sync import Pending

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
        state.in_flight = Pending(self.client, call)
        state.sequence += 1
        state.records += len(blobs)

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
        self._settle(self._partitions[(topic, partition)])

    def finish(self) -> tuple[StagedPart, ...]:
        """Wait for every batch; what this attempt staged, per partition."""
        for state in self._partitions.values():
            self._settle(state)
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
            for s in self._partitions.values()
            if s.sequence
        )

    def _settle(self, state: _Partition) -> None:
        if state.in_flight is None:
            return
        pending, state.in_flight = state.in_flight, None
        try:
            state.partition_id, node = pending.result()
        except (ConnectionLostError, RequestTimeoutError, NotLeaderError) as exc:
            if state.node is None:
                raise
            raise StagedDataUnreachableError(
                f"node {state.node}, which holds the batches this attempt staged for "
                f"{state.where}, cannot take more ({exc}): the attempt cannot go on elsewhere. "
                "Stage its records again as a new attempt; nothing of this one is published"
            ) from exc
        state.node = state.node or node


class AtomicWrite:
    """One writer's atomic write (module docstring). Leaving a `with` block
    without `commit()` aborts it."""

    def __init__(self, client: Client, write_id: int | None = None, timeout_s: float | None = None):
        self.client = client
        self.write_id = new_write_id() if write_id is None else write_id
        self._stager = Stager(client, self.write_id, 0, None, timeout_s)
        self.result: CommitResult | None = None
        self._aborted = False

    def send(
        self,
        topic: str,
        partition: int,
        values: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Mapping[str, bytes] | None] | None = None,
    ) -> None:
        """Stage records (pipelined; `commit` waits for them all)."""
        if self.result is not None or self._aborted:
            raise RuntimeError("this atomic write is finished; begin another")
        self._stager.send_nowait(topic, partition, values, keys, headers)

    def commit(self) -> CommitResult:
        """Publish everything sent, once, or raise and publish nothing."""
        if self._aborted:
            raise RuntimeError("this atomic write was aborted")
        if self.result is None:
            parts = self._stager.finish()
            if not parts:
                self.result = CommitResult(self.write_id, True, ())
            else:
                self.result = self.client.commit_write(self.write_id, parts)
        return self.result

    def abort(self) -> None:
        """Drop everything sent; a later commit is refused."""
        if self.result is not None:
            raise RuntimeError("this atomic write is committed")
        self._aborted = True
        try:  # name what was staged, so the node drops it at once
            parts = self._stager.finish()
        except LaminarError:
            parts = ()
        self.client.abort_write(self.write_id, parts)

    def __enter__(self) -> AtomicWrite:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.result is None and not self._aborted:
            self.abort()
