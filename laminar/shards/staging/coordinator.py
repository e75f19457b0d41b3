"""The coordinator shell: decisions of the commit ids whose bucket this shard owns.

A commit id's bucket (`laminar.wire.writes.coordinator_bucket`) has a decision
log, `<data-dir>/writes/<bucket>/`, a `SegmentedLog` of msgpack entries
(`laminar.shards.staging.decisions`) written with fsync. The shard that owns
the bucket's reserved partition id answers commit, abort and status
requests for it, and at start-up replays the log and rolls forward every
commit that was decided but not finished.

A commit, step by step (each step waits for the one before):

1. check: every partition's owner confirms the parts are staged in full and
   claims them durably (`CheckStagedRequest`);
2. decide: the "committed" entry is appended to the decision log (fsync);
   from here on the commit happens, whatever crashes;
3. publish: every partition appends its parts once (`PublishStagedRequest`,
   idempotent by commit id), all partitions at once;
4. finish: the "done" entry with where the records landed (fsync), then the
   partitions drop what they staged (in the background).

A driver that dies anywhere in 1 leaves nothing visible (the claims expire);
anywhere after 2, the coordinator finishes the commit itself. Requests about
one commit id run one at a time (a lock per id), so a commit sent again waits
for the first and is answered with its outcome.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from laminar.log import LogConfig, SegmentedLog
from laminar.log.storage import StorageBackend
from laminar.shards.errors import RequestError
from laminar.shards.staging.decisions import (
    Action,
    Decision,
    Decisions,
    aborted_entry,
    committed_entry,
    done_entry,
)
from laminar.shards.staging.participant import KeyedLocks, shielded
from laminar.wire import ErrorCode, ErrorResponse, Flags, Frame, Message
from laminar.wire.writes import (
    COORDINATOR_BUCKETS,
    CheckStagedRequest,
    DropStagedRequest,
    Published,
    PublishStagedRequest,
    PublishStagedResponse,
    StagedPart,
    WriteState,
    bucket_pid,
    coordinator_bucket,
)

logger = logging.getLogger("laminar.shards")

DECISION_SEGMENT_BYTES: Final = 4 << 20
RETRY_INTERVAL_S: Final = 2.0
"""How often a commit that could not be finished is tried again."""

Send = Callable[[Message], Awaitable[Frame]]
ByPartition = dict[int, tuple[StagedPart, ...]]


class CommitPartsError(RequestError):
    """A commit's parts are not usable as sent (a bug in the committer)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_REQUEST, message)


def _key(part: StagedPart) -> tuple[int, int, int, int]:
    return part.partition_id, part.write_id, part.task, part.attempt


def check_parts(parts: Sequence[StagedPart]) -> ByPartition:
    """The parts grouped by partition, in the order given; each attempt once."""
    seen: set[tuple[int, int, int, int]] = set()
    by_pid: dict[int, list[StagedPart]] = {}
    for part in parts:
        key = _key(part)
        if key in seen:
            raise CommitPartsError(f"the commit names {key} twice")
        if part.batches < 1 or part.records < 1:
            raise CommitPartsError(f"the commit names an empty part {tuple(part)}")
        seen.add(key)
        by_pid.setdefault(part.partition_id, []).append(part)
    return {pid: tuple(p) for pid, p in by_pid.items()}


