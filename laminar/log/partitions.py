"""The partition logs one shard owns: opened lazily, closed on delete and drain.

Each partition replica lives in `<data-dir>/partitions/<topic_id>-<partition_idx>/`
(DESIGN.md, Storage) and is written by exactly one shard, its placement owner.

Logs open on first use, not at start-up: a node with thousands of partitions
starts at once, and a crashed shard recovers each log (torn-tail scan) when it
is next touched. An open log stays open (its recovered state in memory), but
its files come from the shard's `FilePool` (the backend handed in), which
closes idle ones: descriptors follow the partitions in use, not those opened. Opening runs
in its own task, shared by every request that needs the log meanwhile, so
requests waiting for the same partition resume in arrival order (pipelined
produces keep their order) and a cancelled request never abandons an open
half-way. The shard runs that task in its "flush" task queue (`spawn`): a log
starts its group-commit flusher when it opens, and the flusher inherits the
queue, so flushes get the flush queue's CPU shares, not the requests'.

A failed partition (its log failed a write or an fsync: `SegmentedLog.failure`)
is reopened from disk by the next request that needs it: closing drops the
unreleased tail and recovery reads what the disk really holds (never what a
failed fsync left in the page cache). A partition that cannot be opened (damage
recovery refuses to repair, an unreadable disk), or that failed
`MAX_REOPENS` times within `REOPEN_WINDOW_S`, is taken offline: requests are
refused with the reason, `/health` and `laminar status` list it, and it is
tried again no sooner than `OFFLINE_RETRY_S` later. A log that failed because
the disk is full does not count: that is not damage, and the records already
durable must stay readable however often writers retry.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.log import LogConfig, LogError, SegmentedLog
from laminar.log.storage import StorageBackend, atomic_replace, remove_tree
from laminar.lograte import RateLimitedLog
from laminar.placement import partition_id, split_partition_id

logger = logging.getLogger("laminar.shards")
_lines = RateLimitedLog(logger)

_DIR_RE = re.compile(r"(\d+)-(\d+)")
RETIRED_SUFFIX: Final = ".retired"
"""`<dir>.retired`: a mark that the partition's group removed this replica."""
DELETING_SUFFIX: Final = ".deleting"
"""`<dir>.deleting`: a partition directory being deleted (renamed first, durably)."""
_LEFTOVER_RE = re.compile(r"(\d+)-(\d+)(\.retired|\.deleting)")

MAX_REOPENS: Final = 3
REOPEN_WINDOW_S: Final = 60.0
OFFLINE_RETRY_S: Final = 30.0


@dataclass
class OfflinePartition:
    """A partition this shard cannot serve now, and why."""

    pid: int
    reason: str
    since: float  # wall seconds (Unix time) when it went offline
    retry_at: float  # the clock's monotonic() after which a request tries to open it again

    def describe(self) -> dict[str, Any]:
        topic_id, idx = split_partition_id(self.pid)
        return {
            "partition_id": self.pid,
            "topic_id": topic_id,
            "partition": idx,
            "reason": self.reason,
            "since": self.since,
        }


class PartitionOffline(Exception):
    """The partition is offline (see `OfflinePartition`); nothing was done."""

    def __init__(self, offline: OfflinePartition) -> None:
        topic_id, idx = split_partition_id(offline.pid)
        super().__init__(
            f"partition {idx} of topic {topic_id} is offline: {offline.reason} "
            f"(the node retries it no sooner than {OFFLINE_RETRY_S:.0f} s after it failed)"
        )
        self.offline = offline


@dataclass
class _Reopens:
    """When a partition's log failed recently (monotonic seconds)."""

    times: list[float] = field(default_factory=list)

    def note(self, now: float) -> int:
        self.times = [t for t in self.times if now - t < REOPEN_WINDOW_S] + [now]
        return len(self.times)


