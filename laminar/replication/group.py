"""One Raft group on a shard: the core, its durable storage, and the loop that drives it.

The core (`laminar.raft.RaftCore`) decides; this shell does what each `Ready`
asks, in the order its docstring states: send what a leader sends (appends,
heartbeats), persist the entries (a durable log append: fsync), persist the
hard state when the term or vote changed, then send the rest (answers and
votes: promises about this node's disk), then apply what is committed, then
`advance`. A leader's appends thus go out while its own fsync runs, so its
write and the followers' overlap (Raft thesis 10.2.1, as etcd does); the core
counts the leader's own entries toward a commit only at `advance`, after its
fsync, and nothing of a later Ready (a commit, an answer to a client) exists
before that. One task per
group runs that loop (`run`); anything that gives the core work (a tick, a
message, a proposal) only wakes it, so proposals and messages that arrive
while a Ready is being persisted are batched into the next one (group commit
across requests falls out of this).

What "applied" means for a partition: the commit index is the readable end of
the log (`committed_end`: records below it are committed), waiters for that
end are woken, and proposals learn their fate. A proposal is the run of
entries `[first, last]` proposed in term `t`; once the commit index passes
`last` the entry at `last` is either ours (its term is `t`: committed) or
another leader's (ours was overwritten: definitely not appended, since an
entry never moves to another index). A proposal whose entries are truncated
away by a new leader fails at once too (`ProposalLost`), but that one is not
definite: a replica still holding them may be elected later and commit them,
so the replica seam answers OUTCOME_UNKNOWN for both. Two more events settle
proposals the same way, at once: this node stops leading (what is not yet
known committed is left to the next leader), and an install replaces the log
(the entries up to its anchor are gone from here, so their terms can no longer
be read: a proposal is only ever judged by the log it was proposed to).

The hard state's commit index is written only together with a term or vote
change: the paper keeps commitIndex volatile, and a restart that starts from
an older commit index just learns the newer one from the leader. (Writing it
on every Ready would add a file replace and two fsyncs to every produce.)

Timestamps: a normal entry's data is `u64 timestamp_ms | record blob`, the
leader's clock at proposal (never below the last entry's), so every replica
stores the same timestamp and timestamp seeks agree across replicas.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.raft import (
    ANCHOR,
    LEADER,
    Anomaly,
    Entry,
    Message,
    NotLeader,
    RaftCore,
    Ready,
)
from laminar.replication.raft_storage import SegmentedLogStorage

logger = logging.getLogger("laminar.replication")

TIMESTAMP: Final = struct.Struct(">Q")
Send = Callable[[int, Sequence[Message]], None]
"""(partition id, messages) -> queued for the network; never blocks, may drop."""
Apply = Callable[[Sequence[Entry]], None]
"""Committed entries, in order, each once (after the log end moved past them)."""
Report = Callable[[int, Anomaly], None]
"""(partition id, a message the core refused or found suspicious) -> logged and counted."""


class ReadDropped(Exception):
    """A `read_index` request this node can no longer confirm: it stopped
    leading before a majority confirmed the round (the read may go elsewhere)."""


class ProposalLost(Exception):
    """The proposal's entries were replaced in this node's log by another
    leader's. Not a proof that they will never commit: a replica that holds
    them may still be elected (with 5 replicas, Raft's Figure 8)."""


def stamp(timestamp_ms: int, blob: bytes) -> bytes:
    """A normal entry's data: the leader's timestamp, then the record blob."""
    return TIMESTAMP.pack(timestamp_ms) + blob


@dataclass(slots=True)
class _Proposal:
    first: int
    last: int
    term: int
    done: asyncio.Future[int]


class RaftGroup:
    """One partition's Raft member on this shard (see the module docstring)."""

    def __init__(
        self,
        pid: int,
        core: RaftCore,
        storage: SegmentedLogStorage,
        send: Send,
        apply: Apply | None = None,
        report: Report | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.pid = pid
        self._clock = clock
        """Stamps proposals (wall time)."""
        self.core = core
        self.storage = storage
        self._send = send
        self._apply = apply
        self._report = report
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._proposals: list[_Proposal] = []
        self._commit_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._reads: dict[int, asyncio.Future[int]] = {}
        """`read_index` requests waiting for their heartbeat round, by request id."""
        self._committed_end = storage.log.lowest_index
        """Log indexes below this are committed (raft commit index == this)."""
        self._last_timestamp_ms = 0
        self._term_start = 0
        """Leader: the raft index of this term's no-op; writes wait until it commits."""
        self._role = core.role
        self._term = core.term
        self._busy = False
        self.closed = False
        self._wake.set()

    # -- what the rest of the shard reads ---------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.core.role == LEADER

    @property
    def leader(self) -> str | None:
        return self.core.leader

    @property
    def committed_end(self) -> int:
        """The readable end of the partition: log indexes below it are committed."""
        return self._committed_end

    @property
    def writable(self) -> bool:
        """Leader whose own no-op is committed: every earlier entry is committed
        too, so state rebuilt from the committed log is complete."""
        return self.is_leader and 0 < self._term_start <= self._committed_end

    # -- inputs -----------------------------------------------------------------

    def tick(self) -> None:
        self.core.tick()
        self.kick()

    def step(self, message: Message) -> None:
        self.core.step(message)
        self.kick()

    def propose(self, blobs: Sequence[bytes]) -> tuple[int, int, asyncio.Future[int]]:
        """Propose records: (first log index, timestamp_ms, a future resolved with
        the first log index once committed). Raises NotLeader (nothing proposed);
        the future fails with ProposalLost (gone from this node's log; see
        `ProposalLost`) or is left for the caller's timeout."""
        core = self.core
        if core.role != LEADER:
            raise NotLeader(core.leader)
        timestamp_ms = max(self._clock.wall_ms(), self._last_timestamp_ms)
        first = core.propose_many([stamp(timestamp_ms, blob) for blob in blobs])
        self._last_timestamp_ms = timestamp_ms
        done: asyncio.Future[int] = self._loop.create_future()
        self._proposals.append(_Proposal(first, first + len(blobs) - 1, core.term, done))
        self._busy = True
        self.kick()
        return first - 1, timestamp_ms, done

    def read_index(self) -> asyncio.Future[int]:
        """Start a linearizable read (ReadIndex, Raft thesis 6.4): a future of
        the log end a read must wait for (`wait_committed`), resolved once a
        majority confirmed this node still led after the call; it fails with
        `ReadDropped` if leadership is lost first. Raises NotLeader at once on
        a follower. Reads made together share one heartbeat round."""
        request_id = self.core.read_index()
        read: asyncio.Future[int] = self._loop.create_future()
        self._reads[request_id] = read
        self.kick()
        return read

    async def wait_committed(self, end: int, timeout_s: float) -> None:
        """Wait until log indexes below `end` are committed, or `timeout_s` pass."""
        if self._committed_end >= end or timeout_s <= 0:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._commit_waiters.append((end, waiter))
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout_s)
        except TimeoutError:
            pass
        finally:
            if not waiter.done():
                waiter.cancel()
                self._commit_waiters = [(e, w) for e, w in self._commit_waiters if w is not waiter]

    def hand_over(self) -> bool:
        """Start moving this group's leadership to its most up-to-date follower,
        preferring ones heard from lately (a node drains); False if this node
        does not lead or has no follower to take over."""
        core = self.core
        if core.role != LEADER:
            return False
        followers = [
            (p.recent_active, p.match, node)
            for node, p in core.status().progress.items()
            if node != core.id and not p.learner
        ]
        if not followers:
            return False
        core.transfer_leadership(max(followers)[2])
        self.kick()
        return True

    def take_busy(self) -> bool:
        """True if a proposal arrived since the last call (the host's quiescence clock)."""
        busy, self._busy = self._busy, False
        return busy

    def kick(self) -> None:
        if not self._wake.is_set():
            self._wake.set()

    # -- the Ready loop ---------------------------------------------------------

    async def run(self) -> None:
        """Drive the core until `close()`; a storage failure stops the group
        (the partition goes offline) rather than acknowledge what is not durable."""
        core = self.core
        try:
            while not self.closed:
                await self._wake.wait()
                self._wake.clear()
                while core.has_ready() and not self.closed:
                    await self._handle(core.ready())
                self._note_role()  # a step-down may need no Ready (check-quorum)
                if self.storage.wanted is not None:
                    await self.storage.load()
                    core.retry_storage()
                    self.kick()
        except Exception:
            logger.exception("raft group of partition %d stopped", self.pid)
            self._fail_all("the partition's Raft group stopped")
            raise

    async def _handle(self, rd: Ready) -> None:
        storage = self.storage
        if rd.messages:
            ahead = rd.messages_before_persist()
            if ahead:
                self._send(self.pid, ahead)
        if rd.entries:
            first = rd.entries[0]
            if first.kind == ANCHOR:
                self._lose_pending("the log was replaced by an install", through=first.index)
            elif first.index <= storage.last_index():
                self._lose_proposals_from(first.index)
            await storage.append(rd.entries)
            if first.kind == ANCHOR and first.index > self._committed_end:
                # The anchor is committed, and nothing up to it is delivered.
                self._committed_end = first.index
                self._wake_commit_waiters()
        if rd.hard_state is not None and rd.must_sync:
            await storage.set_hard_state(rd.hard_state)
        if rd.messages:
            after = rd.messages_after_persist()
            if after:
                self._send(self.pid, after)
        if rd.committed:
            await storage.note_applied(rd.committed)  # a membership change: durable first
            self._committed(rd.committed)
        self._answer_reads(rd)
        if self._report is not None:
            for anomaly in rd.anomalies:
                self._report(self.pid, anomaly)
        self.core.advance(rd)
        self._note_role()

    def _note_role(self) -> None:
        core = self.core
        if core.role == self._role and core.term == self._term:
            return
        if self._role == LEADER and core.role != LEADER:
            # Nothing will be proposed here in that term again; what is not yet
            # known committed may still be, by the next leader: unknown.
            why = f"this node stopped leading in term {self._term}"
            self._lose_pending(why, after=core.log.committed)
        self._role, self._term = core.role, core.term
        logger.debug("partition %d: %s in term %d", self.pid, core.role, core.term)
        if core.role == LEADER:
            logger.info("partition %d: this node leads, term %d", self.pid, core.term)
            self._term_start = self.storage.last_index()  # the no-op it appended
            self._last_timestamp_ms = max(
                self._last_timestamp_ms, self.storage.log.last_timestamp_ms
            )
        else:
            self._term_start = 0

    def _committed(self, entries: Sequence[Entry]) -> None:
        self._committed_end = max(self._committed_end, entries[-1].index)
        if self._apply is not None:
            self._apply(entries)
        still: list[_Proposal] = []
        for proposal in self._proposals:
            if proposal.last > self._committed_end:
                still.append(proposal)
            elif not proposal.done.done():
                # The entry now at `last` is committed: ours if it has our term.
                # Only a pending proposal is looked up, and only in the log it
                # was proposed to: an install settles those it skipped first.
                entry = _find(entries, proposal.last)
                term = entry.term if entry is not None else self.core.log.term(proposal.last)
                if term == proposal.term:
                    proposal.done.set_result(proposal.first - 1)
                else:
                    proposal.done.set_exception(ProposalLost(f"entry {proposal.last} is another's"))
        self._proposals = still
        self._wake_commit_waiters()

    def _wake_commit_waiters(self) -> None:
        waiters, self._commit_waiters = self._commit_waiters, []
        for end, waiter in waiters:
            if self._committed_end >= end:
                if not waiter.done():
                    waiter.set_result(None)
            else:
                self._commit_waiters.append((end, waiter))

    def _answer_reads(self, rd: Ready) -> None:
        for state in rd.read_states:
            read = self._reads.pop(state.request_id, None)
            if read is not None and not read.done():
                read.set_result(state.index)
        for request_id in rd.dropped_reads:
            read = self._reads.pop(request_id, None)
            if read is not None and not read.done():
                read.set_exception(ReadDropped("leadership was lost before the read was confirmed"))

    def _lose_pending(self, why: str, *, after: int = 0, through: int | None = None) -> None:
        """Settle as lost (outcome unknown) every pending proposal that ends
        after `after` (those up to the commit index are delivered as committed
        entries and settled by their term) and, if given, at or before `through`."""
        still = []
        for proposal in self._proposals:
            if after < proposal.last and (through is None or proposal.last <= through):
                if not proposal.done.done():
                    proposal.done.set_exception(ProposalLost(why))
            else:
                still.append(proposal)
        self._proposals = still

    def _lose_proposals_from(self, index: int) -> None:
        still = []
        for proposal in self._proposals:
            if proposal.last >= index and proposal.term != self.core.term:
                if not proposal.done.done():
                    proposal.done.set_exception(ProposalLost(f"truncated from {index}"))
            else:
                still.append(proposal)
        self._proposals = still

    def _fail_all(self, why: str) -> None:
        """Settle everything pending: the proposals as lost (another replica may
        still commit them), the commit waiters as woken."""
        for proposal in self._proposals:
            if not proposal.done.done():
                proposal.done.set_exception(ProposalLost(why))
        self._proposals = []
        for _, waiter in self._commit_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._commit_waiters = []
        reads, self._reads = self._reads, {}
        for read in reads.values():
            if not read.done():
                read.set_exception(ReadDropped(why))

    async def close(self) -> None:
        """Stop driving the core (whoever opened the storage closes it)."""
        self.closed = True
        self.kick()
        self._fail_all("the partition's Raft group closed")


def _find(entries: Sequence[Entry], index: int) -> Entry | None:
    offset = index - entries[0].index
    if 0 <= offset < len(entries):
        return entries[offset]
    return None
