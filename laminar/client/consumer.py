"""Group consumers: members of a consumer group that share its topics'
partitions and commit where they are (`Client.consumer`, `AsyncClient.consumer`).

`ConsumerCore` is what both shells share, without I/O: the group member
(`laminar.groups.member.MemberCore`: heartbeats, the lease, the poll
deadline), where each assigned partition is read next, what `poll` handed
out, and every operation as a plan of the client core (`laminar.client.core`)
that either client performs. The shells add the waiting: `Consumer` runs the
heartbeats on a thread of its own, `AsyncConsumer` on a task, so processing
time never stops them (a member stays in the group while it works, up to the
poll deadline, `poll_timeout_s`).

Delivery is at least once: `commit()` commits, per partition, the index after
the last record `poll` returned (or the positions given), and a member that
takes over a partition starts at the group's committed position (with none,
at the start or the end of the partition: `start`). Records processed after a
member's last commit are delivered again to the next owner. With
`auto_commit`, each `poll` first commits what the previous one returned.

A partition is delivered only while the member holds a valid lease on it
(its last heartbeat answered within the session timeout, measured from when
it was sent): the coordinator gives it to another member only after that.
A revoked partition is committed (with `auto_commit`), then released. A
partition lost and given back (the lease lapsed, or the member was fenced
and joined again) starts afresh at the committed position: what was read
before is neither delivered nor committed under the new grant (another
member may have processed and committed it meanwhile; `MemberCore.grant`).

Prefetch (`prefetch=2`, the default; 0 turns it off): a poll that returns
records starts, before it returns, fetches of the partitions the next polls
visit first (in their turn order) that have none in flight and were not at
their end, from where each is read next, until `prefetch` batches are ahead;
the app processes and commits while they travel, so a batch costs about
max(fetch, commit) instead of their sum. The rules, as `PartitionReader`'s
(`laminar.client.reader`): a batch fetched ahead is handed out only by a
later poll, only while the partition is still delivered (assigned, leased,
not paused) and still read from exactly the index the fetch asked from;
otherwise it is dropped unread: at a revocation or loss, at `pause`, at a
move of the position (a reset past retention, a new assignment). So what
`commit()` commits is still "after what poll returned", never after what was
only fetched ahead. A fetch ahead that failed is made again by the poll that
wants it, which then meets (and raises) what a fetch made without prefetch
would: leader changes and retries are the call's own, as for any fetch.
Bounded: at most `prefetch` batches (each `max_records`, `max_bytes`) ahead,
one per partition at most; `prefetch_stats` counts them.

Unwaited commits (`commit(wait=False)`, Kafka's commitAsync): the commit is
sent and the app goes on; its answer is taken by the next commit (which
raises first if it was refused), by a revocation before the partitions are
released, or by leaving. One is in flight at most, so commits land in order:
an unwaited commit made while the last one is still unanswered, or less
than `commit_interval_s` (default 50 ms) after it was sent, is not sent but
kept (`commits_kept` counts them), merged with any kept before it (a later
position of a partition replaces an earlier one: positions only move
forward), and leaves with the next commit or poll made once that answer is
in and the interval is over (a refusal a poll takes is raised by the next
commit), or with a waited commit, a revocation's settling or the leave. So
an app that commits every batch never waits for a commit, and the
coordinator sees at most one commit per round trip and per interval instead
of one per batch (each a durable append: an fdatasync and the node's CPU
for a lone write); what a member that dies held kept is read again by the
next owner (at least once, as for a commit lost in flight): at most the
interval's worth of its processing, the price of the default (50 ms: with
5 ms, 2 and 4 members on two cores read at 0.80-0.82x of the plain reader,
spending the node's CPU on ten times the commits; see RESULTS.md).
`commit_interval_s=0` sends each as soon as the one before is answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, Protocol, TypedDict

from laminar.client import calls
from laminar.client.core import (
    RECOVER,
    REFRESH,
    ClientCore,
    Drop,
    Join,
    Plan,
    Ready,
    Send,
    Sleep,
    Start,
)
from laminar.client.errors import LaminarError, OffsetOutOfRangeError
from laminar.client.groups import coordinator_plan, group_call, group_plan
from laminar.client.results import expect, fetched_records
from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.groups.errors import GroupError
from laminar.groups.frames import (
    CommitAnswerFrame,
    CommitFrame,
    GroupMessage,
    HeartbeatAnswerFrame,
    HeartbeatFrame,
    PositionsAnswerFrame,
    PositionsFrame,
    PositionsQuery,
)
from laminar.groups.member import ASSIGNED, REVOKED, MemberCore
from laminar.groups.messages import CommitAnswer, CommitRequest, TopicPartition
from laminar.tasks import settle
from laminar.wire import ErrorCode
from laminar.wire.messages import DEFAULT_FETCH_MAX_BYTES
from laminar.wire.records import Headers

logger = logging.getLogger("laminar.client")

STARTS: Final = ("earliest", "latest")
HEARTBEAT_WAIT_MAX_S: Final = 1.0
"""The heartbeat loop looks at the member at least this often."""
HEARTBEAT_RETRY_S: Final = 0.1
STALE_RETRY_S: Final = 0.02
"""A commit refused as STALE_EPOCH is sent again this soon (at the new epoch)."""
LONG_POLL_MS: Final = 200
"""A poll with nothing to read waits on one partition at a time this long."""
COMMIT_INTERVAL_S: Final = 0.05
"""The least time between two unwaited commits sent (`commit_interval_s`)."""
ASSIGNMENT_WAIT_S: Final = 0.02
"""A poll before the first assignment looks again this often."""
REFUSALS: Final = frozenset(
    {
        ErrorCode.NOT_AUTHORIZED,
        ErrorCode.AUTHENTICATION_FAILED,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.LIMIT_REACHED,
    }
)
"""Heartbeat answers that sending it again cannot change: the member stops
and `poll` raises the error (another principal's static member, a missing
ACL, a group over its limits), instead of retrying without end."""

Partitions = Callable[[frozenset[TopicPartition]], None]


class ConsumedRecord(NamedTuple):
    """A record a group consumer delivered, with the partition it came from."""

    topic: str
    partition: int
    index: int  # type: ignore[assignment]
    timestamp_ms: int
    value: bytes | None  # None: a null value (a Kafka tombstone)
    key: bytes | None
    headers: Headers | None


class _Ahead(NamedTuple):
    """A fetch started by a poll for a later one."""

    start: int
    """The index it reads from: taken only while the partition is read from there."""
    handle: Any
    """The shell's handle of the call (`Start`)."""


