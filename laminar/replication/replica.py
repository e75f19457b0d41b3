"""The replica seam: what request handlers see of a partition, replicated or not.

Handlers, long-polls and idempotent producers talk to a `PartitionReplica`,
never to a log: `LocalReplica` is a single node's partition (its log, as
before), `RaftReplica` is one member of a partition's Raft group, whose log
*is* the segmented log. Both offer the same surface:

- `lowest_index` / `highest_index`: the readable range. For a Raft replica
  `highest_index` is the commit index (exclusive): readers, from the leader or
  from any follower, never see a record that a leader change could take back.
- `append_stamped(blobs)`: (first index, timestamp) once the batch is durable
  (local) or committed on a majority, each replica durable first (Raft).
  A follower refuses with NOT_LEADER naming the leader (nothing appended).
- `read_range` / `read_batch`: committed records only. A Raft log also holds
  entries the protocol writes itself (a leader's no-op, membership changes);
  reads skip them, so a partition's indexes can have gaps, never misplaced
  records. `next_readable(index)` says where a reader that stopped before
  `index` goes on (past such entries): fetch answers carry it as
  `next_index`, the one way forward for every reader.
- `confirm_reads()`: before a leader read (the default), this node proves
  it still leads (ReadIndex: a majority answered a heartbeat round started
  after the call) and waits until it applied the commit index it had then,
  so the read holds every record acknowledged before the request arrived,
  even if a newer leader was elected elsewhere: a deposed leader cannot
  confirm, and answers NOT_LEADER. Reads that allow any replica skip it and
  see what this replica has committed, possibly behind.
- `wait_for_append(index, timeout_s)`: long-polls wait for the commit index.
- `settle()`: wait until every entry already in the local log is either
  committed or gone, so a scan of committed records can tell whether an
  earlier append whose answer was lost is in the partition (the write
  protocol's resumed publish does that before appending again).
- Refusals before anything is proposed: NOT_LEADER (naming the leader when
  known), NOT_READY (a new leader's no-op is not committed yet) and
  NOT_ENOUGH_REPLICAS (this node, leader or not, has not heard from a
  majority of the group's nodes within an election timeout).
- `leadership`: a token of one leadership; state built from the log while
  leading (idempotent-producer tables, commit decisions, group coordinators)
  is kept under it and valid while it stays the same. A Raft replica makes a
  new one each time it becomes leader, so a new leader rebuilds that state
  from the committed log, after its own no-op committed (everything before it
  is then committed too): writes are refused until then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Protocol

from laminar.log import LogBatch, LogRecord, SegmentedLog
from laminar.raft import LEADER, NotLeader, ProposalDropped
from laminar.replication.group import ProposalLost, RaftGroup, ReadDropped
from laminar.replication.raft_storage import CONTROL_TERM_BIT
from laminar.wire import ErrorCode
from laminar.wire.errors import RequestError

APPEND_TIMEOUT_S: Final = 10.0
"""How long a replicated append waits for its commit before its outcome is unknown."""
READ_CONFIRM_TIMEOUT_S: Final = 5.0
"""How long a leader read waits for a majority to confirm the leadership."""
RECORDS_MAX: Final = 1 << 62


class PartitionReplica(Protocol):
    """A partition as handlers see it (see the module docstring)."""

    directory: str
    log: SegmentedLog
    """The local log (for its settings; reads and writes go through the replica)."""

    @property
    def lowest_index(self) -> int: ...

    @property
    def highest_index(self) -> int: ...

    @property
    def log_end(self) -> int:
        """The end of the local log, committed or not (for status)."""
        ...

    @property
    def members(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(voters, learners) of the partition's group; empty for a log alone."""
        ...

    @property
    def leader(self) -> str | None: ...

    @property
    def leadership(self) -> object: ...

    def check_writable(self) -> None: ...

    async def append_stamped(self, blobs: Sequence[bytes]) -> tuple[int, int]: ...

    def place(self, blobs: Sequence[bytes]) -> Awaitable[tuple[int, int]] | None:
        """Put the batch in the log's order now (raising here, with nothing
        appended, if refused): an awaitable of what `append_stamped` returns;
        None when placing would have to wait (then `append_stamped`). Batches
        placed one after another keep that order in the log, and one that
        fails after it was placed takes every later one with it."""
        ...

    async def read_range(
        self, start: int, max_bytes: int, max_records: int = ...
    ) -> list[LogRecord]: ...

    async def settle(self) -> None: ...

    async def read_batch(self, start: int, max_bytes: int, max_records: int) -> LogBatch: ...

    def next_readable(self, index: int) -> int:
        """Where a reader goes on from `index`: past the protocol's own
        committed entries there (a Raft replica), else `index` itself."""
        ...

    def records_between(self, start: int, end: int) -> int:
        """How many records (not the protocol's own entries) lie in
        [start, end), both clamped to the retained, committed range."""
        ...

    async def confirm_reads(self) -> None: ...

    async def wait_for_append(self, index: int, timeout_s: float) -> None: ...

    async def index_for_timestamp(self, timestamp_ms: int) -> int: ...


