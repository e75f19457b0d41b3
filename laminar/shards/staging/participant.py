"""The participant shell: staging, claims, publishes and expiry on one shard's partitions.

The rules are in `laminar.shards.staging.area`; this module does their I/O:
files under `<data-dir>/staging/<topic_id>-<partition>/` (one per attempt,
`<write>-<task>-<attempt>.stage`, and one per commit id, `<commit>.commit`),
appends to the partition logs, and asking coordinators about commits before
expiring what they claimed.

Order of durable steps, and why:

- stage: the batch frame is fsync'd (and a new file's directory entry too)
  before the answer, so an acknowledged batch survives a power cut.
- check: the claim is recorded in memory first (so expiry keeps the parts from
  then on), then fsync'd, then answered: the coordinator decides only on
  durable claims, so a restarted participant still asks before dropping.
- publish: INTENT (the partition's next index and the chunk plan) is fsync'd
  before the first append; each chunk is one log append carrying a
  `WriteStamp` on its first record; PUBLISHED is fsync'd after the last. After
  a crash between the two, the chunks already in the log are found by their
  stamps (at or after the recorded index) and only the others appended.
  Staged files of published attempts are then deleted.

Every handler runs in its own task, shielded from its request: a client that
disconnects cannot cancel a durable step half-way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Hashable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from laminar.log import IndexOutOfRange
from laminar.placement import partition_id, split_partition_id
from laminar.shards.errors import RequestError
from laminar.shards.replica import PartitionReplica
from laminar.shards.staging.area import (
    Ask,
    MissingStagedData,
    PublishPlan,
    StagedBatch,
    StagingArea,
    Verdict,
)
from laminar.shards.staging.files import StagingFiles
from laminar.shards.staging.frames import (
    AttemptKey,
    Intent,
    Kind,
    StagingFormatError,
    attempt_header,
    batch_frame,
    claim_frame,
    commit_header,
    frame_bytes,
    intent_frame,
    published_frame,
    read_attempt_header,
    read_batch_blobs,
    read_batch_head,
    read_claim,
    read_commit_header,
    read_intent,
    read_published,
    scan,
)
from laminar.wire import PRODUCER_HEADER, ErrorCode, decode_record, encode_record
from laminar.wire.writes import WRITE_HEADER, Published, StagedPart, StageRequest, WriteStamp

logger = logging.getLogger("laminar.shards")

T = TypeVar("T")

_DIR_RE: Final = re.compile(r"(\d+)-(\d+)")
_ATTEMPT_RE: Final = re.compile(r"([0-9a-f]{16})-([0-9a-f]{8})-([0-9a-f]{16})\.stage")
_COMMIT_RE: Final = re.compile(r"([0-9a-f]{16})\.commit")
_RESERVED: Final = (WRITE_HEADER.encode(), PRODUCER_HEADER.encode())
SCAN_CHUNK_BYTES: Final = 8 << 20


@dataclass(slots=True)
class StagingStats:
    """What /metrics shows about staging on this shard."""

    batches_staged: int = 0
    bytes_staged: int = 0
    refused_full: int = 0
    attempts_expired: int = 0
    bytes_expired: int = 0
    attempts_dropped: int = 0
    records_published: int = 0
    publishes: int = 0
    publishes_resumed: int = 0


class KeyedLocks:
    """One asyncio lock per key, removed when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[Hashable, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


async def shielded(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` in its own task: cancelling the caller does not cancel it."""
    return await asyncio.shield(asyncio.get_running_loop().create_task(coro))


class Participant:
    """Staged data on this shard's partitions (see the module docstring)."""

    def __init__(
        self,
        area: StagingArea,
        files: StagingFiles,
        owns: Callable[[int], bool],
        replica_of: Callable[[int], Awaitable[PartitionReplica]],
        ask_coordinator: Callable[[int], Awaitable[str]],
        chunk_bytes: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.area = area
        self.files = files
        self._owns = owns
        self._replica_of = replica_of
        self._ask = ask_coordinator
        self.chunk_bytes = chunk_bytes
        self._clock = clock
        self.stats = StagingStats()
        self._locks = KeyedLocks()
        self._asking: set[asyncio.Task[None]] = set()

    # -- paths ------------------------------------------------------------------------

    def directory(self, pid: int) -> str:
        topic_id, idx = split_partition_id(pid)
        return os.path.join(self.files.root, f"{topic_id}-{idx}")

    def attempt_path(self, pid: int, key: AttemptKey) -> str:
        name = f"{key.write_id:016x}-{key.task:08x}-{key.attempt:016x}.stage"
        return os.path.join(self.directory(pid), name)

    def commit_path(self, pid: int, commit_id: int) -> str:
        return os.path.join(self.directory(pid), f"{commit_id:016x}.commit")

    def _append_bytes(self, log: PartitionReplica) -> int:
        """The largest publish append into `log`: the node's chunk size, within one
        of the log's segments (a topic may set a smaller segment.bytes)."""
        return min(self.chunk_bytes, log.log.config.segment_bytes)

    # -- stage ------------------------------------------------------------------------

    async def stage(self, req: StageRequest) -> tuple[int, bool]:
        """Stage a batch durably; `(records, duplicate)`."""
        if not req.blobs:
            raise RequestError(ErrorCode.INVALID_REQUEST, "a staged batch needs a record")
        for blob in req.blobs:
            if blob[:1] != b"\x00" and any(name in blob for name in _RESERVED):
                _check_no_reserved_header(blob)
        return await shielded(self._stage(req))

    async def _stage(self, req: StageRequest) -> tuple[int, bool]:
        pid = req.partition_id
        key = AttemptKey(req.write_id, req.task, req.attempt)
        async with self._locks.hold(("attempt", pid, key)):
            new = self.area.attempt(pid, key) is None
            header = attempt_header(pid, key, req.timeout_ms) if new else []
            batch = batch_frame(req.sequence, req.blobs)
            limit = self._append_bytes(await self._replica_of(pid))
            if frame_bytes(batch) > limit:
                raise RequestError(
                    ErrorCode.RECORD_TOO_LARGE,
                    f"a staged batch of {frame_bytes(batch)} bytes is over the partition's "
                    f"publish append size of {limit} bytes; send smaller batches",
                )
            size = frame_bytes(header) + frame_bytes(batch)
            decision = self.area.decide_stage(pid, key, req.sequence, len(req.blobs), size)
            if decision.verdict is Verdict.DUPLICATE:
                return len(req.blobs), True
            if decision.verdict is Verdict.FULL:
                self.stats.refused_full += 1
                raise RequestError(ErrorCode.STAGING_FULL, decision.reason)
            if decision.verdict is Verdict.OUT_OF_ORDER:
                raise RequestError(ErrorCode.STAGE_OUT_OF_ORDER, decision.reason)
            path = self.attempt_path(pid, key)
            try:
                if new:
                    await self.files.ensure_dir(self.directory(pid))
                offset = await self.files.append(path, [*header, *batch], create=new)
            except BaseException:
                self.area.stage_failed(size)  # the batch may be sent again
                raise
            start = offset + frame_bytes(header)
            staged = StagedBatch(req.sequence, len(req.blobs), start, frame_bytes(batch))
            self.area.staged(pid, key, staged, size, req.timeout_ms, self._clock())
            self.stats.batches_staged += 1
            self.stats.bytes_staged += size
            return len(req.blobs), False

    # -- check (a coordinator's prepare) ---------------------------------------------------

    async def check(self, pid: int, commit_id: int, parts: tuple[StagedPart, ...]) -> int:
        """Claim `parts` for `commit_id` durably if each is staged in full; their records."""
        return await shielded(self._check(pid, commit_id, parts))

    async def _check(self, pid: int, commit_id: int, parts: tuple[StagedPart, ...]) -> int:
        async with self._locks.hold(("commit", pid, commit_id)):
            try:
                records = self.area.check(pid, parts)
            except MissingStagedData as exc:
                raise RequestError(ErrorCode.STAGED_DATA_MISSING, str(exc)) from None
            new = self.area.commit_record(pid, commit_id) is None
            # In memory first: expiry keeps the parts from now on (conservative).
            self.area.claimed(pid, commit_id, parts, self._clock())
            header = commit_header(pid, commit_id) if new else []
            if new:
                await self.files.ensure_dir(self.directory(pid))
            await self.files.append(
                self.commit_path(pid, commit_id), [*header, *claim_frame(parts)], create=new
            )
            return records

    # -- publish ----------------------------------------------------------------------------

    async def publish(self, pid: int, commit_id: int, parts: tuple[StagedPart, ...]) -> Published:
        """Append the parts' records to the partition once (module docstring)."""
        return await shielded(self._publish(pid, commit_id, parts))

    async def _publish(self, pid: int, commit_id: int, parts: tuple[StagedPart, ...]) -> Published:
        async with self._locks.hold(("commit", pid, commit_id)):
            record = self.area.commit_record(pid, commit_id)
            if record is not None and record.published is not None:
                # Published before; its attempts' files may be back (their
                # removal was not durable when the power went): drop them again.
                published = record.published
            else:
                published = await self._publish_new(pid, commit_id, parts, record is None)
        for part in parts:
            await self._drop_attempt(pid, AttemptKey.of(part))
        return published

    async def _publish_new(
        self, pid: int, commit_id: int, parts: tuple[StagedPart, ...], new: bool
    ) -> Published:
        log = await self._replica_of(pid)
        try:
            plan = self.area.plan_publish(pid, commit_id, parts, self._append_bytes(log))
        except MissingStagedData as exc:
            logger.error("commit %#x cannot be published: %s", commit_id, exc)
            raise RequestError(ErrorCode.STAGED_DATA_MISSING, str(exc)) from None
        self.area.publishing(pid, parts, True)
        try:
            published = await self._append_chunks(log, pid, commit_id, plan, new=new)
        finally:
            self.area.publishing(pid, parts, False)
        await self.files.append(
            self.commit_path(pid, commit_id), published_frame(*published[1:]), create=False
        )
        self.area.published(pid, commit_id, published, self._clock())
        self.stats.publishes += 1
        self.stats.records_published += published.records
        return published

    async def _append_chunks(
        self, log: PartitionReplica, pid: int, commit_id: int, plan: PublishPlan, *, new: bool
    ) -> Published:
        path = self.commit_path(pid, commit_id)
        if plan.fresh:
            intent = Intent(log.highest_index, plan.intent.chunk_batches)
            header = commit_header(pid, commit_id) if new else []
            if new:
                await self.files.ensure_dir(self.directory(pid))
            await self.files.append(path, [*header, *intent_frame(intent)], create=new)
            self.area.intent_recorded(pid, commit_id, intent, self._clock())
            present: dict[int, int] = {}
        else:
            intent = plan.intent
            await log.settle()  # a chunk proposed before may still commit: know first
            present = await _find_chunks(log, commit_id, intent.start_index)
            self.stats.publishes_resumed += 1
            logger.info(
                "commit %#x on partition %#x: resuming a publish (%d of %d chunks found)",
                commit_id,
                pid,
                len(present),
                len(plan.chunks),
            )
        first = log.highest_index
        chunks = len(plan.chunks)
        for number, chunk in enumerate(plan.chunks):
            index = present.get(number)
            if index is None:
                blobs = await self._chunk_blobs(pid, chunk.batches)
                blobs[0] = _stamped(blobs[0], WriteStamp(commit_id, number, chunks))
                index, _ = await log.append_stamped(blobs)
            if number == 0:
                first = index
        return Published(pid, first, sum(c.records for c in plan.chunks))

    async def _chunk_blobs(
        self, pid: int, batches: tuple[tuple[AttemptKey, StagedBatch], ...]
    ) -> list[bytes]:
        blobs: list[bytes] = []
        for key, batch in batches:
            data = await self.files.read(self.attempt_path(pid, key), batch.offset, batch.length)
            try:
                sequence, got = read_batch_blobs(data)
            except StagingFormatError as exc:
                raise RequestError(
                    ErrorCode.STORAGE_ERROR, f"staged batch {batch.sequence} of {key}: {exc}"
                ) from None
            if sequence != batch.sequence:
                raise RequestError(ErrorCode.STORAGE_ERROR, f"staged batch of {key} misplaced")
            blobs += got
        return blobs

    # -- drop ---------------------------------------------------------------------------------

    async def drop(self, pid: int, commit_id: int, parts: tuple[StagedPart, ...]) -> int:
        """Forget `commit_id` here and drop the named parts' staged data, and every
        other attempt of their writes no commit claims (the losers: failed and
        speculative attempts); how many attempts were dropped."""
        return await shielded(self._drop(pid, commit_id, parts))

    async def _drop(self, pid: int, commit_id: int, parts: tuple[StagedPart, ...]) -> int:
        async with self._locks.hold(("commit", pid, commit_id)):
            record = self.area.commit_record(pid, commit_id)
            if record is not None and record.intent is not None and record.published is None:
                raise RequestError(
                    ErrorCode.COMMIT_PENDING,
                    f"commit {commit_id:#x} is being published on partition {pid:#x}",
                )
            await self._forget_commit(pid, commit_id)
        named = {AttemptKey.of(p) for p in parts}
        writes = {p.write_id for p in parts}
        dropped = 0
        for key in [*named, *(k for w in writes for k in self.area.keys_of_write(pid, w))]:
            attempt = self.area.attempt(pid, key)
            if attempt is not None and attempt.claimed_by in (None, commit_id):
                dropped += await self._drop_attempt(pid, key)
        self.stats.attempts_dropped += dropped
        return dropped

    async def _forget_commit(self, pid: int, commit_id: int) -> None:
        if self.area.drop_commit(pid, commit_id) is not None:
            await self.files.remove(self.commit_path(pid, commit_id))

    async def _drop_attempt(self, pid: int, key: AttemptKey) -> int:
        async with self._locks.hold(("attempt", pid, key)):
            if self.area.drop_attempt(pid, key) is None:
                return 0
            await self.files.remove(self.attempt_path(pid, key))
            return 1

    async def drop_partition(self, pid: int) -> None:
        """The partition's topic was deleted: its staged data goes with it."""
        for attempt in self.area.attempts_of(pid):
            await self._drop_attempt(pid, attempt.key)
        for record in self.area.commits_of(pid):
            async with self._locks.hold(("commit", pid, record.commit_id)):
                await self._forget_commit(pid, record.commit_id)
        with contextlib.suppress(OSError):
            os.rmdir(self.directory(pid))

    # -- expiry ---------------------------------------------------------------------------------

    async def expire(self) -> None:
        """One expiry pass (`StagingArea.due`): drop idle unclaimed attempts now, and
        ask coordinators about idle claims in the background."""
        now = self._clock()
        drops, asks = self.area.due(now)
        for drop in drops:
            async with self._locks.hold(("attempt", drop.partition_id, drop.key)):
                attempt = self.area.attempt(drop.partition_id, drop.key)
                if (
                    attempt is None
                    or attempt.claimed_by is not None
                    or attempt.publishing
                    or self.area.idle_for(attempt, now) < attempt.timeout_s
                ):
                    continue
                self.area.drop_attempt(drop.partition_id, drop.key)
                await self.files.remove(self.attempt_path(drop.partition_id, drop.key))
                self.stats.attempts_expired += 1
                self.stats.bytes_expired += attempt.bytes
                logger.info(
                    "expired staged data of write %#x task %d on partition %#x (%d records)",
                    drop.key.write_id,
                    drop.key.task,
                    drop.partition_id,
                    attempt.records,
                )
        for ask in asks:
            task = asyncio.get_running_loop().create_task(self._resolve(ask))
            self._asking.add(task)
            task.add_done_callback(self._asking.discard)

    async def _resolve(self, ask: Ask) -> None:
        state: str | None
        try:
            state = await self._ask(ask.commit_id)
        except Exception as exc:  # the coordinator is busy or gone: keep, ask later
            logger.info("could not ask about commit %#x: %s", ask.commit_id, exc)
            state = None
        async with self._locks.hold(("commit", ask.partition_id, ask.commit_id)):
            keys = self.area.answered(ask, state, self._clock())
            if keys is None:
                return
            await self._forget_commit(ask.partition_id, ask.commit_id)
        for key in keys:
            attempt = self.area.attempt(ask.partition_id, key)
            if attempt is not None and await self._drop_attempt(ask.partition_id, key):
                self.stats.attempts_expired += 1
                self.stats.bytes_expired += attempt.bytes

    # -- recovery ---------------------------------------------------------------------------------

    async def recover(self) -> None:
        """Load what is staged on this shard's partitions (after a start or restart)."""
        now = self._clock()
        names = await self.files.list_dir(self.files.root)
        for directory in sorted({name.split("/")[0] for name in names}):
            match = _DIR_RE.fullmatch(directory)
            if match is None:
                continue
            pid = partition_id(int(match[1]), int(match[2]))
            if not self._owns(pid):
                continue
            entries = await self.files.list_dir(self.directory(pid))
            for name in sorted(entries):
                if _ATTEMPT_RE.fullmatch(name):
                    await self._recover_attempt(pid, name, now)
            for name in sorted(entries):
                if _COMMIT_RE.fullmatch(name):
                    await self._recover_commit(pid, name, now)
        if self.area.attempt_count or self.area.commit_count:
            logger.info(
                "staging recovered: %d attempts (%d bytes), %d commit records",
                self.area.attempt_count,
                self.area.bytes,
                self.area.commit_count,
            )

    async def _recover_attempt(self, pid: int, name: str, now: float) -> None:
        path = os.path.join(self.directory(pid), name)
        frames, end = await self._recovered_frames(path)
        if not frames or frames[0].kind is not Kind.ATTEMPT:
            await self.files.remove(path)  # created, but its first write never became durable
            return
        header = read_attempt_header(frames[0])
        batches = []
        for f in frames[1:]:
            sequence, records = read_batch_head(f)
            batches.append(StagedBatch(sequence, records, f.offset, f.length))
        self.area.restore_attempt(pid, header.key, header.timeout_ms, batches, end, now)

    async def _recover_commit(self, pid: int, name: str, now: float) -> None:
        path = os.path.join(self.directory(pid), name)
        frames, _ = await self._recovered_frames(path)
        if not frames or frames[0].kind is not Kind.COMMIT:
            await self.files.remove(path)
            return
        _, commit_id = read_commit_header(frames[0])
        claim: tuple[StagedPart, ...] = ()
        claims = 0
        intent = None
        published = None
        for f in frames[1:]:
            if f.kind is Kind.CLAIM:
                claim, claims = read_claim(f), claims + 1
            elif f.kind is Kind.INTENT:
                intent = read_intent(f)
            elif f.kind is Kind.PUBLISHED:
                published = Published(pid, *read_published(f))
        self.area.restore_commit(pid, commit_id, claim, claims, intent, published, now)

    async def _recovered_frames(self, path: str) -> tuple[list[Any], int]:
        data = await self.files.read_all(path)
        frames, end = scan(data)
        if end < len(data):
            logger.warning("%s: cut a torn tail of %d bytes", path, len(data) - end)
            await self.files.truncate(path, end)
        return frames, end

    async def close(self) -> None:
        for task in list(self._asking):
            task.cancel()
        await self.files.close()


def _check_no_reserved_header(blob: bytes) -> None:
    try:
        _, _, headers = decode_record(blob)
    except Exception:  # decode_produce_batch checked it; be safe anyway
        raise RequestError(ErrorCode.CORRUPT_RECORD, "a staged record does not decode") from None
    for name in (WRITE_HEADER, PRODUCER_HEADER):
        if headers and name in headers:
            raise RequestError(
                ErrorCode.INVALID_REQUEST, f"the record header {name!r} is reserved for laminar"
            )


def _stamped(blob: bytes, stamp: WriteStamp) -> bytes:
    """`blob` with the write stamp added to its headers."""
    value, key, headers = decode_record(blob)
    return encode_record(value, key, {**(headers or {}), WRITE_HEADER: stamp.encode()})


async def _find_chunks(log: PartitionReplica, commit_id: int, start: int) -> dict[int, int]:
    """The chunks of `commit_id` already in `log` at or after `start`: {chunk: index}."""
    found: dict[int, int] = {}
    name = WRITE_HEADER.encode()
    index = max(start, log.lowest_index)
    try:
        while index < log.highest_index:
            records = await log.read_range(index, SCAN_CHUNK_BYTES)
            if not records:  # only a replicated log's own entries were left
                break
            for record in records:
                blob = record.value
                if blob[:1] != b"\x00" and name in blob:
                    _, _, headers = decode_record(blob)
                    raw = None if headers is None else headers.get(WRITE_HEADER)
                    stamp = None if raw is None else WriteStamp.decode(raw)
                    if stamp is not None and stamp.commit_id == commit_id:
                        found[stamp.chunk] = record.index
            index = records[-1].index + 1
    except IndexOutOfRange:
        pass  # retention removed the oldest part meanwhile
    return found
