"""The participant shell: staging, claims, publishes and expiry on one shard's partitions.

The rules are in `laminar.writes.area`; this module does their I/O:
files under `<data-dir>/staging/<topic_id>-<partition>/` (one per attempt,
`<write>-<task>-<attempt>.stage`, and one per commit id, `<commit>.commit`),
appends to the partition logs, and asking coordinators about commits before
expiring what they claimed.

Order of durable steps, and why:

- stage: the batch frame is fsync'd (and a new file's directory entry too)
  before the answer, so an acknowledged batch survives a power cut. An
  attempt's first batch on a partition is taken only by its leader (a
  follower answers NOT_LEADER naming it; with no leader known, anyone takes
  it): its publish then appends in place. Its later batches are taken here
  whoever leads by then (the client sends them where the first went).
- check: the claim is recorded in memory first (so expiry keeps the parts from
  then on), then fsync'd, then answered: the coordinator decides only on
  durable claims, so a restarted participant still asks before dropping.
- publish: INTENT (the partition's committed end here and the chunk plan) is
  fsync'd before the first append; each chunk is one log append carrying a
  `WriteStamp` on its first record; PUBLISHED is fsync'd after the last. After
  a crash between the two (or an append whose outcome was lost), the publish
  resumes: each chunk is looked for by its stamp, at or after the recorded
  index (then after the chunk before it), and appended only if it is not
  there. Chunks are appended in order, each once the one before committed, so
  once one is missing every later one is and the looking stops. Staged files
  of published attempts are then deleted.

On a cluster the appends go to the partition's leader: here if this node
leads, else over a peer call (`AppendStagedRequest`, served by the leader's
`append_staged`, which settles its log before looking for a stamp). The
INTENT's index, this node's commit index when the publish started, bounds
every leader's log: an entry proposed later lands at or after it.

Every handler runs in its own task, shielded from its request: a client that
disconnects cannot cancel a durable step half-way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Hashable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.log import IndexOutOfRange
from laminar.placement import partition_id, split_partition_id
from laminar.replication.replica import PartitionReplica
from laminar.wire import PRODUCER_HEADER, ErrorCode, decode_record, encode_record
from laminar.wire.errors import RequestError
from laminar.wire.writes import (
    WRITE_HEADER,
    AppendStagedRequest,
    Published,
    StagedPart,
    StageRequest,
    WriteStamp,
)
from laminar.writes.area import (
    Ask,
    MissingStagedData,
    NotOwner,
    PublishPlan,
    StagedBatch,
    StagingArea,
    Verdict,
)
from laminar.writes.files import StagingFiles
from laminar.writes.frames import (
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

logger = logging.getLogger("laminar.shards")

T = TypeVar("T")

AppendAtLeader = Callable[[AppendStagedRequest, str | None], Awaitable[tuple[int, bool]]]
"""Send a chunk to the partition's leader (the node last known to lead, if
any): (its first index, whether it was found in the log already)."""

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
        clock: Clock = SYSTEM_CLOCK,
        *,
        node_id: str = "",
        describe: Callable[[int], str] = lambda pid: f"partition {pid:#x}",
        append_at_leader: AppendAtLeader | None = None,
    ) -> None:
        self.area = area
        self.files = files
        self._owns = owns
        self._replica_of = replica_of
        self._ask = ask_coordinator
        self.chunk_bytes = chunk_bytes
        self._clock = clock
        self.node_id = node_id
        self._describe = describe
        self._append_at_leader = append_at_leader
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

    async def stage(self, req: StageRequest, principal: str | None = None) -> tuple[int, bool]:
        """Stage a batch durably for `principal` (a new attempt's owner; an
        existing one's must be it); `(records, duplicate)`."""
        if not req.blobs:
            raise RequestError(ErrorCode.INVALID_REQUEST, "a staged batch needs a record")
        for blob in req.blobs:
            if blob[:1] != b"\x00" and any(name in blob for name in _RESERVED):
                _check_no_reserved_header(blob)
        return await shielded(self._stage(req, principal))

    async def _stage(self, req: StageRequest, principal: str | None) -> tuple[int, bool]:
        pid = req.partition_id
        key = AttemptKey(req.write_id, req.task, req.attempt)
        async with self._locks.hold(("attempt", pid, key)):
            new = self.area.attempt(pid, key) is None
            log = await self._replica_of(pid)
            if new and log.leader not in (None, self.node_id):
                # An attempt starts on the partition's leader, where its publish
                # appends without a hop; later batches follow it wherever it is.
                raise RequestError(
                    ErrorCode.NOT_LEADER,
                    f"node {log.leader} leads the partition; an attempt stages there first",
                    leader=log.leader,
                )
            header = attempt_header(pid, key, req.timeout_ms, principal) if new else []
            batch = batch_frame(req.sequence, req.blobs)
            limit = self._append_bytes(log)
            if frame_bytes(batch) > limit:
                raise RequestError(
                    ErrorCode.RECORD_TOO_LARGE,
                    f"a staged batch of {frame_bytes(batch)} bytes is over the partition's "
                    f"publish append size of {limit} bytes; send smaller batches",
                )
            size = frame_bytes(header) + frame_bytes(batch)
            decision = self.area.decide_stage(
                pid, key, req.sequence, len(req.blobs), size, principal
            )
            if decision.verdict is Verdict.NOT_OWNER:
                raise RequestError(ErrorCode.NOT_AUTHORIZED, decision.reason)
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
            now = self._clock.monotonic()
            self.area.staged(pid, key, staged, size, req.timeout_ms, now, principal)
            self.stats.batches_staged += 1
            self.stats.bytes_staged += size
            return len(req.blobs), False

    # -- check (a coordinator's prepare) ---------------------------------------------------

    async def check(
        self, pid: int, commit_id: int, parts: tuple[StagedPart, ...], principal: str | None = None
    ) -> int:
        """Claim `parts` for `commit_id` durably if each is staged in full by
        `principal` (the commit's owner); their records."""
        return await shielded(self._check(pid, commit_id, parts, principal))

    async def _check(
        self, pid: int, commit_id: int, parts: tuple[StagedPart, ...], principal: str | None
    ) -> int:
        async with self._locks.hold(("commit", pid, commit_id)):
            try:
                self.area.check_owner(pid, parts, principal)
                records = self.area.check(pid, parts)
            except MissingStagedData as exc:
                raise self._missing(pid, exc) from None
            except NotOwner as exc:
                raise RequestError(
                    ErrorCode.NOT_AUTHORIZED, f"{self._describe(pid)}: {exc}"
                ) from None
            new = self.area.commit_record(pid, commit_id) is None
            # In memory first: expiry keeps the parts from now on (conservative).
            self.area.claimed(pid, commit_id, parts, self._clock.monotonic())
            header = commit_header(pid, commit_id) if new else []
            if new:
                await self.files.ensure_dir(self.directory(pid))
            await self.files.append(
                self.commit_path(pid, commit_id), [*header, *claim_frame(parts)], create=new
            )
            return records

    def _missing(self, pid: int, exc: MissingStagedData) -> RequestError:
        """STAGED_DATA_MISSING saying what is missing, where, and why if known."""
        where = self._describe(pid) + (f" on node {self.node_id}" if self.node_id else "")
        return RequestError(ErrorCode.STAGED_DATA_MISSING, f"{where}: {exc}")

    # -- publish ----------------------------------------------------------------------------

    async def publish(
        self, pid: int, commit_id: int, parts: tuple[StagedPart, ...], slot: int = 0
    ) -> Published:
        """Append the parts' records to the partition once (module docstring)."""
        return await shielded(self._publish(pid, commit_id, parts, slot))

    async def _publish(
        self, pid: int, commit_id: int, parts: tuple[StagedPart, ...], slot: int
    ) -> Published:
        async with self._locks.hold(("commit", pid, commit_id)):
            record = self.area.commit_record(pid, commit_id)
            if record is not None and record.published is not None:
                # Published before; its attempts' files may be back (their
                # removal was not durable when the power went): drop them again.
                published = record.published
            else:
                published = await self._publish_new(pid, commit_id, parts, slot, record is None)
        for part in parts:
            await self._drop_attempt(
                pid, AttemptKey.of(part), f"published by commit {commit_id:#x}"
            )
        return published

    async def _publish_new(
        self, pid: int, commit_id: int, parts: tuple[StagedPart, ...], slot: int, new: bool
    ) -> Published:
        log = await self._replica_of(pid)
        try:
            plan = self.area.plan_publish(pid, commit_id, parts, self._append_bytes(log))
        except MissingStagedData as exc:
            logger.error("commit %#x cannot be published: %s", commit_id, exc)
            raise self._missing(pid, exc) from None
        self.area.publishing(pid, parts, True)
        try:
            published = await self._append_chunks(log, pid, commit_id, slot, plan, new=new)
        finally:
            self.area.publishing(pid, parts, False)
        await self.files.append(
            self.commit_path(pid, commit_id), published_frame(*published[1:]), create=False
        )
        self.area.published(pid, commit_id, published, self._clock.monotonic())
        self.stats.publishes += 1
        self.stats.records_published += published.records
        return published

    async def _append_chunks(
        self,
        log: PartitionReplica,
        pid: int,
        commit_id: int,
        slot: int,
        plan: PublishPlan,
        *,
        new: bool,
    ) -> Published:
        path = self.commit_path(pid, commit_id)
        scan_from: int | None = None
        if plan.fresh:
            intent = Intent(log.highest_index, plan.intent.chunk_batches)
            header = commit_header(pid, commit_id) if new else []
            if new:
                await self.files.ensure_dir(self.directory(pid))
            await self.files.append(path, [*header, *intent_frame(intent)], create=new)
            self.area.intent_recorded(pid, commit_id, intent, self._clock.monotonic())
        else:
            scan_from = plan.intent.start_index  # chunks may be in the log: look first
            self.stats.publishes_resumed += 1
            logger.info(
                "commit %#x on %s: resuming a publish of %d chunks",
                commit_id,
                self._describe(pid),
                len(plan.chunks),
            )
        first: int | None = None
        chunks = len(plan.chunks)
        for number, chunk in enumerate(plan.chunks):
            blobs = await self._chunk_blobs(pid, chunk.batches)
            blobs[0] = _stamped(blobs[0], WriteStamp(commit_id, number, chunks, slot))
            request = AppendStagedRequest(
                pid, commit_id, slot, number, chunks, scan_from, tuple(blobs)
            )
            index, found = await self._append(log, request)
            scan_from = index + 1 if found else None  # missing: so is every later chunk
            first = index if first is None else first
        assert first is not None  # a plan has a chunk
        return Published(pid, first, sum(c.records for c in plan.chunks))

    async def _append(
        self, log: PartitionReplica, request: AppendStagedRequest
    ) -> tuple[int, bool]:
        """Append a chunk here if this node leads the partition (or holds it
        alone), else through the leader."""
        leader = log.leader
        if leader is None or leader == self.node_id:
            try:
                return await self.append_staged(request)
            except RequestError as exc:
                if exc.code != ErrorCode.NOT_LEADER or self._append_at_leader is None:
                    raise
                leader = exc.leader
        if self._append_at_leader is None:
            raise RequestError(ErrorCode.NOT_LEADER, f"node {leader} leads the partition")
        return await self._append_at_leader(request, leader)

    async def append_staged(self, req: AppendStagedRequest) -> tuple[int, bool]:
        """As the partition's leader: append a publish's chunk unless a stamp
        shows it is in the log already (looked for only with `scan_from`, after
        the log settled); (its first index, found)."""
        return await shielded(self._append_staged(req))

    async def _append_staged(self, req: AppendStagedRequest) -> tuple[int, bool]:
        log = await self._replica_of(req.partition_id)
        async with self._locks.hold(("append", req.partition_id, req.commit_id, req.slot)):
            if req.scan_from is not None:
                await log.settle()  # a chunk proposed before may still commit: know first
                index = await _find_chunk(log, req.stamp, req.scan_from)
                if index is not None:
                    return index, True
            index, _ = await log.append_stamped(req.blobs)
            return index, False

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

    async def drop(
        self, pid: int, commit_id: int, parts: tuple[StagedPart, ...], principal: str | None = None
    ) -> int:
        """Forget `commit_id` here and drop the named parts' staged data, and every
        other attempt of their writes no commit claims (the losers: failed and
        speculative attempts), of those `principal` owns; how many attempts were
        dropped."""
        return await shielded(self._drop(pid, commit_id, parts, principal))

    async def _drop(
        self, pid: int, commit_id: int, parts: tuple[StagedPart, ...], principal: str | None
    ) -> int:
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
        why = (
            f"dropped when commit {commit_id:#x} of its write ended without it (aborted, or "
            "committed with another attempt of its task)"
        )
        dropped = 0
        for key in [*named, *(k for w in writes for k in self.area.keys_of_write(pid, w))]:
            attempt = self.area.attempt(pid, key)
            if (
                attempt is not None
                and attempt.claimed_by in (None, commit_id)
                and attempt.principal == principal
            ):
                dropped += await self._drop_attempt(pid, key, why)
        self.stats.attempts_dropped += dropped
        return dropped

    async def _forget_commit(self, pid: int, commit_id: int) -> None:
        if self.area.drop_commit(pid, commit_id) is not None:
            await self.files.remove(self.commit_path(pid, commit_id))

    async def _drop_attempt(self, pid: int, key: AttemptKey, why: str) -> int:
        async with self._locks.hold(("attempt", pid, key)):
            if self.area.drop_attempt(pid, key, why) is None:
                return 0
            await self.files.remove(self.attempt_path(pid, key))
            return 1

    async def drop_partition(self, pid: int) -> None:
        """The partition's topic was deleted: its staged data goes with it."""
        for attempt in self.area.attempts_of(pid):
            await self._drop_attempt(pid, attempt.key, "dropped with its topic (deleted)")
        for record in self.area.commits_of(pid):
            async with self._locks.hold(("commit", pid, record.commit_id)):
                await self._forget_commit(pid, record.commit_id)
        with contextlib.suppress(OSError):
            os.rmdir(self.directory(pid))

    # -- expiry ---------------------------------------------------------------------------------

    async def expire(self) -> None:
        """One expiry pass (`StagingArea.due`): drop idle unclaimed attempts now, and
        ask coordinators about idle claims in the background."""
        now = self._clock.monotonic()
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
                why = self.area.expired_because(attempt, now)
                self.area.drop_attempt(drop.partition_id, drop.key, why)
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
            keys = self.area.answered(ask, state, self._clock.monotonic())
            if keys is None:
                return
            await self._forget_commit(ask.partition_id, ask.commit_id)
        why = (
            f"dropped once commit {ask.commit_id:#x}, which had claimed it, was {state} at its "
            "coordinator (never decided, aborted, or finished without it)"
        )
        for key in keys:
            attempt = self.area.attempt(ask.partition_id, key)
            if attempt is not None and await self._drop_attempt(ask.partition_id, key, why):
                self.stats.attempts_expired += 1
                self.stats.bytes_expired += attempt.bytes

    # -- recovery ---------------------------------------------------------------------------------

    async def recover(self) -> None:
        """Load what is staged on this shard's partitions (after a start or restart)."""
        now = self._clock.monotonic()
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
        self.area.restore_attempt(
            pid, header.key, header.timeout_ms, batches, end, now, header.principal
        )

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


async def _find_chunk(log: PartitionReplica, stamp: WriteStamp, start: int) -> int | None:
    """The index of the record carrying `stamp` in `log` at or after `start`, if any."""
    name = WRITE_HEADER.encode()
    wanted = stamp.encode()
    index = max(start, log.lowest_index)
    try:
        while index < log.highest_index:
            records = await log.read_range(index, SCAN_CHUNK_BYTES)
            if not records:  # only a replicated log's own entries were left
                break
            for record in records:
                blob = record.value
                if blob[:1] != b"\x00" and name in blob and wanted in blob:
                    _, _, headers = decode_record(blob)
                    if headers is not None and headers.get(WRITE_HEADER) == wanted:
                        return record.index
            index = records[-1].index + 1
    except IndexOutOfRange:
        pass  # retention removed the oldest part meanwhile
    return None
