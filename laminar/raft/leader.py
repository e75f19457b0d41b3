"""The leader's side of replication: per-follower flow control, appends and
installs, commitment (Figure 8), heartbeats and ReadIndex confirmation.

A mixin of RaftCore (core.py holds roles, elections, the follower side and
the API); it only reads and writes the core state declared below.
"""

from __future__ import annotations

from .budget import ByteBudget
from .config import Membership, RaftConfig
from .errors import EntriesUnavailable, RaftError
from .log import RaftLog
from .messages import (
    APPEND,
    APPEND_RESP,
    HEARTBEAT,
    HEARTBEAT_RESP,
    INSTALL,
    TIMEOUT_NOW,
    Entry,
    Message,
    ReadState,
)
from .progress import PROBE, REPLICATE, Progress, ProgressTracker
from .readindex import ReadIndexQueue


class LeaderReplication:
    """Leader-side replication for RaftCore."""

    id: str
    term: int
    config: RaftConfig
    log: RaftLog
    _tracker: ProgressTracker
    _reads: ReadIndexQueue
    _msgs: list[Message]
    _read_states: list[ReadState]
    _memberships: list[tuple[int, Membership]]
    _bcast: bool
    _transferee: str | None
    leader_commit: int | None
    _departing: dict[str, list[int]]
    learner_budget: ByteBudget | None

    def _tell_departing(self) -> None: ...

    def _step_leader(self, m: Message) -> None:
        progress = self._tracker.progress.get(m.src)
        if progress is None:
            return
        if m.kind == APPEND_RESP:
            progress.recent_active = True
            if m.reject:
                self._append_rejected(m, progress)
            else:
                self._append_acknowledged(m, progress)
        elif m.kind == HEARTBEAT_RESP:
            progress.recent_active = True
            progress.paused = False
            if self._removal_held(m.src, progress):
                self._departing[m.src][1] += 1  # it answered a heartbeat that told it
            if progress.state == PROBE:
                progress.force_send = True
                self._bcast = True
            if m.context:
                self._reads.ack(m.src, m.context)
                self._release_reads()

    def _append_rejected(self, m: Message, progress: Progress) -> None:
        if (
            progress.state == REPLICATE
            and m.index < progress.next - 1
            and m.hint >= progress.match
            and self.log.term(m.hint) == m.log_term
        ):
            # A gap, not a conflict: the follower's log matches ours up to its
            # end, and appends sent before this one may still arrive (the
            # follower keeps early ones). If one was lost, the heartbeat stall
            # check or the rejection of the last append falls back to probing.
            return
        probe = m.hint
        if m.log_term > 0:
            probe = self.log.find_conflict_by_term(m.hint, m.log_term)[0]
        if progress.maybe_decrease_to(m.index, probe):
            if progress.state == REPLICATE:
                progress.become_probe()
            progress.force_send = True
            self._bcast = True

    def _append_acknowledged(self, m: Message, progress: Progress) -> None:
        if not (
            progress.maybe_update(m.index)
            or (progress.match == m.index and progress.state == PROBE)
        ):
            return
        if progress.state == PROBE:
            progress.become_replicate()
        else:
            progress.free_acknowledged(m.index)
        if self._maybe_commit():
            self._commit_advanced()
        self._bcast = True
        if m.src == self._transferee and progress.match == self.log.last_index():
            self._msgs.append(Message(TIMEOUT_NOW, self.id, m.src, self.term))

    def _maybe_commit(self) -> bool:
        index = self._tracker.committed_index()
        # Figure 8: only an entry of the current term is committed by counting
        # replicas; earlier ones are committed with it (Log Matching).
        if index > self.log.committed and self.log.term(index) == self.term:
            self.log.commit_to(index)
            return True
        return False

    def _commit_advanced(self) -> None:
        self._bcast = True
        if self._committed_in_term():
            self.leader_commit = self.log.committed
        if self._reads.waiting and self._committed_in_term():
            for request_id in self._reads.waiting:
                self._reads.add(request_id, self.log.committed)
            self._reads.waiting = []

    def _committed_in_term(self) -> bool:
        return self.log.term(self.log.committed) == self.term

    def _release_reads(self) -> None:
        self._read_states.extend(self._reads.confirmed(self._tracker.voters, self.id))

    def _broadcast_heartbeat(self) -> None:
        commit = self.log.committed
        context = self._reads.round
        config = self.config
        stall_limit = max(2 * config.heartbeat_ticks, config.election_ticks // 2)
        for node, progress in self._tracker.progress.items():
            if node != self.id:
                if progress.state == REPLICATE and progress.stalled(
                    config.heartbeat_ticks, stall_limit
                ):
                    progress.become_probe()  # an append was lost: resend from the match
                    progress.force_send = True
                    self._bcast = True
                sent = min(progress.match, commit)
                removal = self._removal_held(node, progress)
                self._msgs.append(
                    Message(
                        HEARTBEAT,
                        self.id,
                        node,
                        self.term,
                        commit,
                        commit=sent,
                        context=context,
                        hint=removal,
                        removed=removal > 0,
                    )
                )
                progress.sent_commit = sent
        if self._departing:
            self._tell_departing()

    def _flush_appends(self) -> None:
        """Send each follower what it lacks (batched), within its flow control."""
        last = self.log.last_index()
        commit = self.log.committed
        for node, progress in self._tracker.progress.items():
            if node == self.id or self._removal_held(node, progress):
                continue
            force = progress.force_send
            progress.force_send = False
            sent = False
            while (progress.next <= last or force) and self._send_append(node, progress, force):
                sent = True
                force = False
            if not sent and progress.can_bump_commit(commit):
                self._send_append(node, progress, True)

    def _removal_held(self, node: str, progress: Progress) -> int:
        """The index of `node`'s removal if it is departing and holds it, else 0.
        Such a node is only told (heartbeats): nothing after its removal is
        its business, and its shell deletes its replica once told, so an
        append could only make it open a fresh one (a move's learner, as far
        as its shell can tell) that nobody feeds."""
        told = self._departing.get(node)
        return told[0] if told is not None and progress.match >= told[0] else 0

    def _send_append(self, node: str, progress: Progress, force: bool) -> bool:
        log = self.log
        full = progress.state == REPLICATE and len(progress.inflight) >= self.config.max_inflight
        if not force and (full or (progress.state == PROBE and progress.paused)):
            return False
        budget = self.learner_budget if progress.learner else None
        if budget is not None and budget.spent() and not force:
            return False  # a move's copy waits for the next tick's budget
        prev = progress.next - 1
        prev_term = log.term(prev)
        if prev_term is None:
            return self._send_install(node, progress)
        last = log.last_index()
        entries: tuple[Entry, ...] = ()
        if progress.next <= last and not full and not (budget is not None and budget.spent()):
            size = self.config.max_append_bytes
            if budget is not None:
                size = min(size, budget.available)  # at least one entry still goes
            try:
                entries = tuple(log.entries(progress.next, last + 1, size))
            except EntriesUnavailable:
                return False
        if not entries and not force:
            return False
        if budget is not None:
            budget.take(sum(len(e.data) for e in entries))
        commit = log.committed
        self._msgs.append(
            Message(APPEND, self.id, node, self.term, prev, prev_term, entries, commit)
        )
        progress.sent_entries(len(entries), prev + len(entries))
        progress.sent_commit = commit
        return True

    def _send_install(self, node: str, progress: Progress) -> bool:
        """Send the retained log from its first index, after its anchor.

        The anchor carries the membership in effect at it. If this core does
        not know that far back (it restarted with `applied` past its first
        index), it anchors at the oldest membership it knows instead: entries
        up to there are committed, so the follower only holds less history."""
        log = self.log
        anchor = max(log.first_index() - 1, self._memberships[0][0])
        anchor_term = log.term(anchor)
        if anchor_term is None or anchor > log.applied:
            raise RaftError(
                f"storage must know the term before its first index and only compact "
                f"applied entries (anchor {anchor}, applied {log.applied})"
            )
        membership = self._membership_at(anchor)
        first, last = anchor + 1, log.last_index()
        entries: tuple[Entry, ...] = ()
        if first <= last:
            try:
                entries = tuple(log.entries(first, last + 1, self.config.max_append_bytes))
            except EntriesUnavailable:
                return False
        if progress.learner and self.learner_budget is not None:
            self.learner_budget.take(sum(len(e.data) for e in entries))
        self._msgs.append(
            Message(
                INSTALL,
                self.id,
                node,
                self.term,
                anchor,
                anchor_term,
                entries,
                log.committed,
                data=membership.encode(),
            )
        )
        progress.become_probe()
        progress.next = first + len(entries)
        progress.paused = True
        progress.sent_commit = log.committed
        return True

    def _membership_at(self, index: int) -> Membership:
        return [m for at, m in self._memberships if at <= index][-1]