@dataclass(slots=True)
class PrefetchStats:
    """What the prefetch did since the consumer was made (counts of batches)."""

    started: int = 0
    used: int = 0
    """Handed out by a poll."""
    dropped: int = 0
    """Abandoned unread: revoked, lost, paused, moved, or the consumer closed."""
    failed: int = 0
    """Failed: fetched again by the poll that wanted them."""
    ahead: int = 0
    """In flight or waiting now (at most one per delivered partition)."""
    ahead_max: int = 0
    """The most ever ahead at once."""


class CommitFailedError(LaminarError):
    """Some positions were not committed; `refused` says why, per partition
    (FENCED: the member lost the partition, e.g. after a pause past its
    session; its records are another member's now)."""

    def __init__(self, refused: Mapping[TopicPartition, GroupError]) -> None:
        shown = ", ".join(f"{t}/{p}: {code.name}" for (t, p), code in sorted(refused.items()))
        super().__init__(f"positions not committed: {shown}")
        self.refused = dict(refused)


class ConsumerOptions(TypedDict, total=False):
    """The options of `Client.consumer` and `AsyncClient.consumer` (their
    meanings and defaults: `ConsumerCore`)."""

    start: str
    auto_commit: bool
    instance_id: str | None
    session_timeout_s: float
    poll_timeout_s: float
    assignor: str | None
    max_records: int
    max_bytes: int
    on_assign: Partitions | None
    on_revoke: Partitions | None
    prefetch: int
    commit_interval_s: float


