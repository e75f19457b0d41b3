"""The metadata log on a running shard: appended by its owner, tailed by the rest.

Theory of operation (the state machine itself is `metadata.MetadataState`):

- Owner (the shard that owns `METADATA_PID`): at start it opens the metadata
  partition (always flushed with fdatasync, whatever `--flush` says) and
  replays it. A create or delete is planned against the state, appended
  (durable), applied locally, and then acknowledged only once every live
  follower has applied it too, so a client that creates a topic and then
  produces to another shard, or lists topics on another shard, sees the topic.
- Followers (every other shard) tail the owner's log over the inter-shard
  channel with METADATA_TAIL, an op only the channel accepts (clients cannot
  read the metadata log, nor pose as a follower), long-polling at the end of
  the log. A tail request from index `n` tells the owner the follower has
  applied everything below `n`; that is how the owner knows whom to wait for.
  Positions are recorded only for requests inside the log's range. A follower
  that has not polled for `FOLLOWER_LIVE_S` (dead, restarting) is not waited
  for: when it comes back it replays from the start.
- Compaction (`metadata.MetadataState.needs_snapshot`): after a change, the
  owner may roll the log, append a snapshot as the new segment's first entry
  and remove the segments before it. A follower asking for an index below the
  log's start gets the entries from the snapshot on.
- In a cluster the metadata partition is a Raft group (every node of the
  static view votes). The owner shard of each node holds that node's member:
  entries are applied as they commit (the group delivers them, in order, and
  again from the start after a restart), only the group's leader plans and
  proposes changes (others answer NOT_LEADER naming it), and the owner serves
  its sibling shards committed entries only. Start-up does not wait for a
  quorum: the shard starts, and requests wait for the metadata (NOT_READY) until
  the member has applied the commit index a leader told it since it started
  (`RaftCore.leader_commit`; its own commit index may predate changes made
  while it was down).
- Compaction in a cluster: after a change, the metadata leader proposes a
  snapshot (planned for the index it will take) as an ordinary entry. Every
  node, once its owner shard has *applied* a snapshot at index `s`, drops the
  segments of its metadata log that end before `s - 1` and rolls the log (so
  the next compaction has a segment boundary to cut at). Record `s - 1` stays:
  Raft anchors a compacted log on its first record, so the snapshot is the
  first entry a restart replays or an install sends. Entries after a gap (a
  restart over a compacted log, an install, a sibling's tail that the owner
  compacted past) are skipped until that snapshot (`MetadataState.resync`).
- Until a shard has its metadata (the owner's replay, a follower's first
  catch-up), requests that name a topic, metadata and topic listings wait for
  it (`ready`, bounded by `READY_WAIT_S`), then get NOT_READY (retriable;
  nothing applied) rather than a wrong UNKNOWN_TOPIC or a short topic list.
- Any shard that meets a topic id it has never seen (a request racing a create
  it has not applied yet) first catches up with the owner (`catch_up`) before
  answering UNKNOWN_TOPIC.
- Applying a delete removes the shard's own partitions of that topic; after the
  first catch-up, and after every snapshot it applies, a shard also removes
  partition directories of topics deleted while it was down
  (`PartitionManager.remove_orphans`: only ids the state proves deleted).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from laminar.channels.siblings import ChannelError, Channels
from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.log import SegmentedLog
from laminar.log.partitions import LongPolls, PartitionManager
from laminar.raft import NORMAL
from laminar.raft import Entry as RaftEntry
from laminar.replication.group import TIMESTAMP
from laminar.replication.metadata import (
    METADATA_PID,
    AlterTopic,
    Applied,
    Change,
    CreateTopic,
    DeleteTopic,
    MetadataError,
    MetadataState,
    TopicLimits,
    encode_entry,
)
from laminar.replication.metadata_home import MetadataHome
from laminar.replication.replica import LocalReplica, PartitionReplica, RaftReplica
from laminar.security.acls import Acl, AclFilter, AddAcls, RemoveAcls
from laminar.security.errors import SecurityRefusal
from laminar.security.scram import Mechanism, ScramCredential
from laminar.security.state import DECOY_KEY_BYTES
from laminar.wire import (
    ErrorCode,
    ErrorResponse,
    FetchedRecord,
    MetadataTailRequest,
    MetadataTailResponse,
    TopicInfo,
    decode_response,
)
from laminar.wire.errors import RequestError

logger = logging.getLogger("laminar.shards")

POLL_WAIT_MS = 1000
"""How long a follower's fetch waits at the end of the log."""
FOLLOWER_LIVE_S = 3.0
"""A follower that has not fetched for this long is presumed down."""
FOLLOWER_WAIT_S = 10.0
"""The longest a create/delete waits for live followers to apply it."""
CHANNEL_TIMEOUT_S = 10.0
RETRY_S = (0.05, 0.1, 0.2, 0.5, 1.0)
READY_WAIT_S = 5.0
"""How long a request waits for this shard's metadata before NOT_READY."""
METADATA_FRAME_BYTES_MIN = 16 << 20
"""The least a shard accepts in one answer on its channels: a snapshot of every
topic is one entry (`config.MAX_TOPICS_CEILING` keeps it well under this)."""