def _out_of_space(failure: BaseException | None) -> bool:
    """Whether a log failed because its disk (or quota) is full."""
    seen = 0
    while failure is not None and seen < 8:
        if isinstance(failure, OSError) and failure.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        failure = failure.__cause__ or failure.__context__
        seen += 1
    return False


class PartitionManager:
    """Opens, hands out and removes this shard's partition logs."""

    def __init__(
        self,
        root: str,
        config: LogConfig,
        backend: StorageBackend,
        owns: Callable[[int], bool],
        spawn: Callable[[Coroutine[Any, Any, SegmentedLog]], asyncio.Task[SegmentedLog]]
        | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.root = root
        self._spawn = spawn
        self.config = config
        self._backend = backend
        self._owns = owns
        self._logs: dict[int, SegmentedLog] = {}
        self._opening: dict[int, asyncio.Task[SegmentedLog]] = {}
        self._offline: dict[int, OfflinePartition] = {}
        self._reopens: dict[int, _Reopens] = {}
        self.clock = clock
        self._flushes_of_closed = 0
        self._closed = False
        self._retired: set[int] = set()
        """Owned partitions with a durable `.retired` mark (`recover` reads them)."""
        self._chores: set[asyncio.Task[None]] = set()
        """Deletions running in the background; `close_all` waits for them."""

    async def recover(self) -> None:
        """At start: read which owned partitions are retired, and finish (in
        the background) the deletions a crash or a drain interrupted."""
        try:
            names = await self._backend.list_dir(self.root)
        except FileNotFoundError:
            return
        for name in names:
            match = _LEFTOVER_RE.fullmatch(name)
            if match is None or max(int(match[1]), int(match[2])) > 0xFFFF_FFFF:
                continue
            pid = partition_id(int(match[1]), int(match[2]))
            if not self._owns(pid):
                continue
            if match[3] == RETIRED_SUFFIX:
                self._retired.add(pid)
            else:
                self._chore(remove_tree(self._backend, os.path.join(self.root, name)))

    def _chore(self, work: Coroutine[Any, Any, object]) -> None:
        async def logged() -> None:
            try:
                await work
            except Exception:
                logger.exception("deleting in %s failed (the next start retries)", self.root)

        task = asyncio.get_running_loop().create_task(logged())
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    def directory(self, pid: int) -> str:
        topic_id, idx = split_partition_id(pid)
        return os.path.join(self.root, f"{topic_id}-{idx}")

    @property
    def open_count(self) -> int:
        return len(self._logs)

    @property
    def flushes(self) -> int:
        """Group-commit flushes of every log this shard has had open."""
        return self._flushes_of_closed + sum(log.flush_count for log in self._logs.values())

    def opened(self, pid: int) -> SegmentedLog | None:
        """The log of `pid` if it is open and healthy already (no waiting)."""
        log = self._logs.get(pid)
        return log if log is not None and log.failure is None else None

    @property
    def offline(self) -> list[OfflinePartition]:
        return list(self._offline.values())

    async def get(self, pid: int, config: LogConfig | None = None) -> SegmentedLog:
        """The open log of partition `pid`, opening (and recovering) it if needed,
        reopening it from disk if it failed. Raises `PartitionOffline`."""
        log = self._logs.get(pid)
        if log is not None and log.failure is None:
            return log
        if self._closed:
            raise RuntimeError("the partition manager is closed")
        task = self._opening.get(pid)
        if task is None:
            offline = self._offline.get(pid)
            if offline is not None and self.clock.monotonic() < offline.retry_at:
                raise PartitionOffline(offline)
            opening = self._open(pid, config or self.config, failed=log)
            if self._spawn is not None:
                task = self._spawn(opening)
            else:
                task = asyncio.get_running_loop().create_task(opening)
            self._opening[pid] = task
        return await asyncio.shield(task)

    async def _open(self, pid: int, config: LogConfig, failed: SegmentedLog | None) -> SegmentedLog:
        directory = self.directory(pid)
        try:
            if failed is not None:
                await self._retire(pid, failed)
            log = await SegmentedLog.open(
                directory, config, backend=self._backend, clock_ms=self.clock.wall_ms
            )
        except (LogError, OSError) as exc:
            offline = self._offline[pid] = OfflinePartition(
                pid, str(exc), self.clock.wall_ms() / 1000, self.clock.monotonic() + OFFLINE_RETRY_S
            )
            logger.error("partition %s is offline: %s", directory, exc)
            raise PartitionOffline(offline) from exc
        finally:
            del self._opening[pid]
        if self._closed:
            await log.close()
            raise RuntimeError("the partition manager closed while a log was opening")
        if self._offline.pop(pid, None) is not None:
            logger.warning("partition %s is back online", directory)
        self._logs[pid] = log
        return log

    async def _retire(self, pid: int, failed: SegmentedLog) -> None:
        """Close a failed log (which cuts its files back to what was released),
        or give up on it if it failed too often lately."""
        directory = self.directory(pid)
        del self._logs[pid]
        self._flushes_of_closed += failed.flush_count
        try:
            await failed.close()
        except Exception as exc:  # the files stay as they are; recovery judges them
            logger.error("closing failed partition %s: %s", directory, exc)
        if _out_of_space(failed.failure):
            # Not damage: what is durable is intact, and reads must go on.
            _lines.warning(
                "disk full", "partition %s: disk full (%s); reopened", directory, failed.failure
            )
            return
        failures = self._reopens.setdefault(pid, _Reopens()).note(self.clock.monotonic())
        if failures > MAX_REOPENS:
            raise LogError(
                f"its log failed {failures} times within {REOPEN_WINDOW_S:.0f} s; "
                f"last: {failed.failure}"
            )
        logger.warning(
            "partition %s failed (%s); reopening it from disk", directory, failed.failure
        )

    async def close_partition(self, pid: int) -> None:
        self._offline.pop(pid, None)
        self._reopens.pop(pid, None)
        task = self._opening.get(pid)
        if task is not None:
            # Let the open finish, then close what it opened.
            await asyncio.wait([task])
        log = self._logs.pop(pid, None)
        if log is not None:
            self._flushes_of_closed += log.flush_count
            await log.close()

    async def drop_topic(self, topic_id: int, partitions: int) -> int:
        """Close and delete every partition of `topic_id` this shard owns; return
        how many directories were removed."""
        owned = [pid for idx in range(partitions) if self._owns(pid := partition_id(topic_id, idx))]
        for pid in owned:
            await self.close_partition(pid)
            if pid in self._retired:  # the topic is gone: its marks go with it
                self._retired.discard(pid)
                await self._backend.remove(self._retired_mark(pid))
        return await self._remove_dirs(owned)

    async def remove_partition(self, pid: int) -> bool:
        """Close and delete one partition (a replica its group removed), and
        mark it retired: its creation, replayed, must not open it again. The
        mark is durable before the deletion starts: a power cut leaves the
        partition whole, or retired and (once `recover` finished) gone."""
        await self.close_partition(pid)
        await atomic_replace(self._backend, self._retired_mark(pid), b"")
        self._retired.add(pid)
        return await self._remove_dirs([pid]) == 1

    def retired(self, pid: int) -> bool:
        """Whether this replica's group removed it (`remove_partition`)."""
        return pid in self._retired

    def unretire(self, pid: int) -> None:
        """The partition's group takes this node in again (a later move). The
        mark's removal need not be durable: if a power cut brings it back, the
        leader's next message adopts the replica again (its directory, if
        made, is opened at start whatever the mark says)."""
        if pid in self._retired:
            self._retired.discard(pid)
            self._chore(self._forget_mark(pid))

    async def _forget_mark(self, pid: int) -> None:
        if pid not in self._retired:  # not retired again meanwhile
            await self._backend.remove(self._retired_mark(pid))

    def _retired_mark(self, pid: int) -> str:
        return self.directory(pid) + RETIRED_SUFFIX

    async def remove_orphans(
        self, live_topic_ids: Iterable[int], next_topic_id: int, *, quiet: bool = False
    ) -> int:
        """Delete owned partition directories of deleted topics (a delete this
        shard missed while it was down); return how many.

        Only ids below `next_topic_id` count as deleted: a directory with an id
        the metadata log never assigned is left alone (and logged unless
        `quiet`: a snapshot replayed mid-log is followed by later creates), so
        damage to the metadata log can never turn into deleting data."""
        live = set(live_topic_ids) | {0}
        doomed = []
        try:
            names = await self._backend.list_dir(self.root)
        except FileNotFoundError:
            return 0
        for name in names:
            match = _DIR_RE.fullmatch(name)
            if match is None:
                continue
            topic_id, idx = int(match[1]), int(match[2])
            if topic_id in live or topic_id > 0xFFFF_FFFF or idx > 0xFFFF_FFFF:
                continue
            if topic_id >= next_topic_id:
                if not quiet:
                    logger.warning("partition %s belongs to no topic the metadata log knows", name)
                continue
            pid = partition_id(topic_id, idx)
            if self._owns(pid) and pid not in self._logs:
                logger.info("removing partition %s of deleted topic %d", name, topic_id)
                doomed.append(pid)
        return await self._remove_dirs(doomed)

    async def _remove_dirs(self, pids: list[int]) -> int:
        """Delete partitions' directories (closed ones) one backend operation
        at a time, and resumably: each is first renamed to `<dir>.deleting`,
        and the renames are made durable together before anything in them is
        removed, so a crash at any point leaves a partition whole at its name
        or gone from it, never half there; `recover` finishes what is left.
        Returns how many there were."""
        doomed = []
        for pid in pids:
            path = self.directory(pid)
            await remove_tree(self._backend, path + DELETING_SUFFIX)  # a crash interrupted it
            try:
                await self._backend.rename(path, path + DELETING_SUFFIX)
            except FileNotFoundError:
                continue
            doomed.append(path + DELETING_SUFFIX)
        if doomed:
            await self._backend.sync_dir(self.root)
        for path in doomed:
            await remove_tree(self._backend, path)
        return len(doomed)

    async def close_all(self) -> None:
        """Finish in-flight flushes and close every log (drain)."""
        self._closed = True
        if self._chores:
            await asyncio.wait(list(self._chores))
        if self._opening:
            done, _ = await asyncio.wait(list(self._opening.values()))
            for task in done:  # whoever asked may be gone (cancelled by the drain)
                if not task.cancelled():
                    task.exception()
        logs, self._logs = self._logs, {}
        for pid, log in logs.items():
            self._flushes_of_closed += log.flush_count
            try:
                await log.close()
            except Exception:
                logger.exception("closing partition %s failed", self.directory(pid))


class Appendable(Protocol):
    """What a long-poll waits on: a log, or a replica (its commit index)."""

    def wait_for_append(self, index: int, timeout: float, /) -> Awaitable[object]: ...


class LongPolls:
    """Fetches waiting at the end of a log, so a drain can end them at once
    (they then answer with what there is, usually nothing)."""

    def __init__(self) -> None:
        self.draining = False
        self._tasks: set[asyncio.Task[object]] = set()

    async def wait(self, log: Appendable, index: int, timeout_s: float) -> None:
        """Wait until `index` is readable, `timeout_s` pass, or the shard drains."""
        if self.draining:
            return
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await log.wait_for_append(index, timeout_s)
        except asyncio.CancelledError:
            if not self.draining:
                raise
            task.uncancel()  # ended by the drain, not by our caller
        finally:
            self._tasks.discard(task)

    def cancel_all(self) -> None:
        self.draining = True
        for task in list(self._tasks):
            task.cancel()