class ConsumerCore:
    """See the module docstring. Shared by the app's thread and the heartbeat
    thread of the sync consumer: the member core is touched under a lock.

    `start`: where a partition without a committed position is read from
    ("earliest" or "latest"); `auto_commit`: each poll first commits what the
    last one returned; `instance_id`: a static member, which gets its
    partitions back after a restart within its session; `session_timeout_s`:
    how long a silent member keeps its partitions; `poll_timeout_s`: how long
    processing may take between polls before the member leaves; `on_assign`,
    `on_revoke`: called from `poll` with the (topic, partition) pairs that
    came and went; `prefetch`: how many batches may be fetched ahead while
    the app works (see the module docstring; 0: none); `commit_interval_s`:
    the least time between two unwaited commits sent (the module docstring)."""

    def __init__(
        self,
        client: ClientCore,
        group: str,
        topics: Iterable[str],
        *,
        start: str = "earliest",
        auto_commit: bool = False,
        instance_id: str | None = None,
        session_timeout_s: float = 10.0,
        poll_timeout_s: float = 300.0,
        assignor: str | None = None,
        max_records: int = 500,
        max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        on_assign: Partitions | None = None,
        on_revoke: Partitions | None = None,
        prefetch: int = 2,
        commit_interval_s: float = COMMIT_INTERVAL_S,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if start not in STARTS:
            raise ValueError(f"start is 'earliest' or 'latest', not {start!r}")
        if prefetch < 0:
            raise ValueError(f"prefetch is a count of batches (0: none), not {prefetch!r}")
        self._client = client
        self.group = group
        self._clock = clock
        self.member = MemberCore(
            clock,
            group,
            topics,
            instance_id=instance_id,
            session_timeout_s=session_timeout_s,
            poll_timeout_s=poll_timeout_s,
            assignor=assignor,
        )
        self._start = start
        self.auto_commit = auto_commit
        self._max_records = max_records
        self._max_bytes = max_bytes
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._lock = threading.Lock()
        self._pid: int | None = None
        """The positions partition that holds the group (its leader coordinates)."""
        self._next: dict[TopicPartition, int] = {}
        """Where each assigned partition is read next."""
        self._grants: dict[TopicPartition, int] = {}
        """The member's grant each partition in `_next` was started under:
        what it reads and commits counts only under that grant."""
        self._delivered: dict[TopicPartition, int] = {}
        """The index after the last record `poll` returned, per partition."""
        self._turn = 0
        self._prefetch = prefetch
        self._ahead: dict[TopicPartition, _Ahead] = {}
        """The fetch started ahead for a partition (one at most)."""
        self._dropping: list[Any] = []
        """Handles set aside by `pause` (app thread, no plan): dropped by the next plan."""
        self._at_end: set[TopicPartition] = set()
        """Partitions whose last fetch found nothing: not fetched ahead."""
        self.prefetch_stats = PrefetchStats()
        self._unwaited: tuple[CommitRequest, Any] | None = None
        """The commit sent by `commit(wait=False)` and not yet answered: its
        request and the shell's handle."""
        self._kept: dict[TopicPartition, int] = {}
        """Positions of unwaited commits made while `_unwaited` was in flight,
        merged: sent by the next commit."""
        self.commits_kept = 0
        """Unwaited commits kept behind the one in flight instead of sent."""
        self._commit_interval_s = commit_interval_s
        self._unwaited_sent_at = -commit_interval_s
        """When the last unwaited commit was sent (the clock's monotonic seconds)."""
        self._refusal: CommitFailedError | None = None
        """A refusal of an unwaited commit that a poll took the answer of:
        the app's next commit raises it, as it would have taken it itself."""
        self.wake: Callable[[], None] = lambda: None
        """Set by the shell: wakes its heartbeat loop (something is due sooner)."""

    # -- the coordinator -------------------------------------------------------

    def _coordinator_plan(self) -> Plan[int]:
        if self._pid is None:
            self._pid = yield from coordinator_plan(self._client, self.group)
        return self._pid

    def _group_plan(
        self, message: Callable[[int], GroupMessage], answer: type[GroupMessage]
    ) -> Plan[Any]:
        pid = yield from self._coordinator_plan()
        return (yield from group_plan(self._client, pid, message, answer))

    def _group_call(
        self, pid: int, message: Callable[[int], GroupMessage], answer: type[GroupMessage]
    ) -> calls.Call[Any]:
        return group_call(pid, message, answer)

    # -- heartbeats --------------------------------------------------------------

    def heartbeat_plan(self) -> Plan[float]:
        """One heartbeat if one is due (one attempt: the member core retries
        it); when to come back, in the clock's monotonic seconds."""
        with self._lock:
            request = self.member.next_request()
            timeout_s = self.member.request_timeout_s
        if request is not None:
            try:
                pid = yield from self._coordinator_plan()
                view = self._client._view or (yield REFRESH)
                address = view.route_pid(pid).address
                frame = yield Send(address, HeartbeatFrame(pid, request), False, timeout_s)
                answer = expect(frame, HeartbeatAnswerFrame).body
            except LaminarError as exc:
                self._client._note_leader(exc)
                refused = exc.code in REFUSALS
                with self._lock:
                    if refused:
                        self.member.on_heartbeat_refused(request, exc)
                    else:
                        self.member.on_heartbeat_failed(request)
                if not refused:
                    yield RECOVER
            else:
                with self._lock:
                    self.member.on_heartbeat_answer(request, answer)
        with self._lock:
            return self.member.next_wakeup()

    def leave_plan(self) -> Plan[None]:
        """Commit (with `auto_commit`) and leave the group; best effort (an
        unwaited commit that failed is logged: `commit()` before leaving says)."""
        refusal, self._refusal = self._refusal, None
        if refusal is not None:
            logger.warning("group %s: an unwaited commit failed: %s", self.group, refusal)
        try:
            yield from self._settle_plan()
        except LaminarError as exc:
            logger.warning("group %s: the last unwaited commit failed: %s", self.group, exc)
        if self.auto_commit:
            with contextlib.suppress(LaminarError):
                yield from self.commit_plan(None)
        yield from self._drop_plan(list(self._ahead))
        with self._lock:
            leave = self.member.close()
        if leave is None or self._pid is None:
            return
        with contextlib.suppress(LaminarError):  # else its session expires
            yield from self._group_plan(
                lambda pid: HeartbeatFrame(pid, leave), HeartbeatAnswerFrame
            )

    # -- polling -------------------------------------------------------------------

    def poll_plan(self, timeout_s: float) -> Plan[list[ConsumedRecord]]:
        """Records of the partitions held now, waiting up to `timeout_s` for
        some (and for the first assignment)."""
        deadline = self._clock.monotonic() + timeout_s
        if self.auto_commit and self._delivered:
            yield from self.commit_plan(None)
        with self._lock:
            self.member.poll_started()
        self.wake()
        while True:
            with self._lock:
                refusal = self.member.take_refusal()
            if refusal is not None:
                raise refusal
            yield from self._changes_plan()
            yield from self._due_plan()
            yield from self._drop_plan(())
            with self._lock:
                held = sorted(tp for tp in self.member.assignment if tp in self._next)
            self._turn += 1
            first = self._turn % len(held) if held else 0
            records: list[ConsumedRecord] = []
            for tp in held[first:] + held[:first]:
                records += yield from self._take_plan(tp, self._max_records - len(records))
                if len(records) >= self._max_records:
                    break
            left_s = deadline - self._clock.monotonic()
            if records:
                yield from self._prefetch_plan()
                return records
            if left_s <= 0:
                return records
            if not held:  # nothing assigned yet: the heartbeats bring it
                yield Sleep(min(left_s, ASSIGNMENT_WAIT_S))
                continue
            wait_ms = max(1, min(int(left_s * 1000), LONG_POLL_MS))
            waited = yield from self._fetch_plan(
                held[self._turn % len(held)], self._max_records, wait_ms
            )
            if waited:
                yield from self._prefetch_plan()
                return waited

    def _changes_plan(self) -> Plan[None]:
        """Act on what the heartbeats changed: start new partitions, commit and
        release revoked ones, drop lost ones."""
        with self._lock:
            changes = self.member.take_changes()
        for change in changes:
            if change.kind == ASSIGNED:
                yield from self._assigned_plan(change.partitions, change.grant)
            else:
                yield from self._revoked_plan(change.partitions, committed=change.kind == REVOKED)

    def _take_plan(self, tp: TopicPartition, max_records: int) -> Plan[list[ConsumedRecord]]:
        """The next records of `tp`: the batch fetched ahead if it starts where
        `tp` is read next, else a fetch made now."""
        ahead = self._ahead.get(tp)
        if ahead is not None and ahead.start != self._next[tp]:
            yield from self._drop_plan((tp,))  # the position moved since
        elif ahead is not None:
            try:
                got: list[ConsumedRecord] | None = yield Join(ahead.handle)
            except LaminarError:
                got = None  # what a fetch made earlier met: this poll's own decides
                self.prefetch_stats.failed += 1
            with self._lock:
                if self._ahead.get(tp) is ahead:
                    del self._ahead[tp]
                    self.prefetch_stats.ahead -= 1
            if got is not None:
                self.prefetch_stats.used += 1
                return self._deliver(tp, ahead.start, got[:max_records])
        return (yield from self._fetch_plan(tp, max_records, 0))

    def _fetch_plan(
        self, tp: TopicPartition, max_records: int, wait_ms: int
    ) -> Plan[list[ConsumedRecord]]:
        index = self._next[tp]
        try:
            got = yield from self._client._call_plan(
                self._fetch_call(tp, index, max_records, wait_ms)
            )
        except OffsetOutOfRangeError:
            self._next[tp] = yield from self._start_plan(tp)  # retention passed it
            yield from self._drop_plan((tp,))
            return []
        return self._deliver(tp, index, got)

    def _fetch_call(
        self, tp: TopicPartition, index: int, max_records: int, wait_ms: int
    ) -> calls.Call[list[ConsumedRecord]]:
        parse = functools.partial(fetched_records, prefix=tp, kind=ConsumedRecord)
        return calls.fetch_parsed(tp[0], tp[1], index, self._max_bytes, max_records, wait_ms, parse)

    def _deliver(
        self, tp: TopicPartition, index: int, got: list[ConsumedRecord]
    ) -> list[ConsumedRecord]:
        """`got`, read from `index`, as what poll returns, if `tp` is still
        delivered and read from there (else nothing: lost, paused or moved)."""
        with self._lock:
            if (
                tp not in self.member.assignment
                or self.member.grant(tp) != self._grants.get(tp)
                or self._next.get(tp) != index
            ):
                return []
        if not got:
            self._at_end.add(tp)
            return []
        self._at_end.discard(tp)
        self._next[tp] = self._delivered[tp] = got[-1].index + 1
        return got  # made as ConsumedRecords by the fetch's parse, in C loops

    def _prefetch_plan(self) -> Plan[None]:
        """Start fetches of the partitions the next polls visit first that
        have none ahead and were not at their end, from where each is read
        next, until `prefetch` batches are ahead."""
        with self._lock:
            held = sorted(tp for tp in self.member.assignment if tp in self._next)
        room = self._prefetch - len(self._ahead)
        if room <= 0 or not held:
            return
        first = (self._turn + 1) % len(held)  # where the next poll starts (see poll_plan)
        turn_order = held[first:] + held[:first]
        wanted = [tp for tp in turn_order if tp not in self._ahead and tp not in self._at_end]
        stats = self.prefetch_stats
        for tp in wanted[:room]:
            index = self._next[tp]
            handle = yield Start(self._fetch_call(tp, index, self._max_records, 0))
            with self._lock:
                self._ahead[tp] = _Ahead(index, handle)
            stats.started += 1
            stats.ahead += 1
        stats.ahead_max = max(stats.ahead_max, stats.ahead)

    def _drop_plan(self, parts: Iterable[TopicPartition]) -> Plan[None]:
        """Abandon the fetches ahead of `parts`, and those `pause` set aside."""
        with self._lock:
            handles, self._dropping = self._dropping, []
            for tp in parts:
                ahead = self._ahead.pop(tp, None)
                if ahead is not None:
                    handles.append(ahead.handle)
                    self.prefetch_stats.ahead -= 1
        for handle in handles:
            self.prefetch_stats.dropped += 1
            yield Drop(handle)

    def _assigned_plan(self, parts: frozenset[TopicPartition], grant: int) -> Plan[None]:
        """Start each new partition at the group's committed position (else `start`)."""
        query = PositionsQuery(self.group, parts)
        committed = yield from self._group_plan(
            lambda pid: PositionsFrame(pid, query), PositionsAnswerFrame
        )
        for tp in sorted(parts):
            position = committed.positions.get(tp)
            index = position.index if position is not None else (yield from self._start_plan(tp))
            self._next[tp] = index
            self._grants[tp] = grant
            self._at_end.discard(tp)
        if self._on_assign is not None:
            self._on_assign(parts)

    def _start_plan(self, tp: TopicPartition) -> Plan[int]:
        offsets = yield from self._client._call_plan(calls.list_offsets(tp[0], tp[1]))
        return offsets.lowest_index if self._start == "earliest" else offsets.committed_index

    def _revoked_plan(self, parts: frozenset[TopicPartition], *, committed: bool) -> Plan[None]:
        """A revoked partition is committed (with `auto_commit`) and released;
        a lost one is only dropped (it is another member's already). An
        unwaited commit is answered first: released, a partition's next owner
        must find what this member committed."""
        try:
            yield from self._settle_plan()
        except LaminarError as exc:
            logger.warning("group %s: an unwaited commit failed: %s", self.group, exc)
        if committed and self.auto_commit:
            done = {tp: self._delivered[tp] for tp in parts if tp in self._delivered}
            if done:
                # Not committed: the next owner reads them again (at least once).
                with contextlib.suppress(LaminarError):
                    yield from self.commit_plan(done)
        if self._on_revoke is not None:
            self._on_revoke(parts)
        yield from self._drop_plan(parts)
        for tp in parts:
            self._next.pop(tp, None)
            self._grants.pop(tp, None)
            self._delivered.pop(tp, None)
            self._at_end.discard(tp)
        if committed:
            with self._lock:
                self.member.release(parts)
            self.wake()

    # -- commits ---------------------------------------------------------------------

    def commit_plan(
        self, positions: Mapping[TopicPartition, int] | None, *, wait: bool = True
    ) -> Plan[None]:
        """Commit `positions` (default: after what `poll` returned); raises
        `CommitFailedError` naming the partitions that were refused. A commit
        made at the epoch the member is leaving (STALE_EPOCH: the heartbeat
        answer moving it on is on its way) is sent again at the new one.

        `wait=False` sends the commit and returns (see the module docstring:
        one in flight at most, later ones kept behind it, merged). A waited
        commit first takes the answer of the one in flight (raising its
        refusal) and carries what was kept along with its own positions."""
        refusal, self._refusal = self._refusal, None
        if refusal is not None:
            raise refusal
        wanted = dict(self._delivered if positions is None else positions)
        if not wait:
            yield from self._unwaited_plan(wanted)
            return
        yield from self._join_unwaited_plan()
        wanted, self._kept = {**self._kept, **wanted}, {}
        yield from self._waited_plan(wanted)

    def _waited_plan(self, wanted: dict[TopicPartition, int]) -> Plan[None]:
        refused: dict[TopicPartition, GroupError] = {}
        deadline = self._clock.monotonic() + self.member.request_timeout_s
        while wanted:
            with self._lock:
                request = self.member.commit_request(wanted, self._grants)
            held = request.positions if request is not None else {}
            refused.update(dict.fromkeys(wanted.keys() - held.keys(), GroupError.FENCED))
            if request is None:
                break
            answer = yield from self._group_plan(
                functools.partial(_commit_frame, request), CommitAnswerFrame
            )
            with self._lock:
                self.member.on_commit_answer(request, answer)
            if answer.error is not GroupError.NONE:
                refused.update(dict.fromkeys(held, answer.error))
                break
            stale = {tp for tp, code in answer.results.items() if code is GroupError.STALE_EPOCH}
            refused.update(
                (tp, code)
                for tp, code in answer.results.items()
                if code not in (GroupError.NONE, GroupError.STALE_EPOCH)
            )
            if stale and self._clock.monotonic() >= deadline:
                refused.update(dict.fromkeys(stale, GroupError.STALE_EPOCH))
                break
            wanted = {tp: wanted[tp] for tp in stale}
            if wanted:
                self.wake()
                yield Sleep(STALE_RETRY_S)
        if refused:
            raise CommitFailedError(refused)

    def _unwaited_plan(self, wanted: dict[TopicPartition, int]) -> Plan[None]:
        """An unwaited commit: kept while the one in flight is unanswered or
        was sent less than `commit_interval_s` ago, else sent (with what was
        kept) once its answer is taken."""
        if not wanted and not self._kept:
            return
        early = self._clock.monotonic() - self._unwaited_sent_at < self._commit_interval_s
        if early or (self._unwaited is not None and not (yield Ready(self._unwaited[1]))):
            self._kept.update(wanted)
            self.commits_kept += bool(wanted)
            return
        yield from self._join_unwaited_plan()
        wanted, self._kept = {**self._kept, **wanted}, {}
        pid = yield from self._coordinator_plan()
        with self._lock:
            request = self.member.commit_request(wanted, self._grants)
        held = request.positions if request is not None else {}
        if request is not None:
            call = self._group_call(
                pid, functools.partial(_commit_frame, request), CommitAnswerFrame
            )
            self._unwaited = (request, (yield Start(call)))
            self._unwaited_sent_at = self._clock.monotonic()
        if wanted.keys() - held.keys():
            raise CommitFailedError(dict.fromkeys(wanted.keys() - held.keys(), GroupError.FENCED))

    def _due_plan(self) -> Plan[None]:
        """From `poll`, once its changes are acted on: send what unwaited
        commits kept when it is due, as the app's next unwaited commit would
        (an app that commits no more still gets its positions committed); a
        refusal is kept for the app's next commit to raise."""
        if not self._kept or self._refusal is not None:
            return
        try:
            yield from self._unwaited_plan({})
        except CommitFailedError as exc:
            self._refusal = exc

    def _settle_plan(self) -> Plan[None]:
        """Before a revocation's release or a leave: take the unwaited
        commit's answer, then commit what was kept behind it, waiting; raises
        `CommitFailedError` if either was refused (STALE_EPOCH aside)."""
        yield from self._join_unwaited_plan()
        if self._kept:
            kept, self._kept = self._kept, {}
            yield from self._waited_plan(kept)

    def _join_unwaited_plan(self) -> Plan[None]:
        """Take the answer of the unwaited commit in flight, if any; raises
        `CommitFailedError` if it was refused (STALE_EPOCH aside: what it
        carried is at least once, read again by the next owner if no later
        commit covers it)."""
        unwaited, self._unwaited = self._unwaited, None
        if unwaited is None:
            return
        request, handle = unwaited
        answer: CommitAnswer = yield Join(handle)
        with self._lock:
            self.member.on_commit_answer(request, answer)
        if answer.error is not GroupError.NONE:
            raise CommitFailedError(dict.fromkeys(request.positions, answer.error))
        refused = {
            tp: code
            for tp, code in answer.results.items()
            if code not in (GroupError.NONE, GroupError.STALE_EPOCH)
        }
        if refused:
            raise CommitFailedError(refused)

    # -- what the app asks --------------------------------------------------------------

    def assignment(self) -> frozenset[TopicPartition]:
        with self._lock:
            return self.member.assignment

    def pause(self, parts: Iterable[TopicPartition]) -> None:
        """Stop delivering `parts`; their fetches ahead are dropped by the next plan."""
        parts = frozenset(parts)
        with self._lock:
            self.member.pause(parts)
            for tp in parts & self._ahead.keys():
                self._dropping.append(self._ahead.pop(tp).handle)
                self.prefetch_stats.ahead -= 1

    def resume(self, parts: Iterable[TopicPartition]) -> None:
        with self._lock:
            self.member.resume(parts)

    def seek(self, tp: TopicPartition, index: int) -> None:
        """Read `tp` from `index` from the next poll on (a batch fetched ahead
        from elsewhere is dropped when that poll comes to it)."""
        with self._lock:
            if tp not in self._next:
                raise ValueError(f"{tp[0]}/{tp[1]} is not assigned to this member")
            self._next[tp] = index
            self._at_end.discard(tp)

    def extend_poll(self, seconds: float) -> None:
        with self._lock:
            self.member.extend_poll(seconds)


def _commit_frame(request: CommitRequest, pid: int) -> GroupMessage:
    return CommitFrame(pid, request)


class _Face:
    """What both consumers answer at once, without the node."""

    _core: ConsumerCore

    def assignment(self) -> frozenset[TopicPartition]:
        """The (topic, partition) pairs this member holds and delivers now."""
        return self._core.assignment()

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop delivering these for now (the member keeps them)."""
        self._core.pause(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._core.resume(partitions)

    def seek(self, partition: TopicPartition, index: int) -> None:
        """Read `partition` from `index` on, from the next poll (the committed
        position stays until the next commit)."""
        self._core.seek(partition, index)

    def extend_poll(self, seconds: float) -> None:
        """Processing takes longer: keep the membership `seconds` more."""
        self._core.extend_poll(seconds)

    @property
    def prefetch_stats(self) -> PrefetchStats:
        """What the prefetch did so far (`PrefetchStats`)."""
        return self._core.prefetch_stats


class _Runner(Protocol):
    def _run(self, plan: Plan[Any]) -> Any: ...


class Consumer(_Face):
    """A group member on the blocking `Client` (`Client.consumer`); its
    heartbeats run on a thread of their own. Use it as a context manager, or
    `close()` it: it leaves the group, so its partitions move at once."""

    def __init__(self, client: _Runner, core: ConsumerCore) -> None:
        self._client = client
        self._core = core
        self._nudge = threading.Event()
        self._stopping = threading.Event()
        self._closed = False
        core.wake = self._nudge.set
        self._thread = threading.Thread(
            target=self._heartbeats, name=f"laminar-heartbeats-{core.group[:40]}", daemon=True
        )
        self._thread.start()

    def _heartbeats(self) -> None:
        clock = self._core._clock
        while not self._stopping.is_set():
            try:
                wake = self._client._run(self._core.heartbeat_plan())
            except Exception:
                logger.exception("group %s: heartbeat failed", self._core.group)
                wake = clock.monotonic() + HEARTBEAT_RETRY_S
            self._nudge.wait(max(0.0, min(wake - clock.monotonic(), HEARTBEAT_WAIT_MAX_S)))
            self._nudge.clear()

    def poll(self, timeout_s: float = 1.0) -> list[ConsumedRecord]:
        """Records of the partitions this member holds, waiting up to
        `timeout_s` for some; [] if none came."""
        records: list[ConsumedRecord] = self._client._run(self._core.poll_plan(timeout_s))
        return records

    def commit(
        self, positions: Mapping[TopicPartition, int] | None = None, *, wait: bool = True
    ) -> None:
        """Commit the index after the last record `poll` returned per partition
        (or `positions`: (topic, partition) -> the next index to read).
        `wait=False`: send it and return; the next commit raises first if it
        was refused (`ConsumerCore.commit_plan`)."""
        self._client._run(self._core.commit_plan(positions, wait=wait))

    def close(self) -> None:
        """Leave the group (committing first with `auto_commit`)."""
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        self._nudge.set()
        # Leave before joining the heartbeat thread: its heartbeat may be held
        # by the coordinator (a long poll) for up to a second.
        self._client._run(self._core.leave_plan())
        self._thread.join()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _AsyncRunner(Protocol):
    async def _run(self, plan: Plan[Any]) -> Any: ...


class AsyncConsumer(_Face):
    """`Consumer` on `AsyncClient`, with coroutines; its heartbeats run on a
    task. `async with client.consumer(...) as consumer:`."""

    def __init__(self, client: _AsyncRunner, core: ConsumerCore) -> None:
        self._client = client
        self._core = core
        self._nudge = asyncio.Event()
        self._closed = False
        core.wake = self._nudge.set
        self._task = asyncio.get_running_loop().create_task(self._heartbeats())

    async def _heartbeats(self) -> None:
        clock = self._core._clock
        while True:
            try:
                wake = await self._client._run(self._core.heartbeat_plan())
            except Exception:
                logger.exception("group %s: heartbeat failed", self._core.group)
                wake = clock.monotonic() + HEARTBEAT_RETRY_S
            delay = max(0.0, min(wake - clock.monotonic(), HEARTBEAT_WAIT_MAX_S))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nudge.wait(), delay)
            self._nudge.clear()

    async def poll(self, timeout_s: float = 1.0) -> list[ConsumedRecord]:
        records: list[ConsumedRecord] = await self._client._run(self._core.poll_plan(timeout_s))
        return records

    async def commit(
        self, positions: Mapping[TopicPartition, int] | None = None, *, wait: bool = True
    ) -> None:
        await self._client._run(self._core.commit_plan(positions, wait=wait))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._task.cancel()
        await settle(self._task)
        await self._client._run(self._core.leave_plan())

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