DEFAULT_REPLICATION_FACTOR: Final = 3
"""A topic's replication factor unless its creator says (capped at the cluster size)."""

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
        home: MetadataHome,
        limits: TopicLimits | None = None,
        clock: Clock = SYSTEM_CLOCK,
        ready_wait_s: float = READY_WAIT_S,
    ) -> None:
        self.shard_id = shard_id
        self._ready_wait_s = ready_wait_s
        self._clock = clock
        self._home = home
        self.owner = owner
        self.is_owner = shard_id == owner
        self.state = MetadataState(limits=limits)
        self._shard_count = shard_count
        self._partitions = partitions
        self._polls = polls
        self._channels = channels
        self._on_applied = on_applied
        self._log: PartitionReplica | None = None
        self._committed: asyncio.Queue[tuple[int, bytes | None, bool]] = asyncio.Queue()
        """Cluster: (log index, metadata entry or None for Raft's own, after a gap)."""
        self._delivered_end = 0
        """Cluster: log indexes below this were delivered by the group."""
        self._applied_end = 0
        """Cluster: log indexes below this are applied (the group's own entries too)."""
        self._applied = asyncio.Event()
        self._background: list[asyncio.Task[None]] = []
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
        """Rebuild the state: replay the log (owner) or catch up with the owner.
        In a cluster this returns at once and the state arrives in the background."""
        if self._home.clustered:
            loop = asyncio.get_running_loop()
            self._background.append(loop.create_task(self._start_clustered()))
            return
        if self.is_owner:
            self._log = await self._home.open_log(self._on_committed)
            await self._replay_own()
        else:
            await self._first_catch_up()
            self._follower = asyncio.get_running_loop().create_task(self._follow())
        await self._became_ready()

    async def _became_ready(self) -> None:
        await self._partitions.remove_orphans(
            (t.topic_id for t in self.state.topics()), self.state.next_topic_id
        )
        if not self._ready.done():
            self._ready.set_result(None)

    async def _start_clustered(self) -> None:
        if not self.is_owner:
            await self._first_catch_up()
            self._follower = asyncio.get_running_loop().create_task(self._follow())
            await self._became_ready()
            return
        loop = asyncio.get_running_loop()
        self._background.append(loop.create_task(self._apply_committed()))
        replica = await self._home.open_log(self._on_committed)
        assert isinstance(replica, RaftReplica)
        self._log = replica
        group = replica.group
        # Ready once a leader told this member its commit index (after this
        # start: a restarted member's own commit may predate changes made while
        # it was down), everything up to it is applied here, and (over a
        # compacted log) the first snapshot restored the state.
        while (
            (told := group.core.leader_commit) is None
            or self._applied_end < max(told, group.committed_end)
            or self.state.awaiting_snapshot
        ):
            self._applied.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._applied.wait(), 0.05)
        await self._became_ready()

    def _on_committed(self, entries: Sequence[RaftEntry]) -> None:
        """The Raft group's committed entries (in order, each once): applied in
        turn. They start past the last delivered one after a restart over a
        compacted log or an install: the state then waits for a snapshot."""
        for entry in entries:
            index = entry.index - 1
            value = entry.data[TIMESTAMP.size :] if entry.kind == NORMAL else None
            self._committed.put_nowait((index, value, index > self._delivered_end))
            self._delivered_end = index + 1

    async def _apply_committed(self) -> None:
        while True:
            index, value, after_gap = await self._committed.get()
            try:
                if after_gap:
                    logger.info("metadata entries before %d are compacted: resync", index)
                    self.state.resync()
                if value is not None:
                    await self._apply(index, value)
            except Exception:
                logger.exception("applying metadata entry %d failed", index)
            self._applied_end = index + 1
            self._applied.set()

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

    @property
    def is_ready(self) -> bool:
        return self._ready.done()

    @property
    def clustered(self) -> bool:
        """The metadata is a Raft group: this node may apply a change after
        another node already answered with it."""
        return self._home.clustered

    async def ready(self) -> None:
        """Return once this shard has its metadata; NOT_READY after `ready_wait_s`."""
        if self._ready.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self._ready_wait_s)
        except TimeoutError:
            raise MetadataError(
                ErrorCode.NOT_READY,
                f"shard {self.shard_id} is still loading the topic metadata; retry shortly",
            ) from None

    def stop(self) -> None:
        self._stopped = True
        if self._follower is not None:
            self._follower.cancel()
        for task in self._background:
            task.cancel()
        for waiter in self._position_waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- applying --------------------------------------------------------------

    async def _apply(self, index: int, value: bytes) -> None:
        """Apply one entry (skipping entries applied already); caller may race.
        After a snapshot: reconcile this shard's partitions with it, and (the
        owner, in a cluster) compact the metadata log."""
        async with self._apply_lock:
            if index < self.state.applied_index:
                return
            applied = self.state.apply_value(index, value)
            await self._on_applied(applied)
            snapshot = applied.snapshot
            if snapshot is None:
                return
            await self._partitions.remove_orphans(
                (t.topic_id for t in snapshot.topics), snapshot.next_topic_id, quiet=True
            )
            if isinstance(self._log, RaftReplica):
                await self._compact_replicated(self._log.log, index)

    async def _compact_replicated(self, log: SegmentedLog, snapshot_index: int) -> None:
        """Drop the segments before the applied snapshot at `snapshot_index`,
        keeping the record just before it (Raft's anchor), then roll the log so
        that the next snapshot finds a segment boundary."""
        try:
            removed = await log.remove_before(snapshot_index - 1)
            await log.roll_over()
        except Exception:  # the log failed: the group stops on its own; keep applying
            logger.exception("compacting the metadata log at %d failed", snapshot_index)
            return
        logger.info(
            "metadata log compacted at snapshot %d: %d segments removed, it starts at %d",
            snapshot_index,
            removed,
            log.lowest_index,
        )

    # -- follower side ---------------------------------------------------------

    async def _fetch_and_apply(self, wait_ms: int) -> int:
        """One tail request to the owner from our applied index; return entries applied."""
        request = MetadataTailRequest(self.state.applied_index, self.shard_id, wait_ms)
        frame = await self._channels.to(self.owner).request(
            request, CHANNEL_TIMEOUT_S + wait_ms / 1000
        )
        try:
            answer = decode_response(frame)
        except Exception as exc:
            raise ChannelError(f"metadata owner sent an undecodable response: {exc}") from None
        if isinstance(answer, ErrorResponse):
            raise ChannelError(f"metadata tail failed: {answer.code.name}: {answer.message}")
        if not isinstance(answer, MetadataTailResponse):
            raise ChannelError("metadata owner answered the tail with something else")
        if answer.records and request.index < answer.lowest_index:
            self.state.resync()  # the owner compacted entries this shard had not applied
        for record in answer.records:
            await self._apply(record.index, record.blob)
        return len(answer.records)

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
        self,
        name: str,
        partitions: int,
        config: dict[str, int | str],
        replication_factor: int | None = None,
    ) -> TopicInfo:
        """Create a topic (owner only); raises `MetadataError`. The replication
        factor defaults to 3, or the cluster's size if smaller."""
        placement = self._home.placement()
        nodes = max(1, len(placement))
        placed_on = tuple(placement.items())
        rf = (
            min(DEFAULT_REPLICATION_FACTOR, nodes)
            if replication_factor is None
            else replication_factor
        )
        entry = await self._write(
            lambda: self.state.plan_create(name, partitions, config, rf, nodes, placed_on)
        )
        assert isinstance(entry, CreateTopic)
        topic = self.state.by_id(entry.topic_id)
        return topic if topic is not None else entry.info()

    async def alter_topic(
        self, name: str, config: dict[str, int | str], remove: tuple[str, ...]
    ) -> TopicInfo:
        """Change a topic's config (owner only); raises `MetadataError`."""
        entry = await self._write(lambda: self.state.plan_alter(name, config, remove))
        assert isinstance(entry, AlterTopic)
        topic = self.state.by_id(entry.topic_id)
        if topic is None:  # deleted since: the alter was applied as a no-op
            raise MetadataError(ErrorCode.UNKNOWN_TOPIC, f"no topic named {name[:100]!r}")
        return topic

    async def delete_topic(self, name: str) -> TopicInfo:
        """Delete a topic (owner only); raises `MetadataError`."""
        before: list[TopicInfo] = []

        def plan() -> DeleteTopic:
            entry = self.state.plan_delete(name)
            topic = self.state.by_id(entry.topic_id)
            assert topic is not None
            before.append(topic)
            return entry

        await self._write(plan)
        return before[0]

    async def decommission(self, node_id: str, cancel: bool) -> frozenset[str]:
        """Record that `node_id` leaves the cluster for good (`cancel`: that it
        stays); the decommissioned nodes after it. Only a gossip cluster moves
        replicas, so only there (raises `MetadataError` saying why not)."""
        members, placed = self._home.decommission_view()
        await self._write(lambda: self.state.plan_decommission(node_id, cancel, members, placed))
        return self.state.decommissioned

    # -- users, ACLs (owner only; `laminar.security.state`) --------------------

    async def create_user(
        self, name: str, credentials: tuple[ScramCredential, ...], superuser: bool = False
    ) -> None:
        """Create a user (raises `SecurityRefusal`, `MetadataError`); the first
        user also writes the cluster's decoy key."""
        await self._decoy_key()
        users = self.state.security.users
        await self._write(lambda: users.plan_create(name, credentials, superuser))

    async def alter_user_credentials(
        self, name: str, upserts: tuple[ScramCredential, ...], removed: tuple[Mechanism, ...]
    ) -> None:
        """Upsert and remove some of `name`'s credentials, planned on the state
        the entry lands on (`CredentialStore.plan_alter`: it may create or
        delete the user)."""
        if upserts:
            await self._decoy_key()
        users = self.state.security.users
        await self._write(lambda: users.plan_alter(name, upserts, removed))

    async def _decoy_key(self) -> None:
        """The cluster's decoy key (unknown users' fake salts), written once,
        before the first user."""
        if self.state.security.decoy_key is None:
            with contextlib.suppress(SecurityRefusal):  # a racing create wrote it first
                key = secrets.token_bytes(DECOY_KEY_BYTES)
                await self._write(lambda: self.state.security.plan_decoy_key(key))

    async def set_user_credentials(
        self, name: str, credentials: tuple[ScramCredential, ...]
    ) -> None:
        users = self.state.security.users
        await self._write(lambda: users.plan_set_credentials(name, credentials))

    async def delete_user(self, name: str) -> None:
        users = self.state.security.users
        await self._write(lambda: users.plan_delete(name))

    async def add_acls(self, acls: tuple[Acl, ...]) -> tuple[Acl, ...]:
        """Add ACLs; those that were there already are left out of the answer."""
        entry = await self._write(lambda: self.state.security.acls.plan_add(acls))
        assert isinstance(entry, AddAcls)
        return entry.acls

    async def remove_acls(self, wanted: tuple[AclFilter, ...]) -> tuple[Acl, ...]:
        """Remove every ACL a filter selects; the ACLs removed."""
        acls = self.state.security.acls

        def plan() -> RemoveAcls:
            return acls.plan_remove({acl: None for f in wanted for acl in acls.select(f)})

        entry = await self._write(plan)
        assert isinstance(entry, RemoveAcls)
        return entry.acls

    async def _write(self, plan: Callable[[], Change]) -> Change:
        """Plan, append and apply one entry, compact if due, then wait until every
        live follower applied it (the barrier a create's acknowledgement promises)."""
        await self.ready()
        log = self._owner_log()
        async with self._write_lock:
            log.check_writable()
            if isinstance(log, RaftReplica):
                await self._applied_through(log.highest_index)  # plan on the whole state
                entry = plan()
                index, _ = await log.append_stamped([encode_entry(entry)])
                await self._applied_through(index + 1)
                if self.state.needs_snapshot():
                    await self._propose_snapshot(log)
            elif isinstance(log, LocalReplica):
                entry = plan()
                value = encode_entry(entry)
                index, _ = await log.append_stamped([value])
                await self._apply(index, value)
                if self.state.needs_snapshot():
                    await self._compact(log.log)
            else:
                raise TypeError(f"unexpected metadata replica {log!r}")
        await self._wait_for_followers(index + 1)
        return entry

    async def _applied_through(self, end: int) -> None:
        """Wait until every committed entry below `end` is applied here."""
        while self._applied_end < end and not self._stopped:
            self._applied.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._applied.wait(), 0.1)

    async def _propose_snapshot(self, log: RaftReplica) -> None:
        """Leader, under the write lock, everything committed applied: propose
        the whole state for the next index. Every node compacts once it has
        applied it (`_apply`). A failure here is only a compaction put off: the
        change that prompted it is already committed."""
        try:
            value = encode_entry(self.state.snapshot(log.log_end))
            index, _ = await log.append_stamped([value])
            await self._applied_through(index + 1)
        except (RequestError, MetadataError) as exc:
            logger.info("metadata snapshot put off: %s", exc)

    async def _compact(self, log: SegmentedLog) -> None:
        """Roll the log, start the new segment with a snapshot, drop what is before it."""
        await log.roll_over()
        snapshot = self.state.snapshot(log.highest_index)
        value = encode_entry(snapshot)
        index = await log.append([value])
        await self._apply(index, value)
        removed = await log.remove_before(index)
        logger.info(
            "metadata log compacted: snapshot of %d topics at index %d, %d segments removed",
            len(snapshot.topics),
            index,
            removed,
        )

    def _owner_log(self) -> PartitionReplica:
        if self._log is None:
            raise MetadataError(
                ErrorCode.NOT_OWNER, f"shard {self.shard_id} does not own the metadata log"
            )
        return self._log

    async def serve_tail(self, request: MetadataTailRequest) -> MetadataTailResponse:
        """Answer a follower's tail request (owner only). A request below the log's
        start (compacted) is answered from the start, which is a snapshot."""
        await asyncio.shield(self._ready)
        log = self._owner_log()
        origin = request.shard_id
        if request.index > log.highest_index:
            raise MetadataError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"metadata index {request.index} is past the log's end {log.highest_index}",
            )
        if not 0 <= origin < self._shard_count:
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"there is no shard {origin}")
        if origin != self.shard_id:
            self._positions[origin] = request.index
            self._last_seen[origin] = self._clock.monotonic()
            self._wake_position_waiters()
        index = max(request.index, log.lowest_index)
        if index == log.highest_index and request.max_wait_ms and not self._stopped:
            await self._polls.wait(log, index, min(request.max_wait_ms, POLL_WAIT_MS) / 1000)
        records = []
        if index < log.highest_index:
            records = await log.read_range(index, 1 << 20, 1024)
        if origin != self.shard_id:
            self._last_seen[origin] = self._clock.monotonic()
        return MetadataTailResponse(
            METADATA_PID,
            tuple(FetchedRecord(r.index, r.timestamp_ms, r.value) for r in records),
            log.lowest_index,
            log.highest_index,
            records[-1].index + 1 if records else index,
        )

    def _wake_position_waiters(self) -> None:
        waiters, self._position_waiters = self._position_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _lagging_followers(self, target: int) -> list[int]:
        now = self._clock.monotonic()
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
