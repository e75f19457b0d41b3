"""The coordinator shell: decisions of the commit ids this shard decides.

A commit id is decided in a log (`laminar.writes.decision_logs`): on
one node its bucket's local log, on a cluster the decisions Raft group, whose
leader's shard is the coordinator. Entries are msgpack
(`laminar.writes.decisions`); the table of decisions is rebuilt from
the log at start and whenever the log gets a new leader here, and every
commit decided but not finished is then rolled forward.

A commit, step by step (each step waits for the one before):

1. check: every node holding parts (`StagedPart.node`) confirms, per
   partition, that they are staged in full and claims them durably
   (`CheckStagedRequest`);
2. decide: the "committed" entry is appended to the decision log (fsync, or a
   Raft commit); from here on the commit happens, whatever crashes;
3. publish: every partition appends its parts once (`PublishStagedRequest`,
   idempotent by commit id), all partitions at once; parts of one partition
   held by several nodes one node after the other, each in its own slot;
4. finish: the "done" entry with where the records landed, then the holders
   drop what they staged (in the background).

A driver that dies anywhere in 1 leaves nothing visible (the claims expire);
anywhere after 2, the coordinator finishes the commit itself, and so does a new
leader of the decisions group if the coordinator's node dies. Requests about
one commit id run one at a time here (a lock per id), so a commit sent again
waits for the first and is answered with its outcome.

Ownership (`laminar.security.ownership`): a decision records the principal
that made it; a commit, abort or status request about a decided id from
another client principal is refused (NOT_AUTHORIZED), and the checks and
drops a coordinator sends name that owner, so a partition claims or drops
only the attempts the owner staged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.replication.replica import PartitionReplica
from laminar.replication.routes import NodeRoutes, NodeUnreachable
from laminar.security.ownership import Requester, may_act_for, not_owner_message
from laminar.wire import ErrorCode
from laminar.wire.errors import RequestError
from laminar.wire.writes import (
    CheckStagedRequest,
    DropStagedRequest,
    Published,
    PublishStagedRequest,
    PublishStagedResponse,
    StagedPart,
    WriteState,
)
from laminar.writes.decision_logs import DecisionLogs
from laminar.writes.decisions import (
    Action,
    Decision,
    Decisions,
    aborted_entry,
    committed_entry,
    done_entry,
)
from laminar.writes.participant import KeyedLocks, shielded

logger = logging.getLogger("laminar.shards")

RETRY_INTERVAL_S: Final = 2.0
"""How often a commit that could not be finished is tried again."""
REPLAY_READ_BYTES: Final = 4 << 20

Holding = tuple[str, int]
"""(node, partition id): where a commit's parts are staged."""
ByHolding = dict[Holding, tuple[StagedPart, ...]]


def _check_owner(decisions: Decisions, commit_id: int, requester: Requester) -> None:
    """NOT_AUTHORIZED unless `requester` may act on `commit_id`'s decision."""
    decision = decisions.get(commit_id)
    if decision is not None and not may_act_for(decision.principal, requester):
        raise RequestError(
            ErrorCode.NOT_AUTHORIZED, not_owner_message(f"write {commit_id:#x}", requester)
        )


class CommitPartsError(RequestError):
    """A commit's parts are not usable as sent (a bug in the committer)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_REQUEST, message)


def _key(part: StagedPart) -> tuple[int, int, int, int]:
    return part.partition_id, part.write_id, part.task, part.attempt


def check_parts(parts: Sequence[StagedPart]) -> ByHolding:
    """The parts grouped by where they are staged (node, partition), in the
    order given; each attempt once."""
    seen: set[tuple[int, int, int, int]] = set()
    by_holding: dict[Holding, list[StagedPart]] = {}
    for part in parts:
        key = _key(part)
        if key in seen:
            raise CommitPartsError(f"the commit names {key} twice")
        if part.batches < 1 or part.records < 1:
            raise CommitPartsError(f"the commit names an empty part {tuple(part)}")
        seen.add(key)
        by_holding.setdefault((part.node, part.partition_id), []).append(part)
    return {holding: tuple(p) for holding, p in by_holding.items()}


def slots(by_holding: ByHolding) -> dict[int, list[tuple[str, tuple[StagedPart, ...]]]]:
    """Per partition, the nodes holding its parts in the order the commit first
    names them: the publish order, and each node's `WriteStamp.slot`."""
    out: dict[int, list[tuple[str, tuple[StagedPart, ...]]]] = {}
    for (node, pid), parts in by_holding.items():
        out.setdefault(pid, []).append((node, parts))
    return out


