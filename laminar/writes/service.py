"""The write protocol on one shard: its request handlers, upkeep loop and metrics.

`WriteService` owns this shard's `Participant` (staged data on its
partitions) and `Coordinator` (decisions of its buckets, or of the cluster's
decisions group), serves ops 9-15 and 17 (`laminar.wire.writes`) and runs one
upkeep loop (expiry of staged data, retries of unfinished commits, decision
retention). Its internal requests go through `NodeRoutes`: to this node
through the shard's own dispatcher (`send`: a partition this shard owns is
served in place, any other forwarded to its owner), to another node over an
authenticated peer call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.log.storage import StorageBackend
from laminar.replication.calls import PeerCalls
from laminar.replication.replica import PartitionReplica
from laminar.replication.routes import NodeRoutes, Send
from laminar.security.ownership import Requester, decided_id
from laminar.tasks import settle
from laminar.wire import Op
from laminar.wire.codec import Buffer
from laminar.wire.errors import RequestError
from laminar.wire.writes import (
    COORDINATOR_BUCKETS,
    AbortWriteRequest,
    AbortWriteResponse,
    AppendStagedRequest,
    AppendStagedResponse,
    CheckStagedRequest,
    CheckStagedResponse,
    CommitWriteRequest,
    CommitWriteResponse,
    DropStagedRequest,
    DropStagedResponse,
    PublishStagedRequest,
    PublishStagedResponse,
    StageRequest,
    StageResponse,
    WriteStateResponse,
    WriteStatusRequest,
)
from laminar.writes.area import StagingArea
from laminar.writes.coordinator import Coordinator
from laminar.writes.decision_logs import DecisionLogs
from laminar.writes.files import StagingFiles
from laminar.writes.participant import Participant

logger = logging.getLogger("laminar.shards")

UPKEEP_INTERVAL_S_MAX: Final = 1.0


@dataclass(frozen=True, slots=True)
class WriteSettings:
    """The node's settings for atomic writes (`laminar-node --staging-*`)."""

    staging_dir: str
    staging_bytes_max: int
    staging_timeout_s: float
    decision_retention_ms: int
    publish_chunk_bytes: int


