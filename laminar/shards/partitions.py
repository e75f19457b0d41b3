"""The partition logs one shard owns: opened lazily, closed on delete and drain.

Each partition replica lives in `<data-dir>/partitions/<topic_id>-<partition_idx>/`
(DESIGN.md, Storage) and is written by exactly one shard, its placement owner.

Logs open on first use, not at start-up: a node with thousands of partitions
starts at once and holds descriptors only for partitions in use, and a crashed
shard recovers each log (torn-tail scan) when it is next touched. Opening runs
in its own task, shared by every request that needs the log meanwhile, so
requests waiting for the same partition resume in arrival order (pipelined
produces keep their order) and a cancelled request never abandons an open
half-way. The shard runs that task in its "flush" task queue (`spawn`): a log
starts its group-commit flusher when it opens, and the flusher inherits the
queue, so flushes get the flush queue's CPU shares, not the requests'.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, Protocol

from laminar.log import LogConfig, SegmentedLog
from laminar.log.storage import StorageBackend
from laminar.placement import partition_id, split_partition_id

logger = logging.getLogger("laminar.shards")

_DIR_RE = re.compile(r"(\d+)-(\d+)")


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
    ) -> None:
        self.root = root
        self._spawn = spawn
        self.config = config
        self._backend = backend
        self._owns = owns
        self._logs: dict[int, SegmentedLog] = {}
        self._opening: dict[int, asyncio.Task[SegmentedLog]] = {}
        self._flushes_of_closed = 0
        self._closed = False

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
        """The log of `pid` if it is open already (no waiting)."""
        return self._logs.get(pid)

    async def get(self, pid: int, config: LogConfig | None = None) -> SegmentedLog:
        """The open log of partition `pid`, opening (and recovering) it if needed."""
        log = self._logs.get(pid)
        if log is not None:
            return log
        if self._closed:
            raise RuntimeError("the partition manager is closed")
        task = self._opening.get(pid)
        if task is None:
            opening = self._open(pid, config or self.config)
            if self._spawn is not None:
                task = self._spawn(opening)
            else:
                task = asyncio.get_running_loop().create_task(opening)
            self._opening[pid] = task
        return await asyncio.shield(task)

    async def _open(self, pid: int, config: LogConfig) -> SegmentedLog:
        try:
            log = await SegmentedLog.open(self.directory(pid), config, backend=self._backend)
        finally:
            del self._opening[pid]
        if self._closed:
            await log.close()
            raise RuntimeError("the partition manager closed while a log was opening")
        self._logs[pid] = log
        return log

    async def close_partition(self, pid: int) -> None:
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
        removed = 0
        for idx in range(partitions):
            pid = partition_id(topic_id, idx)
            if not self._owns(pid):
                continue
            await self.close_partition(pid)
            if self._remove_dir(pid):
                removed += 1
        return removed

    def remove_orphans(self, live_topic_ids: Iterable[int], next_topic_id: int) -> int:
        """Delete owned partition directories of deleted topics (a delete this
        shard missed while it was down); return how many.

        Only ids below `next_topic_id` count as deleted: a directory with an id
        the metadata log never assigned is left alone (and logged), so damage to
        the metadata log can never turn into deleting data."""
        live = set(live_topic_ids) | {0}
        removed = 0
        try:
            names = os.listdir(self.root)
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
                logger.warning("partition %s belongs to no topic the metadata log knows", name)
                continue
            pid = partition_id(topic_id, idx)
            if self._owns(pid) and pid not in self._logs and self._remove_dir(pid):
                logger.info("removed partition %s of deleted topic %d", name, topic_id)
                removed += 1
        return removed

    def _remove_dir(self, pid: int) -> bool:
        path = self.directory(pid)
        if not os.path.isdir(path):
            return False
        shutil.rmtree(path, ignore_errors=True)
        return True

    async def close_all(self) -> None:
        """Finish in-flight flushes and close every log (drain)."""
        self._closed = True
        if self._opening:
            await asyncio.wait(list(self._opening.values()))
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