class LocalReplica:
    """A partition held by this node alone: its log, nothing in between."""

    __slots__ = ("directory", "log")

    def __init__(self, log: SegmentedLog) -> None:
        self.log = log
        self.directory = log.directory

    @property
    def lowest_index(self) -> int:
        return self.log.lowest_index

    @property
    def highest_index(self) -> int:
        return self.log.highest_index

    @property
    def log_end(self) -> int:
        return self.log.highest_index

    @property
    def members(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return (), ()

    @property
    def leader(self) -> str | None:
        return None

    @property
    def leadership(self) -> object:
        return self.log

    def check_writable(self) -> None:
        return None

    async def append_stamped(self, blobs: Sequence[bytes]) -> tuple[int, int]:
        return await self.log.append_stamped(blobs)

    def place(self, blobs: Sequence[bytes]) -> Awaitable[tuple[int, int]] | None:
        """Place now when that needs no wait (`SegmentedLog.place_nowait`);
        the awaitable is durability. None: `append_stamped` must do it."""
        placed = self.log.place_nowait(blobs)
        if placed is None:
            return None
        first, timestamp_ms, done = placed
        return _when_done(done, (first, timestamp_ms))

    async def read_range(
        self, start: int, max_bytes: int, max_records: int = RECORDS_MAX
    ) -> list[LogRecord]:
        return await self.log.read_range(start, max_bytes, max_records)

    async def settle(self) -> None:
        return None

    async def read_batch(self, start: int, max_bytes: int, max_records: int) -> LogBatch:
        return await self.log.read_batch(start, max_bytes, max_records)

    def read_batch_nowait(self, start: int, max_bytes: int, max_records: int) -> LogBatch | None:
        """`read_batch` if it needs no wait (`SegmentedLog.read_batch_nowait`),
        else None; the request fast path serves local partitions with it."""
        return self.log.read_batch_nowait(start, max_bytes, max_records)

    def next_readable(self, index: int) -> int:
        return index

    def records_between(self, start: int, end: int) -> int:
        log = self.log
        return max(min(end, log.highest_index) - max(start, log.lowest_index), 0)

    async def confirm_reads(self) -> None:
        return None  # nobody else can lead a partition this node holds alone

    async def wait_for_append(self, index: int, timeout_s: float) -> None:
        await self.log.wait_for_append(index, timeout_s)

    async def index_for_timestamp(self, timestamp_ms: int) -> int:
        return await self.log.index_for_timestamp(timestamp_ms)


class _LeaderTerm:
    """A token: one leadership of one replica (idempotent-producer tables key on it)."""

    __slots__ = ("__weakref__", "term")

    def __init__(self, term: int) -> None:
        self.term = term


class RaftReplica:
    """This node's member of a partition's Raft group (see the module docstring)."""

    def __init__(
        self,
        group: RaftGroup,
        reachable: Callable[[str], bool] = lambda node: True,
        append_timeout_s: float = APPEND_TIMEOUT_S,
    ):
        self._reachable = reachable
        self._append_timeout_s = append_timeout_s
        """Whether this node heard from a node lately (the peer links' keepalives)."""
        self.rebind(group)

    def rebind(self, group: RaftGroup) -> None:
        """Serve from `group` from now on: the group reopened after its loop
        failed, and whoever holds this replica (the metadata log) keeps it."""
        self.group = group
        self.log = group.storage.log
        self.directory = self.log.directory
        self._leader_term = _LeaderTerm(-1)

    @property
    def lowest_index(self) -> int:
        return self.log.lowest_index

    @property
    def highest_index(self) -> int:
        return self.group.committed_end

    @property
    def log_end(self) -> int:
        return self.log.highest_index

    @property
    def members(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        membership = self.group.core.membership
        return membership.voters, membership.learners

    @property
    def leader(self) -> str | None:
        return self.group.leader

    @property
    def leadership(self) -> object:
        term = self.group.core.term
        if self._leader_term.term != term:
            self._leader_term = _LeaderTerm(term)
        return self._leader_term

    def check_writable(self) -> None:
        """Raise unless this replica leads and its own no-op is committed."""
        group = self.group
        if group.writable:
            self._check_majority_reachable()
            return
        if group.core.role == LEADER:
            raise RequestError(
                ErrorCode.NOT_READY,
                "this node just became the partition's leader and is committing its "
                "first entry; nothing was applied; retry shortly",
            )
        leader = group.leader
        if leader is None or not self._reachable(leader):
            self._check_majority_reachable()  # this node's side cannot elect anyone
        raise RequestError(
            ErrorCode.NOT_LEADER,
            f"node {group.core.id} is not the partition's leader"
            + (f"; node {leader} is" if leader else "; no leader is known yet (an election runs)"),
            leader=leader,
        )

    def _check_majority_reachable(self) -> None:
        """A node cut off from most of the partition's replicas can neither
        commit (as leader, it could only time out; check-quorum makes it step
        down within an election timeout) nor see a leader elected on its side."""
        core = self.group.core
        voters = core.membership.voters
        heard = sum(1 for node in voters if node == core.id or self._reachable(node))
        if heard <= len(voters) // 2:
            raise RequestError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"node {core.id} has heard from {heard} of the partition's {len(voters)} "
                "replicas lately, not a majority; nothing was appended",
            )

    async def append_stamped(self, blobs: Sequence[bytes]) -> tuple[int, int]:
        return await self.place(blobs)

    def place(self, blobs: Sequence[bytes]) -> Awaitable[tuple[int, int]]:
        """Propose now (raising here if refused); the awaitable is the commit."""
        self.check_writable()
        try:
            first, timestamp_ms, done = self.group.propose(blobs)
        except NotLeader as exc:
            raise RequestError(ErrorCode.NOT_LEADER, str(exc), leader=exc.leader_hint) from None
        except ProposalDropped as exc:  # a leadership hand-over, or too much uncommitted
            transferee = self.group.core.status().transferee
            if transferee is not None:
                raise RequestError(
                    ErrorCode.NOT_LEADER,
                    f"leadership is moving to node {transferee}; nothing was appended",
                    leader=transferee,
                ) from None
            raise RequestError(
                ErrorCode.NOT_READY, f"{exc}; nothing was appended; retry shortly"
            ) from None
        return self._committed(first, timestamp_ms, done)

    async def _committed(
        self, first: int, timestamp_ms: int, done: asyncio.Future[int]
    ) -> tuple[int, int]:
        try:
            await asyncio.wait_for(asyncio.shield(done), self._append_timeout_s)
        except ProposalLost:
            # Gone from this node's log, but another replica that had it may
            # still be elected and commit it (Raft's Figure 8, with 5 replicas):
            # not a refusal.
            raise RequestError(
                ErrorCode.OUTCOME_UNKNOWN,
                "leadership changed before the batch was committed here; another replica "
                "may still commit it: read to check",
            ) from None
        except TimeoutError:
            raise RequestError(
                ErrorCode.OUTCOME_UNKNOWN,
                f"the batch was not committed within {self._append_timeout_s:g} s (a majority of "
                "replicas may be unreachable); it may still be appended: read to check",
            ) from None
        return first, timestamp_ms

    async def read_range(
        self, start: int, max_bytes: int, max_records: int = RECORDS_MAX
    ) -> list[LogRecord]:
        batch = await self.read_batch(start, max_bytes, max_records)
        return batch.records()

    async def settle(self) -> None:
        """Leader only (raises NOT_LEADER otherwise): wait until the whole local
        log is committed; NOT_READY if a majority does not confirm it in time."""
        self.check_writable()
        end = self.log.highest_index
        await self.group.wait_committed(end, self._append_timeout_s)
        if self.group.committed_end < end:
            raise RequestError(
                ErrorCode.NOT_READY,
                "earlier appends to the partition are not settled yet (no majority); retry",
            )

    async def read_batch(self, start: int, max_bytes: int, max_records: int) -> LogBatch:
        """Committed records from `start` on, without the protocol's own entries:
        leading ones are skipped, and the batch stops before the next one."""
        end = self.group.committed_end
        start = self.next_readable(start)
        if start >= end:
            return LogBatch(start, (), (), (), b"")
        log = self.log
        batch = await log.read_batch(start, max_bytes, min(max_records, end - start))
        if max(batch.terms) & CONTROL_TERM_BIT:
            keep = next(k for k, term in enumerate(batch.terms) if term & CONTROL_TERM_BIT)
            batch = batch.head(keep)
        return batch

    async def confirm_reads(self) -> None:
        """See the module docstring; NOT_LEADER on a follower or a deposed
        leader, NOT_ENOUGH_REPLICAS when no majority answers in time."""
        group = self.group
        if not group.is_leader:
            self.check_writable()  # raises the refusal a write would get: the same cases
        self._check_majority_reachable()
        try:
            index = await asyncio.wait_for(group.read_index(), READ_CONFIRM_TIMEOUT_S)
        except (NotLeader, ReadDropped):
            leader = group.leader
            raise RequestError(
                ErrorCode.NOT_LEADER,
                f"node {group.core.id} stopped leading the partition before it could confirm "
                "the read" + (f"; node {leader} leads" if leader else ""),
                leader=leader,
            ) from None
        except TimeoutError:
            raise RequestError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"no majority confirmed node {group.core.id}'s leadership within "
                f"{READ_CONFIRM_TIMEOUT_S:.0f} s; nothing was read",
            ) from None
        await group.wait_committed(index, READ_CONFIRM_TIMEOUT_S)

    def next_readable(self, index: int) -> int:
        end = self.group.committed_end
        term_of = self.log.term_of
        while index < end and term_of(index) & CONTROL_TERM_BIT:
            index += 1
        return index

    def records_between(self, start: int, end: int) -> int:
        # Raft's entries carry CONTROL_TERM_BIT, the top bit of the stored term.
        lo, hi = max(start, self.lowest_index), min(end, self.group.committed_end)
        if lo >= hi:
            return 0
        return hi - lo - self.log.count_top_bit_terms(lo, hi)

    async def wait_for_append(self, index: int, timeout_s: float) -> None:
        await self.group.wait_committed(index + 1, timeout_s)

    async def index_for_timestamp(self, timestamp_ms: int) -> int:
        return min(await self.log.index_for_timestamp(timestamp_ms), self.group.committed_end)


async def _when_done(done: asyncio.Future[None], value: tuple[int, int]) -> tuple[int, int]:
    await done
    return value
