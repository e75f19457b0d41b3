"""Consumer groups on a shard: the group ops it serves, and the coordinators
of the positions partitions it leads.

- FIND_COORDINATOR is served by the metadata owner shard (the router sends it
  there): it makes the positions topic on a group's first use
  (`laminar.groups.positions`) and names the partition that holds the group.
- Every other group op names that partition and is served by the shard that
  owns it, by the partition's leader replica. The shard keeps one
  `GroupCoordinator` core per positions partition it leads, built by
  replaying the partition's committed log and kept under the replica's
  `leadership` token: a new leadership (or a failed append) throws it away
  and the next request builds it again, so a core never answers from a state
  the log does not hold.
- Persist before answer: a core's `Step` is appended to the partition as one
  log record (a chunk per MiB for the rare larger step: only a checkpoint
  gets there, and a checkpoint restates state, so a prefix of it is harmless)
  in the order the steps were made, and the answer goes out once the record
  its `wait_for` names is committed. The partition's topic has
  `flush.messages=1`: committed means fsynced on a majority.
- Members are owned: a heartbeat or commit acting as a member (or a static
  member's instance) that another principal joined is refused
  (NOT_AUTHORIZED) before the core is called; the member record carries its
  principal, so a new leader's core, replayed from the log, knows it.
- A commit is checked against each partition's end (the committed index of
  its leader, asked over `NodeRoutes` and cached: ends only grow).
- Sessions expire on a timer (`TICK_S`), so a member that died is gone within
  its session timeout and a tick.
- A settled (or waiting) member's heartbeat is held
  (`GroupCoordinator.hold_s`, a long poll) and answered again as soon as its
  group changes: a leave reaches the other members in a round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import msgpack

from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.groups import records as positions_log
from laminar.groups.coordinator import GroupCoordinator, Limits, Step
from laminar.groups.errors import RecordCodecError
from laminar.groups.frames import (
    CommitAnswerFrame,
    DeleteAnswerFrame,
    DescribeAnswerFrame,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    GroupMessage,
    HeartbeatAnswerFrame,
    ListAnswerFrame,
    PositionsAnswerFrame,
    ResetAnswerFrame,
)
from laminar.groups.lag import LagWatch
from laminar.groups.messages import CommitRequest, GroupView, HeartbeatRequest, TopicPartition
from laminar.groups.positions import (
    POSITIONS_CONFIG,
    POSITIONS_TOPIC,
    coordinator_partition,
    group_id_problem,
)
from laminar.placement import U32_MAX, partition_id
from laminar.replication.metadata import MetadataError
from laminar.replication.metalog import MetadataService
from laminar.replication.replica import PartitionReplica
from laminar.replication.routes import NodeRoutes, NodeUnreachable
from laminar.security.ownership import Requester, may_act_for, not_owner_message
from laminar.wire import ErrorCode, Frame, ListOffsetsRequest, ListOffsetsResponse, Op, TopicInfo
from laminar.wire.codec import Buffer
from laminar.wire.errors import ProtocolError, RequestError
from laminar.wire.records import decode_record, encode_record

logger = logging.getLogger("laminar.groups")

A = TypeVar("A")
Handler = Callable[[Any, int, Any], Awaitable[list[Buffer]]]
TICK_S: Final = 0.25
"""How often a coordinator looks for expired sessions."""
CHUNK_BYTES: Final = 1 << 20
"""A step's records go into log records of at most this many bytes (one, but
for a checkpoint of a large state)."""
STEP_VERSION: Final = 1
LIMITS: Final = Limits()
"""The bounds the hosted cores keep (the defaults)."""
CHECKPOINT_HEADER: Final = "laminar.checkpoint"
"""On the last log record of a checkpoint: how many log records it spans."""


def encode_step(step: Step[Any]) -> list[bytes]:
    """The log records (laminar record blobs) that hold a step's records: its
    call's own first, then its checkpoint, if any, whose last record carries
    the `CHECKPOINT_HEADER` (the checkpoint's record count) so that every
    replica finds where the state was last restated."""
    cut = len(step.records) if step.checkpoint_at is None else step.checkpoint_at
    blobs = [_blob(chunk) for chunk in _chunks(step.records[:cut])]
    if step.checkpoint_at is not None:
        chunks = _chunks(step.records[cut:])
        blobs += [_blob(chunk) for chunk in chunks[:-1]]
        blobs.append(_blob(chunks[-1], {CHECKPOINT_HEADER: str(len(chunks)).encode()}))
    return blobs


def _chunks(records: Iterable[positions_log.Record]) -> list[list[bytes]]:
    chunks: list[list[bytes]] = []
    size = 0
    for record in records:
        data = positions_log.encode(record)
        if not chunks or size + len(data) > CHUNK_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(data)
        size += len(data)
    return chunks or [[]]


def _blob(chunk: list[bytes], headers: dict[str, bytes] | None = None) -> bytes:
    value = msgpack.packb([STEP_VERSION, chunk], use_bin_type=True)
    return encode_record(value, None, headers)


def decode_step(blob: bytes) -> list[positions_log.Record]:
    """The core records one log record holds; `RecordCodecError` if damaged."""
    value, _, _ = decode_record(blob)
    try:
        version, chunk = msgpack.unpackb(value, raw=False, max_str_len=0, max_map_len=0)
    except Exception as exc:
        raise RecordCodecError(f"a positions log record: {exc}") from None
    if version != STEP_VERSION or type(chunk) is not list:
        raise RecordCodecError("a positions log record must be [1, [records]]")
    return [positions_log.decode(data) for data in chunk]


@dataclass
class Hosted:
    """The core of one positions partition this shard leads, under one leadership."""

    pid: int
    replica: PartitionReplica
    leadership: object
    core: GroupCoordinator
    committed_seq: int
    broken: bool = False
    appending: asyncio.Lock = field(default_factory=asyncio.Lock)
    waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)
    """Answers waiting for a record to commit: (its sequence number, woken)."""
    held: dict[tuple[str, int], asyncio.Future[None]] = field(default_factory=dict)
    """Held heartbeats: (group, the version they saw) -> woken when it moves."""
    ticker: asyncio.Task[None] | None = None

    def advance(self, seq: int) -> None:
        """Every record up to `seq` is committed: wake the answers waiting for them."""
        self.committed_seq = max(self.committed_seq, seq)
        self.core.committed(self.committed_seq)
        self._wake(lambda waited: waited <= self.committed_seq)
        self._wake_held(lambda group, version: self.core.group_version(group) != version)

    def group_moved(self, group: str, version: int) -> asyncio.Future[None]:
        """Done once the group's version is no longer `version` (or the core is dropped)."""
        moved = self.held.get((group, version))
        if moved is None:
            moved = self.held[group, version] = asyncio.get_running_loop().create_future()
            self._wake_held(lambda group, version: self.core.group_version(group) != version)
        return moved

    def _wake(self, due: Callable[[int], bool]) -> None:
        still = []
        for seq, waiter in self.waiters:
            if due(seq):
                if not waiter.done():
                    waiter.set_result(None)
            else:
                still.append((seq, waiter))
        self.waiters = still

    def _wake_held(self, due: Callable[[str, int], bool]) -> None:
        for (group, version), moved in list(self.held.items()):
            if due(group, version):
                if not moved.done():
                    moved.set_result(None)
                del self.held[group, version]

    def drop(self) -> None:
        """Broken: wake everyone (they find it broken), stop expiring sessions."""
        self.broken = True
        self._wake(lambda waited: True)
        self._wake_held(lambda group, version: True)
        if self.ticker is not None:
            self.ticker.cancel()


class GroupService:
    """The group ops of one shard (see the module docstring)."""

    def __init__(
        self,
        metadata: MetadataService,
        positions_partitions: int,
        replica_of: Callable[[int], Awaitable[PartitionReplica]],
        routes: NodeRoutes,
        placed_on: Callable[[int, TopicInfo], Sequence[str]],
        clock: Clock = SYSTEM_CLOCK,
        lists_group: Callable[[Requester, str], bool] | None = None,
    ) -> None:
        """`lists_group`: whether a group list shows a group to a requester
        (a node with logins: what its ACLs let it describe; None: every group)."""
        self._metadata = metadata
        self._lists_group = lists_group
        self._positions_partitions = positions_partitions
        self._replica_of = replica_of
        self._routes = routes
        self._placed_on = placed_on
        self._clock = clock
        self._hosted: dict[int, Hosted] = {}
        self._building: dict[int, asyncio.Future[Hosted]] = {}
        self._ends: dict[int, int] = {}
        """Partition id -> the highest committed end seen (ends only grow)."""
        self._floors: dict[int, int] = {}
        """Positions partition id -> where its last committed checkpoint starts."""
        self._scanned: dict[int, int] = {}
        """Positions partition id -> the index its checkpoint scan goes on from."""
        self.lag = LagWatch(self.group_views, metadata, routes)
        """The hosted groups' lag, for /metrics."""

    def table(self) -> dict[int, Handler]:
        """The dispatcher's handlers for the group ops."""
        return {
            Op.FIND_COORDINATOR: self.find_coordinator,
            Op.GROUP_HEARTBEAT: self.heartbeat,
            Op.GROUP_COMMIT: self.commit,
            Op.GROUP_POSITIONS: self.positions,
            Op.GROUP_DESCRIBE: self.describe,
            Op.GROUP_LIST: self.list_groups,
            Op.GROUP_RESET: self.reset,
            Op.GROUP_DELETE: self.delete,
        }

    # -- finding a coordinator -------------------------------------------------

    async def find_coordinator(
        self, req: FindCoordinatorRequest, corr: int, ctx: Any
    ) -> list[Buffer]:
        _check_group(req.group)
        topic = await self._positions_topic()
        partition = coordinator_partition(req.group, topic.partitions)
        return FindCoordinatorResponse(req.group, topic, partition).encode_buffers(corr)

    async def _positions_topic(self) -> TopicInfo:
        """The positions topic, made now if this is the cluster's first group
        (in a cluster only the metadata leader can: others answer NOT_LEADER
        naming it, and the client asks there)."""
        await self._metadata.ready()
        topic = self._metadata.state.by_name(POSITIONS_TOPIC)
        if topic is not None:
            return topic
        try:
            return await self._metadata.create_topic(
                POSITIONS_TOPIC, self._positions_partitions, dict(POSITIONS_CONFIG)
            )
        except MetadataError as exc:
            made = self._metadata.state.by_name(POSITIONS_TOPIC)
            if exc.code is ErrorCode.TOPIC_EXISTS and made is not None:
                return made  # another request made it first
            raise

    # -- the coordinator's ops ---------------------------------------------------

    async def heartbeat(self, req: GroupMessage, corr: int, ctx: Requester) -> list[Buffer]:
        body, pid = req.body, req.partition_id
        received = self._clock.monotonic()
        seen: list[tuple[Hosted, int, float]] = []

        def beat(core: GroupCoordinator) -> Step[Any]:
            _check_owners(core, body, ctx)
            step = core.heartbeat(body, received_at=received, principal=ctx.principal)
            seen[:] = [
                (self._hosted[pid], core.group_version(body.group), core.hold_s(body, step.answer))
            ]
            return step

        answer = await self._serve(pid, body.group, beat)
        hosted, version, hold = seen[0]
        if hold > 0 and body.may_hold:  # a long poll: answered again once the group moves
            moved = hosted.group_moved(body.group, version)
            timeout = received + hold - self._clock.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(moved), timeout)
                self._check(hosted)  # dropped meanwhile: NOT_READY, the member retries
                answer = await self._serve(pid, body.group, beat)
        if seen[0][0].core.next_is_held(body, answer):  # so it asks again at once
            answer = dataclasses.replace(answer, heartbeat_interval_s=0.0)
        return HeartbeatAnswerFrame(pid, answer).encode_buffers(corr)

    async def commit(self, req: GroupMessage, corr: int, ctx: Requester) -> list[Buffer]:
        body = req.body
        await self._coordinator_partition(req.partition_id, body.group)
        ends = await self._ends_of(body.positions)

        def commit(core: GroupCoordinator) -> Step[Any]:
            _check_owners(core, body, ctx)
            return core.commit(body, ends)

        answer = await self._serve(req.partition_id, body.group, commit)
        return CommitAnswerFrame(req.partition_id, answer).encode_buffers(corr)

    async def positions(self, req: GroupMessage, corr: int, ctx: Any) -> list[Buffer]:
        query = req.body
        answer = await self._serve(
            req.partition_id, query.group, lambda c: c.positions(query.group, query.partitions)
        )
        return PositionsAnswerFrame(req.partition_id, answer).encode_buffers(corr)

    async def describe(self, req: GroupMessage, corr: int, ctx: Any) -> list[Buffer]:
        group = req.body
        answer = await self._serve(req.partition_id, group, lambda c: c.describe(group))
        return DescribeAnswerFrame(req.partition_id, answer).encode_buffers(corr)

    async def list_groups(self, req: GroupMessage, corr: int, ctx: Requester) -> list[Buffer]:
        answer = await self._serve(req.partition_id, None, lambda c: c.list_groups())
        shown = self._lists_group
        if shown is not None:
            groups = tuple(view for view in answer.groups if shown(ctx, view.group))
            answer = dataclasses.replace(answer, groups=groups)
        return ListAnswerFrame(req.partition_id, answer).encode_buffers(corr)

    async def reset(self, req: GroupMessage, corr: int, ctx: Any) -> list[Buffer]:
        body = req.body
        await self._coordinator_partition(req.partition_id, body.group)
        ends = await self._ends_of(body.positions)
        answer = await self._serve(
            req.partition_id,
            body.group,
            lambda c: c.reset_positions(body.group, body.positions, ends),
        )
        return ResetAnswerFrame(req.partition_id, answer).encode_buffers(corr)

    async def delete(self, req: GroupMessage, corr: int, ctx: Any) -> list[Buffer]:
        group = req.body
        answer = await self._serve(req.partition_id, group, lambda c: c.delete_group(group))
        return DeleteAnswerFrame(req.partition_id, answer).encode_buffers(corr)

    # -- serving through a core ------------------------------------------------

    async def _serve(
        self, pid: int, group: str | None, call: Callable[[GroupCoordinator], Step[A]]
    ) -> A:
        """`call` on the core of `pid` (a partition of the positions topic:
        no other log ever gets a coordinator's records), its step made
        durable, its answer."""
        if group is not None:
            await self._coordinator_partition(pid, group)
        else:
            await self._topic(pid)
        hosted = await self._hosted_for(pid)
        step = call(hosted.core)
        await self._persist(hosted, step)
        return step.answer

    async def _coordinator_partition(self, pid: int, group: str) -> None:
        """Refuse a group op sent to a partition that does not hold the group."""
        _check_group(group)
        topic = await self._topic(pid)
        expected = coordinator_partition(group, topic.partitions)
        if pid & U32_MAX != expected:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"group {group[:60]!r} is held by partition {expected} of {POSITIONS_TOPIC}, "
                f"not {pid & U32_MAX}",
            )

    async def _topic(self, pid: int) -> TopicInfo:
        await self._metadata.ready()
        topic = self._metadata.state.by_id(pid >> 32)
        if topic is None or topic.name != POSITIONS_TOPIC or pid & U32_MAX >= topic.partitions:
            raise RequestError(
                ErrorCode.INVALID_REQUEST,
                f"partition id {pid} is not a partition of {POSITIONS_TOPIC}: "
                "ask FIND_COORDINATOR where a group lives",
            )
        return topic

    async def _persist(self, hosted: Hosted, step: Step[Any]) -> None:
        """Append `step` after every step made before it; return once its
        answer's `wait_for` record is committed. A failed append breaks the
        core (the next request replays the log) and fails this request."""
        wait_for = getattr(step.answer, "wait_for", hosted.committed_seq)
        if step.records:
            blobs = encode_step(step)
            async with hosted.appending:
                self._check(hosted)
                with self._breaking(hosted):
                    # Placed in the log's order now, durable later: steps made
                    # one after another share flushes (and fail together).
                    placed = hosted.replica.place(blobs)
                    if placed is None:  # placing must wait: append in turn
                        await hosted.replica.append_stamped(blobs)
            if placed is not None:
                with self._breaking(hosted):
                    await placed
            hosted.advance(step.first_seq + len(step.records) - 1)
        if hosted.committed_seq < wait_for:
            waiter = asyncio.get_running_loop().create_future()
            hosted.waiters.append((wait_for, waiter))
            await waiter
            self._check(hosted)

    @contextlib.contextmanager
    def _breaking(self, hosted: Hosted) -> Iterator[None]:
        """A failed append breaks the core: the next request replays the log."""
        try:
            yield
        except BaseException:
            self._break(hosted, "an append to the positions log failed")
            raise

    @staticmethod
    def _check(hosted: Hosted) -> None:
        if hosted.broken:
            raise RequestError(
                ErrorCode.NOT_READY,
                "the group coordinator is reloading its state (an append failed or "
                "leadership moved); retry",
            )

    def _break(self, hosted: Hosted, why: str) -> None:
        if hosted.broken:
            return
        logger.info("group coordinator of partition %#x dropped: %s", hosted.pid, why)
        hosted.drop()
        if self._hosted.get(hosted.pid) is hosted:
            del self._hosted[hosted.pid]

    async def _hosted_for(self, pid: int) -> Hosted:
        """The core of `pid` under the replica's current leadership (built now
        by replaying the committed log if there is none)."""
        replica = await self._replica_of(pid)
        hosted = self._hosted.get(pid)
        if hosted is not None and hosted.leadership is replica.leadership and not hosted.broken:
            return hosted
        if hosted is not None:
            self._break(hosted, "leadership moved")
        building = self._building.get(pid)
        if building is None:
            building = asyncio.get_running_loop().create_future()
            self._building[pid] = building
            try:
                building.set_result(await self._build(pid, replica))
            except BaseException as exc:
                building.set_exception(exc)
                building.exception()  # retrieved: waiters get it raised
            finally:
                del self._building[pid]
        return await asyncio.shield(building)

    async def _build(self, pid: int, replica: PartitionReplica) -> Hosted:
        replica.check_writable()  # the leader, its own first entry committed
        leadership = replica.leadership
        steps: list[positions_log.Record] = []
        index = replica.lowest_index
        while index < replica.highest_index:
            batch = await replica.read_range(index, 1 << 20, 1024)
            if not batch:
                break
            for record in batch:
                try:
                    steps.extend(decode_step(record.value))
                except RecordCodecError as exc:
                    logger.error("positions log %#x: record %d skipped: %s", pid, record.index, exc)
            index = batch[-1].index + 1
        core = GroupCoordinator.replay(steps, self._clock, random.Random(pid), limits=LIMITS)
        hosted = Hosted(pid, replica, leadership, core, committed_seq=len(steps))
        counts = {topic.name: topic.partitions for topic in self._metadata.state.topics()}
        counts.update(dict.fromkeys(core.known_topics() - counts.keys(), 0))  # deleted since
        for name, count in sorted(counts.items()):  # what the log could not record
            await self._persist(hosted, core.set_partitions(name, count))
        hosted.ticker = asyncio.get_running_loop().create_task(self._tick(hosted))
        self._hosted[pid] = hosted
        self.lag.start()
        logger.info("group coordinator of partition %#x loaded %d records", pid, len(steps))
        return hosted

    async def _tick(self, hosted: Hosted) -> None:
        """Expire sessions as they end, while this core is the partition's."""
        while not hosted.broken:
            await asyncio.sleep(TICK_S)
            deadline = hosted.core.next_deadline()
            if deadline is None or deadline > self._clock.monotonic():
                continue
            with contextlib.suppress(RequestError, NodeUnreachable):
                await self._persist(hosted, hosted.core.tick())

    def topics_changed(self, topics: Mapping[str, int]) -> None:
        """Topics now have these partition counts (0: deleted): each core
        rebalances the groups that see a change."""
        for hosted in list(self._hosted.values()):
            for name, count in topics.items():
                step = hosted.core.set_partitions(name, count)
                if step.records:
                    task = asyncio.get_running_loop().create_task(self._persist(hosted, step))
                    task.add_done_callback(_ignore_failure)

    async def group_views(self) -> list[GroupView]:
        """Every group of the cores this shard hosts, as committed."""
        views: list[GroupView] = []
        for hosted in list(self._hosted.values()):
            step = hosted.core.list_groups()
            with contextlib.suppress(RequestError):
                await self._persist(hosted, step)
                views += step.answer.groups
        return views

    async def close(self) -> None:
        self.lag.stop()
        for hosted in list(self._hosted.values()):
            self._break(hosted, "the shard stops")

    # -- compaction --------------------------------------------------------------

    async def positions_floor(self, topic: TopicInfo, pid: int) -> int | None:
        """For a positions partition this shard holds a replica of (leader or
        not): the first index of the last checkpoint its committed log holds,
        before which retention may drop everything (`Retention`'s floor);
        None for any other topic. Reads only what it has not read before."""
        if topic.name != POSITIONS_TOPIC:
            return None
        replica = await self._replica_of(pid)
        index = max(self._scanned.get(pid, 0), replica.lowest_index)
        while index < replica.highest_index:
            batch = await replica.read_range(index, 1 << 20, 1024)
            if not batch:
                break
            for record in batch:
                count = _checkpoint_count(record.value)
                if count is not None:
                    self._floors[pid] = record.index - count + 1
            index = batch[-1].index + 1
        self._scanned[pid] = index
        return self._floors.get(pid, replica.lowest_index)

    # -- partition ends ----------------------------------------------------------

    async def _ends_of(self, positions: Mapping[TopicPartition, Any]) -> dict[TopicPartition, int]:
        """Each named partition's committed end, at least as large as any index
        in `positions` when that index is within it (asked of the partition's
        leader when the cache is behind the index). Nothing for a request over
        the core's limit: the core refuses it (LIMIT) without looking."""
        ends: dict[TopicPartition, int] = {}
        if len(positions) > LIMITS.partitions_per_request_max:
            return ends
        asks: dict[TopicPartition, tuple[int, TopicInfo, int | None]] = {}
        for tp, index in positions.items():
            topic = self._metadata.state.by_name(tp[0])
            if topic is None or not 0 <= tp[1] < topic.partitions:
                ends[tp] = 0
                continue
            pid = partition_id(topic.topic_id, tp[1])
            known = self._ends.get(pid, -1)
            if index is not None and index <= known:
                ends[tp] = known
            else:
                asks[tp] = (pid, topic, index)
        if asks:
            answers = await asyncio.gather(*(self._end_of(*ask) for ask in asks.values()))
            ends.update(zip(asks, answers, strict=True))
        return ends

    async def _end_of(self, pid: int, topic: TopicInfo, index: int | None) -> int:
        """The partition's committed end, or at least `index` when it is within
        it: what its replicas have committed (each a lower bound of the end,
        answered by any live one), else its leader's."""
        ask = ListOffsetsRequest(pid, any_replica=True)
        answers = await asyncio.gather(
            *(self._routes.to_node(node, ask) for node in self._placed_on(pid, topic)),
            return_exceptions=True,
        )
        end = max(
            [self._ends.get(pid, 0)]
            + [
                ListOffsetsResponse.from_frame(a).committed_index
                for a in answers
                if isinstance(a, Frame)
            ]
        )
        if index is None or index > end:
            leader = ListOffsetsResponse.from_frame(
                await self._routes.to_leader(ListOffsetsRequest(pid))
            )
            end = max(end, leader.committed_index)
        self._ends[pid] = end
        return end


def _checkpoint_count(blob: bytes) -> int | None:
    """How many log records the checkpoint ending at this one spans, if it does."""
    try:
        _, _, headers = decode_record(blob)
    except ProtocolError:
        return None
    count = (headers or {}).get(CHECKPOINT_HEADER)
    return int(count) if count is not None and count.isdigit() and int(count) > 0 else None


def _check_owners(
    core: GroupCoordinator, request: HeartbeatRequest | CommitRequest, requester: Requester
) -> None:
    """NOT_AUTHORIZED (nothing applied) if `request` acts as a member another
    principal joined (`laminar.security.ownership`)."""
    if not all(may_act_for(owner, requester) for owner in core.owners_named(request)):
        raise RequestError(
            ErrorCode.NOT_AUTHORIZED,
            not_owner_message(f"a member of group {request.group[:60]!r}", requester),
        )


def _check_group(group: str) -> None:
    problem = group_id_problem(group)
    if problem is not None:
        raise RequestError(ErrorCode.INVALID_REQUEST, problem)


def _ignore_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.info(
            "a group rebalance after a topic change was not persisted: %s", task.exception()
        )