class WriteService:
    """Ops 9-15 and 17 on this shard (see the module docstring)."""

    def __init__(
        self,
        settings: WriteSettings,
        backend: StorageBackend,
        owns: Callable[[int], bool],
        replica_of: Callable[[int], Awaitable[PartitionReplica]],
        check_partition: Callable[[int], Awaitable[object]],
        send: Send,
        decisions: DecisionLogs,
        *,
        node_id: str = "",
        peer_calls: PeerCalls | None = None,
        describe: Callable[[int], str] = lambda pid: f"partition {pid:#x}",
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """`decisions`: where commit decisions are kept (a log per shard
        alone, or the cluster's decisions group); `peer_calls`: requests to
        other nodes (None alone)."""
        self.settings = settings
        self.node_id = node_id
        self._check_partition = check_partition
        self.routes = NodeRoutes(node_id, send, peer_calls, clock)
        self.area = StagingArea(settings.staging_bytes_max, settings.staging_timeout_s)
        self.participant = Participant(
            self.area,
            StagingFiles(backend, settings.staging_dir),
            owns,
            replica_of,
            self._ask_coordinator,
            settings.publish_chunk_bytes,
            clock,
            node_id=node_id,
            describe=describe,
            append_at_leader=None if peer_calls is None else self._append_at_leader,
        )
        self.coordinator = Coordinator(
            decisions, self.routes, settings.decision_retention_ms, describe, clock
        )
        self._upkeep: asyncio.Task[None] | None = None

    def table(self) -> dict[int, Callable[[Any, int, Any], Awaitable[list[Buffer]]]]:
        """The dispatcher's handlers for ops 9-15 and 17."""
        return {
            Op.STAGE: self.stage,
            Op.COMMIT_WRITE: self.commit,
            Op.ABORT_WRITE: self.abort,
            Op.WRITE_STATUS: self.status,
            Op.CHECK_STAGED: self.check,
            Op.PUBLISH_STAGED: self.publish,
            Op.DROP_STAGED: self.drop,
            Op.APPEND_STAGED: self.append_staged,
        }

    async def start(self) -> None:
        """Recover staged data and decisions, roll forward, start the upkeep loop."""
        await self.participant.recover()
        await self.coordinator.start()
        self._upkeep = asyncio.get_running_loop().create_task(self._run_upkeep())

    async def _run_upkeep(self) -> None:
        interval = min(UPKEEP_INTERVAL_S_MAX, self.settings.staging_timeout_s / 4)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.participant.expire()
                await self.coordinator.maintain()
            except Exception:
                logger.exception("staging upkeep failed; trying again")

    async def _ask_coordinator(self, commit_id: int) -> str:
        """The state of `commit_id` at its coordinator (on a cluster, the
        decisions group's leader: a follower could answer from behind)."""
        frame = await self.routes.to_leader(WriteStatusRequest(commit_id))
        return WriteStateResponse.from_frame(frame).state

    async def _append_at_leader(
        self, request: AppendStagedRequest, leader: str | None
    ) -> tuple[int, bool]:
        frame = await self.routes.to_leader(request, leader)
        answer = AppendStagedResponse.from_frame(frame)
        return answer.first_index, answer.found

    # -- handlers ----------------------------------------------------------------------

    async def stage(self, req: StageRequest, corr: int, ctx: Requester) -> list[Buffer]:
        await self._check_partition(req.partition_id)
        records, duplicate = await self.participant.stage(req, ctx.principal)
        return StageResponse(
            req.partition_id, req.sequence, records, duplicate, self.node_id
        ).encode_buffers(corr)

    # A client's commit id is decided under its principal's own id (`decided_id`);
    # answers and refusals name the id the client sent.

    async def commit(self, req: CommitWriteRequest, corr: int, ctx: Requester) -> list[Buffer]:
        decided = decided_id(req.commit_id, ctx, COORDINATOR_BUCKETS)
        with _named_as_sent(decided, req.commit_id):
            first, published = await self.coordinator.commit(decided, req.parts, ctx)
        return CommitWriteResponse(req.commit_id, first, published).encode_buffers(corr)

    async def abort(self, req: AbortWriteRequest, corr: int, ctx: Requester) -> list[Buffer]:
        decided = decided_id(req.commit_id, ctx, COORDINATOR_BUCKETS)
        with _named_as_sent(decided, req.commit_id):
            state = await self.coordinator.abort(decided, req.final, req.parts, ctx)
        return AbortWriteResponse(req.commit_id, state).encode_buffers(corr)

    async def status(self, req: WriteStatusRequest, corr: int, ctx: Requester) -> list[Buffer]:
        decided = decided_id(req.commit_id, ctx, COORDINATOR_BUCKETS)
        with _named_as_sent(decided, req.commit_id):
            state = await self.coordinator.state(decided, ctx)
        return WriteStateResponse(req.commit_id, state).encode_buffers(corr)

    async def check(self, req: CheckStagedRequest, corr: int, ctx: object) -> list[Buffer]:
        await self._check_partition(req.partition_id)
        records = await self.participant.check(
            req.partition_id, req.commit_id, req.parts, req.principal
        )
        return CheckStagedResponse(req.partition_id, 0, records).encode_buffers(corr)

    async def publish(self, req: PublishStagedRequest, corr: int, ctx: object) -> list[Buffer]:
        await self._check_partition(req.partition_id)
        done = await self.participant.publish(req.partition_id, req.commit_id, req.parts, req.slot)
        return PublishStagedResponse(
            req.partition_id, done.first_index, done.records
        ).encode_buffers(corr)

    async def append_staged(self, req: AppendStagedRequest, corr: int, ctx: object) -> list[Buffer]:
        await self._check_partition(req.partition_id)
        first, found = await self.participant.append_staged(req)
        return AppendStagedResponse(req.partition_id, first, found).encode_buffers(corr)

    async def drop(self, req: DropStagedRequest, corr: int, ctx: object) -> list[Buffer]:
        dropped = await self.participant.drop(
            req.partition_id, req.commit_id, req.parts, req.principal
        )
        return DropStagedResponse(req.partition_id, 0, dropped).encode_buffers(corr)

    # -- the shard's life --------------------------------------------------------------

    async def drop_topic(self, topic_id: int) -> None:
        """A deleted topic's staged data goes with it."""
        for pid in self.area.partitions():
            if pid >> 32 == topic_id:
                await self.participant.drop_partition(pid)

    def stats(self) -> dict[str, float]:
        """Counters and gauges for /metrics (`laminar.node.prometheus`)."""
        s = self.participant.stats
        c = self.coordinator
        return {
            "staged_bytes": self.area.bytes,
            "staged_bytes_max": self.area.bytes_max,
            "staged_attempts": self.area.attempt_count,
            "staged_batches_total": s.batches_staged,
            "staged_bytes_total": s.bytes_staged,
            "staging_refused_full_total": s.refused_full,
            "staged_expired_total": s.attempts_expired,
            "staged_expired_bytes_total": s.bytes_expired,
            "staged_dropped_total": s.attempts_dropped,
            "published_records_total": s.records_published,
            "publishes_total": s.publishes,
            "publishes_resumed_total": s.publishes_resumed,
            "writes_committed_total": c.commits,
            "writes_aborted_total": c.aborts,
            "writes_rolled_forward_total": c.roll_forwards,
            "writes_pending": c.pending,
        }

    async def close(self) -> None:
        if self._upkeep is not None:
            self._upkeep.cancel()
            await settle(self._upkeep)
        await self.coordinator.close()
        await self.participant.close()


@contextlib.contextmanager
def _named_as_sent(decided: int, sent: int) -> Iterator[None]:
    """A refusal about commit `decided` names `sent`, the id the client knows."""
    try:
        yield
    except RequestError as exc:
        if decided != sent:
            exc.message = exc.message.replace(f"{decided:#x}", f"{sent:#x}")
            exc.args = (exc.message,)
        raise
