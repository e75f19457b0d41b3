"""The metadata log on a running shard: appended by its owner, tailed by the rest.

Theory of operation (the state machine itself is `metadata.MetadataState`):

- Owner (the shard that owns `METADATA_PID`): at start it opens the metadata
  partition (always flushed with fdatasync, whatever `--flush` says) and
  replays it. A create or delete is planned against the state, appended
  (durable), applied locally, and then acknowledged only once every live
  follower has applied it too, so a client that creates a topic and then
  produces to another shard, or lists topics on another shard, sees the topic.
- Followers (every other shard) tail the owner's log over the inter-shard
  channel: a FETCH of the metadata partition wrapped in a FORWARD (so the owner
  knows who asks), long-polling at the end of the log. A fetch from index `n`
  tells the owner the follower has applied everything below `n`; that is how
  the owner knows whom to wait for. A follower that has not polled for
  `FOLLOWER_LIVE_S` (dead, restarting) is not waited for: when it comes back
  it replays from the start.
- Any shard that meets a topic id it has never seen (a request racing a create
  it has not applied yet) first catches up with the owner (`catch_up`) before
  answering UNKNOWN_TOPIC.
- Applying a delete removes the shard's own partitions of that topic; after the
  first catch-up a shard also removes partition directories of topics deleted
  while it was down (`PartitionManager.remove_orphans`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from laminar.log import LogConfig, SegmentedLog
from laminar.shards.channels import ChannelError, Channels
from laminar.shards.metadata import (
    METADATA_PID,
    Applied,
    MetadataError,
    MetadataState,
    encode_entry,
)
from laminar.shards.partitions import LongPolls, PartitionManager
from laminar.wire import (
    ErrorCode,
    ErrorResponse,
    FetchedRecord,
    FetchRequest,
    FetchResponse,
    ForwardRequest,
    ForwardResponse,
    TopicInfo,
    decode_frame,
    decode_response,
)

logger = logging.getLogger("laminar.shards")

POLL_WAIT_MS = 1000
"""How long a follower's fetch waits at the end of the log."""
FOLLOWER_LIVE_S = 3.0
"""A follower that has not fetched for this long is presumed down."""
FOLLOWER_WAIT_S = 10.0
"""The longest a create/delete waits for live followers to apply it."""
CHANNEL_TIMEOUT_S = 10.0
RETRY_S = (0.05, 0.1, 0.2, 0.5, 1.0)

OnApplied = Callable[[Applied], Awaitable[None]]