class Coordinator:
    """Decides commits of this shard's buckets (see the module docstring)."""

    def __init__(
        self,
        root: str,
        backend: StorageBackend,
        owns: Callable[[int], bool],
        send: Send,
        retention_ms: int,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.root = root
        self._backend = backend
        self._owns = owns
        self._send = send
        self.retention_ms = retention_ms
        self._clock_ms = clock_ms
        self._logs: dict[int, SegmentedLog] = {}
        self._decisions: dict[int, Decisions] = {}
        self._opening: dict[int, asyncio.Task[None]] = {}
        self._locks = KeyedLocks()
        self._background: set[asyncio.Task[object]] = set()
        self._retry_after: dict[int, float] = {}
        self.commits = 0
        self.aborts = 0
        self.roll_forwards = 0

    # -- buckets ----------------------------------------------------------------------

    def owned_buckets(self) -> list[int]:
        return [b for b in range(COORDINATOR_BUCKETS) if self._owns(bucket_pid(b))]

    async def start(self) -> None:
        """Replay the owned buckets' logs and roll forward unfinished commits."""
        for bucket in self.owned_buckets():
            if os.path.isdir(self._directory(bucket)):
                await self._bucket(bucket)
        for decisions in self._decisions.values():
            for decision in decisions.pending():
                self._spawn(self._roll_forward(decision.commit_id))

    def _directory(self, bucket: int) -> str:
        return os.path.join(self.root, f"{bucket:02d}")

    async def _bucket(self, bucket: int) -> Decisions:
        decisions = self._decisions.get(bucket)
        if decisions is not None:
            return decisions
        task = self._opening.get(bucket)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._open(bucket))
            self._opening[bucket] = task
        await asyncio.shield(task)
        return self._decisions[bucket]

    async def _open(self, bucket: int) -> None:
        config = LogConfig(
            segment_bytes=DECISION_SEGMENT_BYTES,
            preallocate_bytes=0,
            retention_ms=self.retention_ms,
        )
        try:
            log = await SegmentedLog.open(self._directory(bucket), config, backend=self._backend)
        finally:
            del self._opening[bucket]
        decisions = Decisions(self.retention_ms)
        index = log.lowest_index
        while index < log.highest_index:
            for record in await log.read_range(index, 4 << 20):
                decisions.apply(record.value)
                index = record.index + 1
        decisions.forget_old(self._clock_ms())
        self._logs[bucket] = log
        self._decisions[bucket] = decisions
        if len(decisions):
            logger.info("coordinator bucket %d: %d decisions replayed", bucket, len(decisions))

    async def _record(self, commit_id: int, entry: bytes) -> Decision:
        bucket = coordinator_bucket(commit_id)
        decisions = await self._bucket(bucket)
        await self._logs[bucket].append([entry])
        return decisions.apply(entry)

    # -- requests ---------------------------------------------------------------------

    async def state(self, commit_id: int) -> str:
        return (await self._bucket(coordinator_bucket(commit_id))).state_of(commit_id)

    async def commit(
        self, commit_id: int, parts: tuple[StagedPart, ...]
    ) -> tuple[bool, tuple[Published, ...]]:
        """`(first, published)`: see `CommitWriteRequest`."""
        by_pid = check_parts(parts)
        return await shielded(self._commit(commit_id, parts, by_pid))

    async def _commit(
        self,
        commit_id: int,
        parts: tuple[StagedPart, ...],
        by_pid: ByPartition,
    ) -> tuple[bool, tuple[Published, ...]]:
        async with self._locks.hold(commit_id):
            decisions = await self._bucket(coordinator_bucket(commit_id))
            action = decisions.action_for_commit(commit_id)
            if action is Action.REFUSE:
                raise RequestError(
                    ErrorCode.WRITE_ABORTED, f"write {commit_id:#x} was aborted; it cannot commit"
                )
            if action is Action.CHECK_AND_DECIDE:
                if not parts:
                    raise CommitPartsError("a commit needs at least one staged part")
                await asyncio.gather(
                    *(
                        self._call(CheckStagedRequest(pid, commit_id, p))
                        for pid, p in by_pid.items()
                    )
                )
                decision = await self._record(
                    commit_id, committed_entry(commit_id, parts, self._clock_ms())
                )
                self.commits += 1
            else:
                found = decisions.get(commit_id)
                assert found is not None
                decision = found
            first = action is Action.CHECK_AND_DECIDE
            decided = {_key(p) for p in decision.parts}
            extra = [] if first else [p for p in parts if _key(p) not in decided]
            if decision.state == WriteState.COMMITTED:
                decision = await self._finish(decision)
            if extra:  # a commit sent again with other attempts: theirs are not needed
                self._spawn(self._drop(commit_id, check_parts(extra)))
            return first, decision.published

    async def _finish(self, decision: Decision) -> Decision:
        """Publish every partition's parts, record "done", drop the staged data."""
        commit_id = decision.commit_id
        by_pid = check_parts(decision.parts)
        try:
            published = await asyncio.gather(
                *(self._publish(commit_id, pid, p) for pid, p in by_pid.items())
            )
        except Exception as exc:
            self._retry_after[commit_id] = time.monotonic() + RETRY_INTERVAL_S
            if isinstance(exc, RequestError) and exc.code == ErrorCode.COMMIT_PENDING:
                raise
            logger.warning("commit %#x decided, publishing failed (will retry): %s", commit_id, exc)
            raise RequestError(
                ErrorCode.COMMIT_PENDING,
                f"write {commit_id:#x} is committed; publishing it failed for now ({exc}) "
                "and the node retries it",
            ) from None
        self._retry_after.pop(commit_id, None)
        done = await self._record(
            commit_id, done_entry(commit_id, tuple(published), self._clock_ms())
        )
        self._spawn(self._drop(commit_id, by_pid))
        return done

    async def _publish(self, commit_id: int, pid: int, parts: tuple[StagedPart, ...]) -> Published:
        try:
            frame = await self._call(PublishStagedRequest(pid, commit_id, parts))
        except RequestError as exc:
            if exc.code in (ErrorCode.UNKNOWN_TOPIC, ErrorCode.UNKNOWN_PARTITION):
                logger.warning(
                    "commit %#x: partition %#x is gone (topic deleted); nothing to publish there",
                    commit_id,
                    pid,
                )
                return Published(pid, 0, 0)
            raise
        answer = PublishStagedResponse.from_frame(frame)
        return Published(pid, answer.first_index, answer.count)

    async def _drop(self, commit_id: int, by_pid: ByPartition) -> None:
        for pid, parts in by_pid.items():
            try:
                await self._call(DropStagedRequest(pid, commit_id, parts))
            except Exception as exc:  # the partition expires it later
                logger.info("commit %#x: dropping on partition %#x failed: %s", commit_id, pid, exc)

    async def abort(self, commit_id: int, final: bool, parts: tuple[StagedPart, ...]) -> str:
        """The state after the abort (see `AbortWriteRequest`)."""
        by_pid = check_parts(parts) if parts else {}
        return await shielded(self._abort(commit_id, final, by_pid))

    async def _abort(self, commit_id: int, final: bool, by_pid: ByPartition) -> str:
        async with self._locks.hold(commit_id):
            decisions = await self._bucket(coordinator_bucket(commit_id))
            state = decisions.state_of(commit_id)
            if state in (WriteState.COMMITTED, WriteState.DONE):
                return state
            if final and state == WriteState.UNKNOWN:
                await self._record(commit_id, aborted_entry(commit_id, self._clock_ms()))
                self.aborts += 1
                state = WriteState.ABORTED
            if by_pid:
                self._spawn(self._drop(commit_id, by_pid))
            return state

    # -- upkeep -------------------------------------------------------------------------

    async def _roll_forward(self, commit_id: int) -> None:
        async with self._locks.hold(commit_id):
            decision = (await self._bucket(coordinator_bucket(commit_id))).get(commit_id)
            if decision is None or decision.state != WriteState.COMMITTED:
                return
            self.roll_forwards += 1
            logger.info("rolling forward commit %#x", commit_id)
            try:
                await self._finish(decision)
            except RequestError as exc:
                logger.warning("commit %#x: roll-forward failed for now: %s", commit_id, exc)

    async def maintain(self) -> None:
        """Periodic: retry unfinished commits, forget old decisions, apply retention
        (carrying unfinished decisions forward first so retention cannot take them)."""
        now = time.monotonic()
        now_ms = self._clock_ms()
        for bucket, decisions in list(self._decisions.items()):
            for decision in decisions.pending():
                if self._retry_after.get(decision.commit_id, 0.0) <= now:
                    self._retry_after[decision.commit_id] = now + RETRY_INTERVAL_S
                    self._spawn(self._roll_forward(decision.commit_id))
                if now_ms - decision.decided_ms > self.retention_ms // 2:
                    await self._record(
                        decision.commit_id,
                        committed_entry(decision.commit_id, decision.parts, now_ms),
                    )
            decisions.forget_old(now_ms)
            await self._logs[bucket].apply_retention(now_ms)

    @property
    def pending(self) -> int:
        return sum(len(d.pending()) for d in self._decisions.values())

    def _spawn(self, coro: Awaitable[object]) -> None:
        task: asyncio.Task[object] = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _call(self, message: Message) -> Frame:
        """Send an internal request (served here or by the owning shard); raise
        the answer's error as a `RequestError`."""
        frame = await self._send(message)
        if frame.flags & Flags.ERROR:
            err = ErrorResponse.from_frame(frame)
            raise RequestError(err.code, err.message)
        return frame

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.wait(list(self._background), timeout=5)
        logs, self._logs = self._logs, {}
        for log in logs.values():
            await log.close()