@dataclass(slots=True)
class _Table:
    """The decisions of one log, as one leadership of it replayed them."""

    leadership: object
    decisions: Decisions


class Coordinator:
    """Decides commits in this shard's decision logs (see the module docstring)."""

    def __init__(
        self,
        logs: DecisionLogs,
        routes: NodeRoutes,
        retention_ms: int,
        describe: Callable[[int], str] = lambda pid: f"partition {pid:#x}",
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.logs = logs
        self._routes = routes
        self.retention_ms = retention_ms
        self._describe = describe
        self._clock = clock
        """Decision timestamps (wall) and retry times (monotonic) are read from it."""
        self._tables: dict[int, _Table] = {}
        self._loading = KeyedLocks()
        self._locks = KeyedLocks()
        self._background: set[asyncio.Task[object]] = set()
        self._retry_after: dict[int, float] = {}
        self.commits = 0
        self.aborts = 0
        self.roll_forwards = 0

    # -- decision logs ------------------------------------------------------------------

    async def start(self) -> None:
        """Open the decision logs; replay the ones this shard leads and roll
        forward their unfinished commits."""
        await self.logs.start()
        await self._load_led()

    async def _load_led(self) -> None:
        for key in self.logs.held():
            try:
                await self._table(key)
            except RequestError:
                continue  # not led here (a follower of the decisions group)

    async def _decisions(self, commit_id: int) -> tuple[PartitionReplica, Decisions]:
        """The log deciding `commit_id` and its decisions; raises NOT_LEADER
        (naming the leader) unless this shard may decide in it now."""
        key = self.logs.key_of(commit_id)
        replica = await self.logs.replica(key)
        return replica, await self._table(key, replica)

    async def _table(self, key: int, replica: PartitionReplica | None = None) -> Decisions:
        if replica is None:
            replica = await self.logs.replica(key)
        replica.check_writable()
        table = self._tables.get(key)
        if table is None or table.leadership is not replica.leadership:
            async with self._loading.hold(key):
                table = self._tables.get(key)
                if table is None or table.leadership is not replica.leadership:
                    table = await self._replay(key, replica)
        return table.decisions

    async def _replay(self, key: int, replica: PartitionReplica) -> _Table:
        """Rebuild log `key`'s decisions (this shard just got to lead it) and
        roll forward what was decided but not finished."""
        leadership = replica.leadership
        decisions = Decisions(self.retention_ms)
        index = replica.lowest_index
        while index < replica.highest_index:
            records = await replica.read_range(index, REPLAY_READ_BYTES)
            if not records:  # only a replicated log's own entries were left
                break
            for record in records:
                decisions.apply(record.value)
            index = records[-1].index + 1
        decisions.forget_old(self._clock.wall_ms())
        table = self._tables[key] = _Table(leadership, decisions)
        if len(decisions):
            logger.info("decision log %d: %d decisions replayed", key, len(decisions))
        for decision in decisions.pending():
            self._retry_after[decision.commit_id] = self._clock.monotonic() + RETRY_INTERVAL_S
            self._spawn(self._roll_forward(decision.commit_id))
        return table

    async def _record(self, commit_id: int, entry: bytes) -> Decision:
        replica, decisions = await self._decisions(commit_id)
        await replica.append_stamped([entry])
        return decisions.apply(entry)

    # -- requests ---------------------------------------------------------------------

    async def state(self, commit_id: int, requester: Requester) -> str:
        decisions = (await self._decisions(commit_id))[1]
        _check_owner(decisions, commit_id, requester)
        return decisions.state_of(commit_id)

    async def commit(
        self, commit_id: int, parts: tuple[StagedPart, ...], requester: Requester
    ) -> tuple[bool, tuple[Published, ...]]:
        """`(first, published)`: see `CommitWriteRequest`. Only the owner of a
        decided id may send it again; the parts must be the requester's own."""
        by_holding = check_parts(parts)
        return await shielded(self._commit(commit_id, parts, by_holding, requester))

    async def _commit(
        self,
        commit_id: int,
        parts: tuple[StagedPart, ...],
        by_holding: ByHolding,
        requester: Requester,
    ) -> tuple[bool, tuple[Published, ...]]:
        owner = requester.principal
        async with self._locks.hold(commit_id):
            _, decisions = await self._decisions(commit_id)
            _check_owner(decisions, commit_id, requester)
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
                        self._check(commit_id, holding, p, owner)
                        for holding, p in by_holding.items()
                    )
                )
                decision = await self._record(
                    commit_id, committed_entry(commit_id, parts, self._clock.wall_ms(), owner)
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
                self._spawn(self._drop(commit_id, check_parts(extra), decision.principal))
            return first, decision.published

    async def _check(
        self, commit_id: int, holding: Holding, parts: tuple[StagedPart, ...], owner: str | None
    ) -> None:
        node, pid = holding
        try:
            await self._routes.to_node(node, CheckStagedRequest(pid, commit_id, parts, owner))
        except NodeUnreachable as exc:
            tasks = ", ".join(str(p.task) for p in parts[:5]) + (", ..." if len(parts) > 5 else "")
            raise RequestError(
                ErrorCode.STAGED_DATA_UNREACHABLE,
                f"write {commit_id:#x}: node {node}, where task(s) {tasks} staged their records "
                f"for {self._describe(pid)}, cannot be reached ({exc}); nothing was decided or "
                "published. The staged data is durable there: commit again once the node is "
                "back (before its staging timeout), or abort",
            ) from None

    async def _finish(self, decision: Decision) -> Decision:
        """Publish every partition's parts, record "done", drop the staged data."""
        commit_id = decision.commit_id
        by_holding = check_parts(decision.parts)
        try:
            published = await asyncio.gather(
                *(
                    self._publish_partition(commit_id, pid, holders)
                    for pid, holders in slots(by_holding).items()
                )
            )
        except Exception as exc:
            self._retry_after[commit_id] = self._clock.monotonic() + RETRY_INTERVAL_S
            if isinstance(exc, RequestError) and exc.code == ErrorCode.COMMIT_PENDING:
                raise
            logger.warning("commit %#x decided, publishing failed (will retry): %s", commit_id, exc)
            raise RequestError(
                ErrorCode.COMMIT_PENDING,
                f"write {commit_id:#x} is committed; publishing it failed for now ({exc}) "
                "and the node retries it",
            ) from None
        self._retry_after.pop(commit_id, None)
        owner = decision.principal
        done = await self._record(
            commit_id, done_entry(commit_id, tuple(published), self._clock.wall_ms(), owner)
        )
        self._spawn(self._drop(commit_id, by_holding, owner))
        return done

    async def _publish_partition(
        self, commit_id: int, pid: int, holders: list[tuple[str, tuple[StagedPart, ...]]]
    ) -> Published:
        """Publish one partition's parts, holder after holder (each its slot)."""
        first: int | None = None
        records = 0
        for slot, (node, parts) in enumerate(holders):
            where = await self._publish(commit_id, pid, node, slot, parts)
            first = where.first_index if first is None else first
            records += where.records
        return Published(pid, first or 0, records)

    async def _publish(
        self, commit_id: int, pid: int, node: str, slot: int, parts: tuple[StagedPart, ...]
    ) -> Published:
        try:
            frame = await self._routes.to_node(
                node, PublishStagedRequest(pid, commit_id, parts, slot)
            )
        except NodeUnreachable as exc:
            raise RequestError(
                ErrorCode.COMMIT_PENDING,
                f"write {commit_id:#x} is committed; node {node}, which holds its staged "
                f"records for {self._describe(pid)}, cannot be reached ({exc}): they are "
                "published once it is back",
            ) from None
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

    async def _drop(self, commit_id: int, by_holding: ByHolding, owner: str | None) -> None:
        """Drop the parts (and their writes' losers) that `owner` staged."""
        for (node, pid), parts in by_holding.items():
            try:
                await self._routes.to_node(node, DropStagedRequest(pid, commit_id, parts, owner))
            except Exception as exc:  # the partition expires it later
                logger.info(
                    "commit %#x: dropping on %s at node %s failed: %s",
                    commit_id,
                    self._describe(pid),
                    node or "(this one)",
                    exc,
                )

    async def abort(
        self, commit_id: int, final: bool, parts: tuple[StagedPart, ...], requester: Requester
    ) -> str:
        """The state after the abort (see `AbortWriteRequest`); only the owner of
        a decided id may abort it, and only the requester's own parts are dropped."""
        by_holding = check_parts(parts) if parts else {}
        return await shielded(self._abort(commit_id, final, by_holding, requester))

    async def _abort(
        self, commit_id: int, final: bool, by_holding: ByHolding, requester: Requester
    ) -> str:
        owner = requester.principal
        async with self._locks.hold(commit_id):
            _, decisions = await self._decisions(commit_id)
            _check_owner(decisions, commit_id, requester)
            state = decisions.state_of(commit_id)
            if state in (WriteState.COMMITTED, WriteState.DONE):
                return state
            if final and state == WriteState.UNKNOWN:
                entry = aborted_entry(commit_id, self._clock.wall_ms(), owner)
                await self._record(commit_id, entry)
                self.aborts += 1
                state = WriteState.ABORTED
            if by_holding:
                self._spawn(self._drop(commit_id, by_holding, owner))
            return state

    # -- upkeep -------------------------------------------------------------------------

    async def _roll_forward(self, commit_id: int) -> None:
        async with self._locks.hold(commit_id):
            try:
                decision = (await self._decisions(commit_id))[1].get(commit_id)
                if decision is None or decision.state != WriteState.COMMITTED:
                    return
                self.roll_forwards += 1
                logger.info("rolling forward commit %#x", commit_id)
                await self._finish(decision)
            except RequestError as exc:
                logger.warning("commit %#x: roll-forward failed for now: %s", commit_id, exc)

    async def maintain(self) -> None:
        """Periodic: take up logs this shard now leads, retry unfinished
        commits, forget old decisions, apply retention (carrying unfinished
        decisions forward first so retention cannot take them)."""
        await self._load_led()
        now = self._clock.monotonic()
        now_ms = self._clock.wall_ms()
        for key in self.logs.held():
            table = self._tables.get(key)
            try:
                replica = await self.logs.replica(key)
                replica.check_writable()
            except RequestError:
                self._tables.pop(key, None)  # followers keep the log; its leader decides
                continue
            if table is None or table.leadership is not replica.leadership:
                continue
            for decision in table.decisions.pending():
                if self._retry_after.get(decision.commit_id, 0.0) <= now:
                    self._retry_after[decision.commit_id] = now + RETRY_INTERVAL_S
                    self._spawn(self._roll_forward(decision.commit_id))
                if now_ms - decision.decided_ms > self.retention_ms // 2:
                    await self._record(
                        decision.commit_id,
                        committed_entry(
                            decision.commit_id, decision.parts, now_ms, decision.principal
                        ),
                    )
            table.decisions.forget_old(now_ms)
        await self.logs.apply_retention(now_ms)

    @property
    def pending(self) -> int:
        return sum(len(t.decisions.pending()) for t in self._tables.values())

    def _spawn(self, coro: Awaitable[object]) -> None:
        task: asyncio.Task[object] = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.wait(list(self._background), timeout=5)
        await self.logs.close()
