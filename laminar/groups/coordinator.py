"""The group coordinator core: membership, assignment, fencing and positions
of the groups one positions-log partition holds. No I/O.

Rules, and why:

- Persist before answer. A call that changes durable state changes it here
  at once (later calls see it) and returns, in its `Step`, the records to
  append; every answer carries `wait_for`, and the shell sends it only once
  the positions log has committed that record. Reads wait too: an answer
  never shows a state that could still be lost. If an append fails the shell
  throws this core away and builds another with `replay(committed records)`.
- State is the fold of the records. Every durable change goes through
  `_emit`, which applies the record with the same `_apply` replay uses, so
  nothing durable lives outside the records. Session deadlines are volatile
  and start afresh at load (as Kafka's do): later than before, never earlier.
- Release before reassign. A partition is held by at most one member
  (`MemberValue.held`, indexed in `_owners`; `_apply` refuses a record that
  would break it). A member first gives up what is outside its target (told
  at an unchanged epoch); it counts as released when a heartbeat that has seen
  the latest answer (`revision`) no longer lists it, or when the member leaves
  or its session expires. Only then may another member be given it. Members
  keep what stays theirs: no barrier, nobody stops.
- Owned members. A member records the principal that joined it; the shell
  refuses (before calling in) a heartbeat or commit that names a member,
  or a static member's instance, another principal owns (`owners_named`).
- Fencing. A commit is applied only from a known member at its current epoch
  for a partition it holds, never below the committed position, never past
  the partition's end. Only an admin reset (no members) or delete goes back.
- Bounded. Every input is checked against `Limits`; past one, `LIMIT`. The log
  is compacted by checkpoints: when the records written since the last one
  exceed twice the live ones (plus a floor), the live state is restated and,
  once the shell reports it committed, `truncate_before` lets retention drop
  what precedes it.

Classic (Kafka JoinGroup/SyncGroup) groups come later as a second group type
beside this one: see the package docstring.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from laminar.clock import Clock
from laminar.groups.assignors import ASSIGNORS, DEFAULT_ASSIGNOR, Subscriber
from laminar.groups.errors import GroupError, GroupStateError
from laminar.groups.messages import (
    JOIN,
    LEAVE,
    LEAVE_STATIC,
    AdminAnswer,
    CommitAnswer,
    CommitRequest,
    DescribeAnswer,
    GroupView,
    HeartbeatAnswer,
    HeartbeatRequest,
    ListAnswer,
    MemberView,
    Position,
    PositionsAnswer,
    TopicPartition,
)
from laminar.groups.records import (
    NAME_BYTES_MAX,
    GroupRecord,
    GroupValue,
    MemberRecord,
    MemberValue,
    PositionRecord,
    Record,
)

A = TypeVar("A")
_NO_PARTITIONS: Final[frozenset[TopicPartition]] = frozenset()


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on every input (names are also bounded by the record codec)."""

    name_bytes_max: int = NAME_BYTES_MAX
    """Group ids, instance ids and topic names."""
    groups_max: int = 100_000
    members_per_group_max: int = 1_000
    topics_per_subscription_max: int = 100
    topics_per_group_max: int = 1_000
    partitions_per_request_max: int = 10_000
    """Positions in a commit, reset or positions read; partitions in `owned`."""
    session_timeout_s_min: float = 1.0
    session_timeout_s_max: float = 300.0


@dataclass(frozen=True, slots=True)
class Step(Generic[A]):
    """What a call produced: its answer and the records to append, in order.

    Duties of the shell: append `records` as one batch that commits whole or
    not at all (one Raft entry; a part of a step, say a member removed but
    not the new targets, is a state the core cannot go on from), in order of
    the calls (their sequence numbers are `first_seq`, `first_seq + 1`, ...);
    send the answer only once the record `answer.wait_for` is committed; and
    report commits with `committed(seq)`. From `records[checkpoint_at]` on
    (when set) the records are a checkpoint: the whole live state restated,
    so once they are committed every record before them may be dropped (a
    prefix of a checkpoint restates part of the state: harmless alone).
    """

    answer: A
    records: tuple[Record, ...]
    first_seq: int
    checkpoint_at: int | None = None