class MetadataService:
    """One shard's view of the metadata log (see the module docstring)."""

    def __init__(
        self,
        shard_id: int,
        owner: int,
        partitions: PartitionManager,
        channels: Channels,
        on_applied: OnApplied,
        shard_count: int,
        polls: LongPolls,
    ) -> None:
        self.shard_id = shard_id
        self.owner = owner
        self.is_owner = shard_id == owner
        self.state = MetadataState()
        self._shard_count = shard_count
        self._partitions = partitions
        self._polls = polls
        self._channels = channels
        self._on_applied = on_applied
        self._log: SegmentedLog | None = None
        self._apply_lock = asyncio.Lock()
        self._write_lock = asyncio.Lock()
        self._ready = asyncio.get_running_loop().create_future()
        self._catching_up: asyncio.Task[None] | None = None
        self._follower: asyncio.Task[None] | None = None
        self._positions: dict[int, int] = {}
        self._last_seen: dict[int, float] = {}
        self._position_waiters: list[asyncio.Future[None]] = []
        self._stopped = False

    # -- start and stop --------------------------------------------------------

    async def start(self) -> None:
        """Rebuild the state: replay the log (owner) or catch up with the owner."""
        if self.is_owner:
            config = LogConfig(segment_bytes=16 << 20, flush="always", preallocate_bytes=0)
            self._log = await self._partitions.get(METADATA_PID, config)
            await self._replay_own()
        else:
            await self._first_catch_up()
            self._follower = asyncio.get_running_loop().create_task(self._follow())
        self._partitions.remove_orphans(
            (t.topic_id for t in self.state.topics()), self.state.next_topic_id
        )
        if not self._ready.done():
            self._ready.set_result(None)

    async def _replay_own(self) -> None:
        assert self._log is not None
        index = self._log.lowest_index
        while index < self._log.highest_index:
            for record in await self._log.read_range(index, 1 << 20, 1024):
                await self._apply(record.index, record.value)
                index = record.index + 1

    async def _first_catch_up(self) -> None:
        attempt = 0
        while True:
            try:
                while await self._fetch_and_apply(0):
                    pass
                return
            except ChannelError as exc:
                delay = RETRY_S[min(attempt, len(RETRY_S) - 1)]
                if attempt in (5, 20) or attempt % 100 == 99:
                    logger.warning("waiting for metadata owner shard %d: %s", self.owner, exc)
                attempt += 1
                await asyncio.sleep(delay)

    def stop(self) -> None:
        self._stopped = True
        if self._follower is not None:
            self._follower.cancel()
        for waiter in self._position_waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- applying --------------------------------------------------------------

    async def _apply(self, index: int, value: bytes) -> None:
        """Apply one entry (skipping entries applied already); caller may race."""
        async with self._apply_lock:
            if index < self.state.applied_index:
                return
            applied = self.state.apply_value(index, value)
            await self._on_applied(applied)

    # -- follower side ---------------------------------------------------------

    async def _fetch_and_apply(self, wait_ms: int) -> int:
        """One fetch from the owner at our applied index; return entries applied."""
        request = FetchRequest(METADATA_PID, self.state.applied_index, max_wait_ms=wait_ms)
        wrapped = ForwardRequest(METADATA_PID, self.shard_id, request.encode(0))
        frame = await self._channels.to(self.owner).request(
            wrapped, CHANNEL_TIMEOUT_S + wait_ms / 1000
        )
        try:
            outer = decode_response(frame)
            if isinstance(outer, ErrorResponse):
                raise ChannelError(f"metadata owner refused: {outer.message}")
            if not isinstance(outer, ForwardResponse):
                raise ChannelError("metadata owner sent an unexpected frame")
            inner = decode_response(decode_frame(outer.frame, len(outer.frame)))
        except ChannelError:
            raise
        except Exception as exc:
            raise ChannelError(f"metadata owner sent an undecodable response: {exc}") from None
        if isinstance(inner, ErrorResponse):
            raise ChannelError(f"metadata fetch failed: {inner.code.name}: {inner.message}")
        if not isinstance(inner, FetchResponse):
            raise ChannelError("metadata owner answered a fetch with something else")
        for record in inner.records:
            await self._apply(record.index, record.blob)
        return len(inner.records)

    async def _follow(self) -> None:
        attempt = 0
        while not self._stopped:
            try:
                await self._fetch_and_apply(POLL_WAIT_MS)
                attempt = 0
            except ChannelError as exc:
                if attempt == 3:
                    logger.warning("metadata tail from shard %d interrupted: %s", self.owner, exc)
                await asyncio.sleep(RETRY_S[min(attempt, len(RETRY_S) - 1)])
                attempt += 1

    async def catch_up(self) -> None:
        """Apply whatever the owner has that this shard has not (a barrier).

        Concurrent callers share one round trip. A no-op on the owner."""
        if self.is_owner or self._stopped:
            return
        task = self._catching_up
        if task is None:
            task = asyncio.get_running_loop().create_task(self._catch_up_once())
            self._catching_up = task
        await asyncio.shield(task)

    async def _catch_up_once(self) -> None:
        try:
            while await self._fetch_and_apply(0):
                pass
        except ChannelError as exc:
            logger.debug("metadata catch-up failed: %s", exc)
        finally:
            self._catching_up = None

    # -- owner side ------------------------------------------------------------

    async def create_topic(
        self, name: str, partitions: int, config: dict[str, int | str]
    ) -> TopicInfo:
        """Create a topic (owner only); raises `MetadataError`."""
        log = self._owner_log()
        async with self._write_lock:
            entry = self.state.plan_create(name, partitions, config)
            index = await log.append([encode_entry(entry)])
            await self._apply(index, encode_entry(entry))
        await self._wait_for_followers(index + 1)
        return entry.info()

    async def delete_topic(self, name: str) -> TopicInfo:
        """Delete a topic (owner only); raises `MetadataError`."""
        log = self._owner_log()
        async with self._write_lock:
            entry = self.state.plan_delete(name)
            topic = self.state.by_id(entry.topic_id)
            assert topic is not None
            index = await log.append([encode_entry(entry)])
            await self._apply(index, encode_entry(entry))
        await self._wait_for_followers(index + 1)
        return topic

    def _owner_log(self) -> SegmentedLog:
        if self._log is None:
            raise MetadataError(
                ErrorCode.NOT_OWNER, f"shard {self.shard_id} does not own the metadata log"
            )
        return self._log

    async def serve_fetch(self, request: FetchRequest, origin: int | None) -> FetchResponse:
        """Answer a follower's fetch of the metadata log (owner only)."""
        await asyncio.shield(self._ready)
        log = self._owner_log()
        if origin is not None and origin != self.shard_id:
            self._positions[origin] = request.index
            self._last_seen[origin] = time.monotonic()
            self._wake_position_waiters()
        if not log.lowest_index <= request.index <= log.highest_index:
            raise MetadataError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"metadata index {request.index} is outside [{log.lowest_index}, "
                f"{log.highest_index}]",
            )
        if request.index == log.highest_index and request.max_wait_ms and not self._stopped:
            await self._polls.wait(log, request.index, request.max_wait_ms / 1000)
        records = []
        if request.index < log.highest_index:
            records = await log.read_range(request.index, 1 << 20, 1024)
        if origin is not None and origin != self.shard_id:
            self._last_seen[origin] = time.monotonic()
        return FetchResponse(
            METADATA_PID,
            tuple(FetchedRecord(r.index, r.timestamp_ms, r.value) for r in records),
            log.lowest_index,
            log.highest_index,
        )

    def _wake_position_waiters(self) -> None:
        waiters, self._position_waiters = self._position_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _lagging_followers(self, target: int) -> list[int]:
        now = time.monotonic()
        return [
            peer
            for peer in range(self._shard_count)
            if peer != self.shard_id
            and self._positions.get(peer, 0) < target
            and now - self._last_seen.get(peer, -1e9) < FOLLOWER_LIVE_S
        ]

    async def _wait_for_followers(self, target: int) -> None:
        """Wait until every live follower has applied entries below `target`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FOLLOWER_WAIT_S
        while not self._stopped:
            lagging = self._lagging_followers(target)
            remaining = deadline - loop.time()
            if not lagging:
                return
            if remaining <= 0:
                logger.warning(
                    "metadata entry %d not yet applied by shards %s", target - 1, lagging
                )
                return
            waiter = loop.create_future()
            self._position_waiters.append(waiter)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, min(remaining, FOLLOWER_LIVE_S / 2))