class GroupCoordinator:
    """The groups of one positions-log partition; see the module docstring."""

    def __init__(
        self,
        clock: Clock,
        rng: random.Random,
        *,
        limits: Limits = Limits(),
        heartbeat_interval_s: float = 1.0,
        checkpoint_floor: int = 1_000,
    ) -> None:
        self._clock = clock
        self._rng = rng
        self.limits = limits
        self.heartbeat_interval_s = heartbeat_interval_s
        self._checkpoint_floor = checkpoint_floor
        self._groups: dict[str, GroupValue] = {}
        self._members: dict[str, dict[str, MemberValue]] = {}
        self._positions: dict[str, dict[TopicPartition, Position]] = {}
        self._owners: dict[str, dict[TopicPartition, str]] = {}
        """Derived from the members: who holds each partition."""
        self._deadlines: dict[tuple[str, str], float] = {}
        """Volatile: when each member's session ends (monotonic seconds)."""
        self._versions: dict[str, int] = {}
        """Volatile: `group_version` per group."""
        self._paused: dict[tuple[str, str], frozenset[TopicPartition]] = {}
        """Volatile, for `describe` only: what each member's last heartbeat said it paused."""
        self._counts: dict[str, int] = {}
        """Input from the cluster's metadata: partitions per topic."""
        self._seq = 0
        """Sequence number of the last record emitted or replayed."""
        self._out: list[Record] = []
        self._live = 0
        self._written = 0
        """Records in the log since its start or the last checkpoint's first record."""
        self._checkpoint: tuple[int, int] | None = None
        self.truncate_before: int | None = None
        """Set once a checkpoint is committed: the log before it may be dropped."""

    @classmethod
    def replay(
        cls,
        records: Iterable[Record],
        clock: Clock,
        rng: random.Random,
        *,
        limits: Limits = Limits(),
        heartbeat_interval_s: float = 1.0,
        checkpoint_floor: int = 1_000,
    ) -> GroupCoordinator:
        """A core holding the fold of `records` (the committed log, in order,
        numbered 1, 2, ...); every member's session starts now.

        Before it serves, the shell calls `set_partitions` for every topic: a
        count that changed while the log could not say so (its new epoch was
        lost with the old core) starts the new epoch then.
        """
        core = cls(
            clock,
            rng,
            limits=limits,
            heartbeat_interval_s=heartbeat_interval_s,
            checkpoint_floor=checkpoint_floor,
        )
        for record in records:
            core._apply(record)
            core._seq += 1
            core._written += 1
        now = clock.monotonic()
        for group, members in core._members.items():
            for member_id, m in members.items():
                core._deadlines[group, member_id] = now + m.session_timeout_ms / 1000
        return core

    # -- members ----------------------------------------------------------

    def heartbeat(
        self,
        request: HeartbeatRequest,
        *,
        received_at: float | None = None,
        principal: str | None = None,
    ) -> Step[HeartbeatAnswer]:
        """Join (epoch 0), leave (-1, -2) or stay: the answer says what to hold.

        `received_at` (monotonic seconds): when a held heartbeat (`hold_s`)
        arrived; its session runs from then, not from the answer again.
        `principal`: who sent it; a new member is theirs (the shell refuses
        another principal's heartbeats first, `owners_named`)."""
        error = self._check_heartbeat(request)
        if error is not GroupError.NONE:
            return self._finish(HeartbeatAnswer(error, 0))
        if request.member_epoch == JOIN:
            return self._join(request, principal)
        group, member_id = request.group, request.member_id
        m = self._members.get(group, {}).get(member_id) if member_id is not None else None
        if m is None or member_id is None:
            return self._finish(HeartbeatAnswer(GroupError.UNKNOWN_MEMBER, 0))
        if request.member_epoch in (LEAVE, LEAVE_STATIC):
            return self._leave(group, member_id, m, request.member_epoch)
        if not 0 < request.member_epoch <= m.epoch:  # an epoch never given
            return self._finish(HeartbeatAnswer(GroupError.FENCED, 0))
        return self._stay(group, member_id, m, request, received_at)

    def _stay(
        self,
        group: str,
        member_id: str,
        m: MemberValue,
        request: HeartbeatRequest,
        received_at: float | None = None,
    ) -> Step[HeartbeatAnswer]:
        """A known member's heartbeat: session, subscription, reconciliation.

        An older epoch than the member's is the same process behind on answers
        (the id is one process): it gets the current answer; its `owned`
        counts only at the member's current revision.
        """
        topics = tuple(sorted(set(request.topics)))
        resubscribed = topics != m.topics
        if resubscribed and self._topics_over_limit(group, member_id, topics):
            return self._finish(HeartbeatAnswer(GroupError.LIMIT, 0))
        received = self._clock.monotonic() if received_at is None else received_at
        self._deadlines[group, member_id] = received + request.session_timeout_s
        self._paused[group, member_id] = request.paused & request.owned
        updated = dataclasses.replace(
            m,
            away=False,
            topics=topics,
            session_timeout_ms=round(request.session_timeout_s * 1000),
            assignor=request.assignor,
        )
        if updated != m:
            self._emit(MemberRecord(group, member_id, updated))
        if resubscribed:
            self._rebalance(group)
        return self._finish(self._reconcile(group, member_id, request))

    def _check_heartbeat(self, r: HeartbeatRequest) -> GroupError:
        lim = self.limits
        if not self._valid_name(r.group) or r.member_epoch < LEAVE_STATIC:
            return GroupError.INVALID
        if r.instance_id is not None and not self._valid_name(r.instance_id):
            return GroupError.INVALID
        if r.assignor is not None and r.assignor not in ASSIGNORS:
            return GroupError.INVALID
        if not lim.session_timeout_s_min <= r.session_timeout_s <= lim.session_timeout_s_max:
            return GroupError.INVALID
        if len(r.topics) > lim.topics_per_subscription_max:
            return GroupError.LIMIT
        if max(len(r.owned), len(r.paused)) > lim.partitions_per_request_max:
            return GroupError.LIMIT
        if not all(self._valid_name(t) for t in r.topics):
            return GroupError.INVALID
        return GroupError.NONE

    def _valid_name(self, name: str) -> bool:
        return 0 < len(name.encode()) <= self.limits.name_bytes_max

    def _topics_over_limit(self, group: str, member_id: str | None, topics: Iterable[str]) -> bool:
        others = self._members.get(group, {})
        union = {t for mid, m in others.items() if mid != member_id for t in m.topics}
        union.update(topics)
        return len(union) > self.limits.topics_per_group_max

    def owners_named(self, request: HeartbeatRequest | CommitRequest) -> list[str | None]:
        """The owners of the members `request` acts as: the member its id names
        and, for a heartbeat with an instance id, the static member holding it
        (a join under a new id takes that one's partitions over)."""
        members = self._members.get(request.group, {})
        named = members.get(request.member_id) if request.member_id is not None else None
        owners = [] if named is None else [named.principal]
        instance = request.instance_id if isinstance(request, HeartbeatRequest) else None
        if instance is not None:
            owners += [m.principal for m in members.values() if m.instance_id == instance]
        return owners

    def _join(self, r: HeartbeatRequest, principal: str | None) -> Step[HeartbeatAnswer]:
        """A new member, under the id it chose (or one made here if None).

        A join from a member the group knows is the same join sent again (its
        answer was lost): it gets the current answer, so no phantom member
        holds partitions until its session ends. It releases nothing (its
        revision is 0, never the member's current one).
        """
        group = r.group
        if r.member_id is not None and not self._valid_name(r.member_id):
            return self._finish(HeartbeatAnswer(GroupError.INVALID, 0))
        members = self._members.get(group, {})
        known = members.get(r.member_id) if r.member_id is not None else None
        if known is not None and r.member_id is not None:
            return self._stay(group, r.member_id, known, r)
        static = None
        if r.instance_id is not None:
            static = next((i for i, m in members.items() if m.instance_id == r.instance_id), None)
        if static is not None and not members[static].away:
            return self._finish(HeartbeatAnswer(GroupError.INSTANCE_IN_USE, 0))
        if static is None and len(members) >= self.limits.members_per_group_max:
            return self._finish(HeartbeatAnswer(GroupError.LIMIT, 0))
        if group not in self._groups and len(self._groups) >= self.limits.groups_max:
            return self._finish(HeartbeatAnswer(GroupError.LIMIT, 0))
        topics = tuple(sorted(set(r.topics)))
        if self._topics_over_limit(group, static, topics):
            return self._finish(HeartbeatAnswer(GroupError.LIMIT, 0))
        if group not in self._groups:
            self._emit(GroupRecord(group, GroupValue(0, r.assignor or DEFAULT_ASSIGNOR, ())))
        member_id = r.member_id or self._new_member_id(group)
        fresh = MemberValue(
            instance_id=r.instance_id,
            epoch=0,
            revision=0,
            topics=topics,
            session_timeout_ms=round(r.session_timeout_s * 1000),
            assignor=r.assignor,
            assigned=_NO_PARTITIONS,
            revoking=_NO_PARTITIONS,
            target=_NO_PARTITIONS,
            away=False,
            principal=principal,
        )
        rebalance = True
        if static is not None:
            # A static member back under a new member id takes over the old
            # one's partitions: the old process said it stopped (epoch -2).
            old = members[static]
            self._emit(MemberRecord(group, static, None))
            fresh = dataclasses.replace(
                old,
                away=False,
                revision=old.revision + 1,
                topics=topics,
                session_timeout_ms=fresh.session_timeout_ms,
                assignor=r.assignor,
            )
            rebalance = topics != old.topics
        self._emit(MemberRecord(group, member_id, fresh))
        self._deadlines[group, member_id] = self._clock.monotonic() + r.session_timeout_s
        if rebalance:
            self._rebalance(group)
        return self._finish(self._reconcile(group, member_id, r))

    def _new_member_id(self, group: str) -> str:
        members = self._members.get(group, {})
        while True:
            member_id = f"{self._rng.getrandbits(64):016x}"
            if member_id not in members:
                return member_id

    def _leave(
        self, group: str, member_id: str, m: MemberValue, epoch: int
    ) -> Step[HeartbeatAnswer]:
        if epoch == LEAVE_STATIC and m.instance_id is not None:
            if not m.away:
                self._emit(MemberRecord(group, member_id, dataclasses.replace(m, away=True)))
            self._deadlines[group, member_id] = (
                self._clock.monotonic() + m.session_timeout_ms / 1000
            )
            return self._finish(HeartbeatAnswer(GroupError.NONE, 0, member_id, LEAVE_STATIC))
        self._remove_member(group, member_id)
        return self._finish(HeartbeatAnswer(GroupError.NONE, 0, member_id, LEAVE))

    def _remove_member(self, group: str, member_id: str) -> None:
        """Its partitions are free at once: the member said it stopped, or its
        session (longer than its lease) expired."""
        self._emit(MemberRecord(group, member_id, None))
        self._rebalance(group)

    def _rebalance(self, group: str) -> None:
        """A new group epoch and target assignment (members reconcile to it at
        their next heartbeats)."""
        g = self._groups[group]
        members = self._members.get(group, {})
        topics = sorted({t for m in members.values() for t in m.topics})
        counts = tuple((t, self._counts.get(t, 0)) for t in topics)
        preferred = Counter(m.assignor for m in members.values() if m.assignor is not None)
        assignor = min(preferred, key=lambda a: (-preferred[a], a)) if preferred else g.assignor
        subscribers = {
            mid: Subscriber(frozenset(m.topics), m.target, m.instance_id or mid)
            for mid, m in members.items()
        }
        targets = ASSIGNORS[assignor](subscribers, dict(counts)) if subscribers else {}
        self._emit(GroupRecord(group, GroupValue(g.epoch + 1, assignor, counts)))
        for mid in sorted(members):
            m = members[mid]
            if targets[mid] != m.target:
                self._emit(MemberRecord(group, mid, dataclasses.replace(m, target=targets[mid])))

    def _reconcile(self, group: str, member_id: str, r: HeartbeatRequest) -> HeartbeatAnswer:
        """Move one member toward its target: revoke first, then the new epoch,
        then the target partitions nobody else holds."""
        m = self._members[group][member_id]
        group_epoch = self._groups[group].epoch
        owners = self._owners.get(group, {})
        assigned, revoking = m.assigned, m.revoking
        epoch = m.epoch
        revoking = _unreleased(m, r)
        revoke = assigned - m.target
        assigned, revoking = assigned - revoke, revoking | revoke
        if not revoking and epoch != group_epoch:
            epoch = group_epoch
        # Partitions nobody holds (a leaver's, an expired member's, new ones)
        # are given at once, even while the member still releases others: only
        # a partition another member holds must wait for its release.
        assigned |= {tp for tp in m.target - assigned if tp not in owners}
        if (epoch, assigned, revoking) != (m.epoch, m.assigned, m.revoking):
            m = dataclasses.replace(
                m,
                epoch=epoch,
                assigned=frozenset(assigned),
                revoking=frozenset(revoking),
                revision=m.revision + 1,
            )
            self._emit(MemberRecord(group, member_id, m))
        interval = min(self.heartbeat_interval_s, m.session_timeout_ms / 3000)
        if m.revoking or m.target - m.assigned:
            interval /= 5  # moving partitions: ask again soon
        return HeartbeatAnswer(
            GroupError.NONE, 0, member_id, m.epoch, m.revision, m.assigned, interval
        )

    def hold_s(self, request: HeartbeatRequest, answer: HeartbeatAnswer) -> float:
        """How long the shell may hold this heartbeat's answer (0: send it now).

        A member at the group epoch with nothing to release, that already has
        this answer, has nothing to do until the group changes: a settled
        member, or one waiting for partitions another member still releases.
        Its answer is held (a long poll): as soon as `group_version` moves (a
        join, a leave, an expiry, new partitions, a release) the shell answers
        the same request again (`heartbeat(request, received_at=...)`), else
        it sends the held answer when this time is up, with
        `heartbeat_interval_s` 0 so the member asks again at once (see
        `next_is_held`: an answer that makes a member idle says 0 too). A change
        then reaches the members in a round trip, not a heartbeat interval,
        for no more heartbeats than before. The hold stays well within the
        member's request timeout (a third of its session).
        """
        m = self._members.get(request.group, {}).get(request.member_id or "")
        g = self._groups.get(request.group)
        idle = (
            m is not None
            and g is not None
            and answer.error is GroupError.NONE
            and request.member_epoch == answer.epoch == m.epoch == g.epoch
            and request.revision == answer.revision
            and not m.revoking
        )
        return min(self.heartbeat_interval_s, request.session_timeout_s / 6) if idle else 0.0

    def next_is_held(self, request: HeartbeatRequest, answer: HeartbeatAnswer) -> bool:
        """Whether the member's next heartbeat, with this answer applied,
        would be held: then the shell tells it to send that at once (interval
        0), so a member is in a held heartbeat nearly all the time."""
        after = dataclasses.replace(request, member_epoch=answer.epoch, revision=answer.revision)
        return self.hold_s(after, answer) > 0

    def group_version(self, group: str) -> int:
        """Moves whenever the group or one of its members changes (not on
        commits): what a held heartbeat waits for. Volatile."""
        return self._versions.get(group, 0)

    def tick(self) -> Step[None]:
        """Expire the members whose session ended (their leases ended before)."""
        now = self._clock.monotonic()
        for group, member_id in sorted(k for k, d in self._deadlines.items() if d <= now):
            self._remove_member(group, member_id)
        return self._finish(None)

    def next_deadline(self) -> float | None:
        """When `tick` next has work (monotonic seconds), if ever."""
        return min(self._deadlines.values(), default=None)

    # -- positions --------------------------------------------------------

    def commit(
        self, request: CommitRequest, ends: Mapping[TopicPartition, int]
    ) -> Step[CommitAnswer]:
        """Apply a member's positions, each checked on its own (`results`).

        `ends` must give the end index of every committed partition.
        """
        if len(request.positions) > self.limits.partitions_per_request_max:
            return self._finish(CommitAnswer(GroupError.LIMIT, 0))
        m = self._members.get(request.group, {}).get(request.member_id)
        positions = self._positions.get(request.group, {})
        results: dict[TopicPartition, GroupError] = {}
        for tp, index in sorted(request.positions.items()):
            current = positions.get(tp)
            error = _fence(m, request.member_epoch, tp)
            if error is GroupError.NONE:
                error = _position_check(index, current, ends[tp])
            results[tp] = error
            if error is GroupError.NONE and (current is None or current.index != index):
                self._put_position(
                    request.group, tp, index, request.member_id, request.member_epoch
                )
        return self._finish(CommitAnswer(GroupError.NONE, 0, results))

    def _put_position(
        self, group: str, tp: TopicPartition, index: int, member_id: str, epoch: int
    ) -> None:
        value = Position(index, member_id, epoch, self._clock.wall_ms())
        self._emit(PositionRecord(group, tp[0], tp[1], value))

    def positions(
        self, group: str, partitions: Iterable[TopicPartition] | None = None
    ) -> Step[PositionsAnswer]:
        """Committed positions of a group (all, or those of `partitions`)."""
        held = self._positions.get(group, {})
        if partitions is None:
            return self._finish(PositionsAnswer(GroupError.NONE, 0, dict(held)))
        wanted = list(partitions)
        if len(wanted) > self.limits.partitions_per_request_max:
            return self._finish(PositionsAnswer(GroupError.LIMIT, 0))
        found = {tp: held[tp] for tp in wanted if tp in held}
        return self._finish(PositionsAnswer(GroupError.NONE, 0, found))

    def reset_positions(
        self,
        group: str,
        positions: Mapping[TopicPartition, int | None],
        ends: Mapping[TopicPartition, int],
    ) -> Step[AdminAnswer]:
        """Set (None: forget) positions of a group without members, all or none."""
        if not self._valid_name(group):
            return self._finish(AdminAnswer(GroupError.INVALID, 0))
        if len(positions) > self.limits.partitions_per_request_max:
            return self._finish(AdminAnswer(GroupError.LIMIT, 0))
        if self._members.get(group):
            return self._finish(AdminAnswer(GroupError.GROUP_NOT_EMPTY, 0))
        if group not in self._groups and len(self._groups) >= self.limits.groups_max:
            return self._finish(AdminAnswer(GroupError.LIMIT, 0))
        for (topic, partition), index in positions.items():
            if not 0 <= partition < self._counts.get(topic, 0):
                return self._finish(AdminAnswer(GroupError.UNKNOWN_PARTITION, 0))
            if index is not None and not 0 <= index <= ends[topic, partition]:
                return self._finish(AdminAnswer(GroupError.POSITION_BEYOND_END, 0))
        if group not in self._groups:
            self._emit(GroupRecord(group, GroupValue(0, DEFAULT_ASSIGNOR, ())))
        held = self._positions.get(group, {})
        for tp, index in sorted(positions.items()):
            if index is not None:
                self._put_position(group, tp, index, "", 0)
            elif tp in held:
                self._emit(PositionRecord(group, tp[0], tp[1], None))
        return self._finish(AdminAnswer(GroupError.NONE, 0))

    def delete_group(self, group: str) -> Step[AdminAnswer]:
        """Forget a group without members and its positions."""
        if group not in self._groups:
            return self._finish(AdminAnswer(GroupError.UNKNOWN_GROUP, 0))
        if self._members.get(group):
            return self._finish(AdminAnswer(GroupError.GROUP_NOT_EMPTY, 0))
        for topic, partition in sorted(self._positions.get(group, {})):
            self._emit(PositionRecord(group, topic, partition, None))
        self._emit(GroupRecord(group, None))
        return self._finish(AdminAnswer(GroupError.NONE, 0))

    # -- reads and inputs -------------------------------------------------

    def describe(self, group: str) -> Step[DescribeAnswer]:
        if group not in self._groups:
            return self._finish(DescribeAnswer(GroupError.UNKNOWN_GROUP, 0))
        return self._finish(DescribeAnswer(GroupError.NONE, 0, self._view(group)))

    def list_groups(self) -> Step[ListAnswer]:
        views = tuple(self._view(g) for g in sorted(self._groups))
        return self._finish(ListAnswer(GroupError.NONE, 0, views))

    def _view(self, group: str) -> GroupView:
        g = self._groups[group]
        members = tuple(
            MemberView(
                member_id=mid,
                instance_id=m.instance_id,
                epoch=m.epoch,
                topics=m.topics,
                assignment=m.assigned,
                revoking=m.revoking,
                pending=m.target - m.assigned,
                away=m.away,
                paused=self._paused.get((group, mid), _NO_PARTITIONS) & m.assigned,
            )
            for mid, m in sorted(self._members.get(group, {}).items())
        )
        return GroupView(group, g.epoch, g.assignor, members, dict(self._positions.get(group, {})))

    def set_partitions(self, topic: str, count: int) -> Step[None]:
        """The topic has `count` partitions now (0: deleted): the groups whose
        target saw another count get a new epoch. A deleted topic's positions
        are forgotten, so a topic made again under its name starts afresh."""
        if count:
            self._counts[topic] = count
        else:
            self._counts.pop(topic, None)
        for group in sorted(self._groups):
            seen = dict(self._groups[group].partition_counts)
            if topic in seen and seen[topic] != count:
                self._rebalance(group)
            if not count:
                held = self._positions.get(group, {})
                for t, partition in sorted(tp for tp in held if tp[0] == topic):
                    self._emit(PositionRecord(group, t, partition, None))
        return self._finish(None)

    def known_topics(self) -> set[str]:
        """The topics this partition's groups subscribe to or hold positions of."""
        known = {t for positions in self._positions.values() for t, _ in positions}
        known |= {
            t for members in self._members.values() for m in members.values() for t in m.topics
        }
        return known

    def committed(self, seq: int) -> None:
        """The shell's log has committed every record up to `seq`."""
        if self._checkpoint is not None and seq >= self._checkpoint[1]:
            self.truncate_before = self._checkpoint[0]
            self._checkpoint = None

    # -- records ----------------------------------------------------------

    def _emit(self, record: Record) -> None:
        self._apply(record)
        self._out.append(record)
        self._seq += 1
        self._written += 1

    def _finish(self, answer: A) -> Step[A]:
        if answer is not None:
            answer = dataclasses.replace(answer, wait_for=self._seq)  # type: ignore[type-var]
        due = self._written > 2 * self._live + self._checkpoint_floor
        checkpoint_at = None
        if self._out and self._checkpoint is None and due:  # reads never write
            checkpoint_at = len(self._out)
            first = self._seq + 1
            for record in self.state_records():
                self._emit(record)
            self._checkpoint = (first, self._seq)
            self._written = self._seq - first + 1
        records, self._out = tuple(self._out), []
        return Step(answer, records, self._seq - len(records) + 1, checkpoint_at)

    def state_records(self) -> list[Record]:
        """The live state restated, one record per key (what a checkpoint
        writes): replaying them gives this state."""
        out: list[Record] = []
        for group in sorted(self._groups):
            out.append(GroupRecord(group, self._groups[group]))
            members = self._members.get(group, {})
            out.extend(MemberRecord(group, mid, members[mid]) for mid in sorted(members))
            positions = self._positions.get(group, {})
            out.extend(PositionRecord(group, t, p, positions[t, p]) for t, p in sorted(positions))
        return out

    def _apply(self, record: Record) -> None:
        """Fold one record into the state: the only place durable state changes."""
        group = record.group
        if not isinstance(record, PositionRecord):
            self._versions[group] = self._versions.get(group, 0) + 1
        if isinstance(record, GroupRecord):
            existed = self._groups.pop(group, None) is not None
            if record.value is not None:
                self._groups[group] = record.value
            elif not self._members.get(group) and not self._positions.get(group):
                for table in (self._members, self._positions, self._owners):
                    table.pop(group, None)
            self._live += (record.value is not None) - existed
        elif isinstance(record, MemberRecord):
            self._apply_member(group, record.member_id, record.value)
        else:
            positions = self._positions.setdefault(group, {})
            tp = (record.topic, record.partition)
            existed = positions.pop(tp, None) is not None
            if record.value is not None:
                positions[tp] = record.value
            self._live += (record.value is not None) - existed

    def _apply_member(self, group: str, member_id: str, value: MemberValue | None) -> None:
        members = self._members.setdefault(group, {})
        owners = self._owners.setdefault(group, {})
        old = members.pop(member_id, None)
        if old is not None:
            for tp in old.held:
                del owners[tp]
        if value is None:
            self._deadlines.pop((group, member_id), None)
            self._paused.pop((group, member_id), None)
        else:
            for tp in value.held:
                holder = owners.setdefault(tp, member_id)
                if holder != member_id:
                    raise GroupStateError(f"{tp} of group {group} held by {holder} and {member_id}")
            members[member_id] = value
        self._live += (value is not None) - (old is not None)


def _fence(m: MemberValue | None, epoch: int, tp: TopicPartition) -> GroupError:
    """Whether a commit of `tp` at `epoch` may come from member `m`: it must
    hold the partition at its current epoch. An older epoch from the member
    is STALE_EPOCH (retriable: an answer moving it on is on its way)."""
    if m is None or tp not in m.held or epoch > m.epoch:
        return GroupError.FENCED
    return GroupError.STALE_EPOCH if epoch < m.epoch else GroupError.NONE


def _position_check(index: int, current: Position | None, end: int) -> GroupError:
    """A member's position moves forward only, and never past the end."""
    if index < 0:
        return GroupError.INVALID
    if current is not None and index < current.index:
        return GroupError.POSITION_BEHIND
    if index > end:
        return GroupError.POSITION_BEYOND_END
    return GroupError.NONE


def _unreleased(m: MemberValue, r: HeartbeatRequest) -> frozenset[TopicPartition]:
    """The partitions `m` was told to revoke and still holds: those its
    heartbeat lists, if the member has seen its latest answer (else a late
    heartbeat, sent before a partition was given to it, would release it)."""
    if r.revision != m.revision:
        return m.revoking
    return m.revoking & r.owned
