"""The coordinator core, one rule per test: incremental reconciliation,
release before reassign, fencing, monotonic positions, limits, and state ==
the fold of the records (checkpoints included)."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from laminar.groups.coordinator import GroupCoordinator, Limits, Step
from laminar.groups.errors import GroupError, GroupStateError
from laminar.groups.messages import (
    JOIN,
    LEAVE,
    LEAVE_STATIC,
    CommitRequest,
    HeartbeatAnswer,
    HeartbeatRequest,
    TopicPartition,
)
from laminar.groups.positions import coordinator_partition
from laminar.groups.records import MemberRecord, MemberValue, Record
from tests.support.clock import FakeClock

G = "billing"


class Harness:
    """A coordinator whose every record is kept (the log), with short calls."""

    def __init__(self, partitions: int = 6, auto_commit: bool = True, **options: Any) -> None:
        self.clock = FakeClock()
        self.auto_commit = auto_commit
        self.options = options
        self.core = GroupCoordinator(self.clock, random.Random(1), **options)
        self.log: list[Record] = []
        self.step(self.core.set_partitions("t", partitions))

    def step(self, step: Step[Any]) -> Any:
        assert step.first_seq == len(self.log) + 1
        self.log.extend(step.records)
        if self.auto_commit:
            self.core.committed(len(self.log))
        return step.answer

    def join(
        self, instance: str | None = None, topics: tuple[str, ...] = ("t",)
    ) -> HeartbeatAnswer:
        answer = self.step(
            self.core.heartbeat(
                HeartbeatRequest(G, None, JOIN, 0, instance, topics, frozenset(), 10.0)
            )
        )
        assert isinstance(answer, HeartbeatAnswer)
        return answer

    def beat(
        self,
        a: HeartbeatAnswer,
        owned: Iterable[TopicPartition] | None = None,
        epoch: int | None = None,
        revision: int | None = None,
        topics: tuple[str, ...] = ("t",),
    ) -> HeartbeatAnswer:
        request = HeartbeatRequest(
            G,
            a.member_id,
            a.epoch if epoch is None else epoch,
            a.revision if revision is None else revision,
            None,
            topics,
            frozenset(a.assignment if owned is None else owned),
            10.0,
        )
        answer = self.step(self.core.heartbeat(request))
        assert isinstance(answer, HeartbeatAnswer)
        return answer

    def commit(
        self, a: HeartbeatAnswer, positions: Mapping[TopicPartition, int], epoch: int | None = None
    ) -> dict[TopicPartition, GroupError]:
        assert a.member_id is not None
        request = CommitRequest(G, a.member_id, a.epoch if epoch is None else epoch, positions)
        answer = self.step(self.core.commit(request, {tp: 100 for tp in positions}))
        return dict(answer.results)

    def replayed(self, records: Iterable[Record] | None = None) -> GroupCoordinator:
        core = GroupCoordinator.replay(
            self.log if records is None else records, self.clock, random.Random(2), **self.options
        )
        assert core.set_partitions("t", 6).records == ()
        return core


def parts(*numbers: int) -> frozenset[TopicPartition]:
    return frozenset(("t", n) for n in numbers)


def test_a_lone_member_gets_every_partition_and_the_answer_waits_for_its_records() -> None:
    h = Harness()
    a = h.join()
    assert a.error is GroupError.NONE and a.assignment == parts(*range(6))
    assert a.epoch == 1 and a.wait_for == len(h.log) > 0


def test_a_join_revokes_first_then_gives_only_what_was_released() -> None:
    h = Harness()
    a = h.join()
    b = h.join()
    assert b.assignment == frozenset(), "b got partitions a still holds"
    a2 = h.beat(a)
    assert a2.epoch == a.epoch, "a revokes at its epoch"
    assert len(a2.assignment) == 3 and a2.assignment < a.assignment
    assert h.beat(b).assignment == frozenset(), "nothing released yet"
    still = h.beat(a2, owned=a.assignment)  # a's app is still on its last commits
    assert still.epoch == a.epoch and still.assignment == a2.assignment
    assert h.beat(b).assignment == frozenset(), "given away before a released them"
    a3 = h.beat(a2)  # reports the revoked three released
    assert a3.epoch == 2 and a3.assignment == a2.assignment
    b2 = h.beat(b)
    assert b2.assignment == a.assignment - a2.assignment and b2.epoch == 2
    assert h.core.describe(G).answer.group.state == "stable"


def test_a_release_counts_only_from_a_member_that_saw_the_latest_answer() -> None:
    """A late heartbeat sent before the revocation does not list a partition it
    did not own yet; it must not release what the member holds now."""
    h = Harness()
    a = h.join()
    h.join()
    a2 = h.beat(a)  # told to revoke three
    late = h.beat(a2, owned=a2.assignment, revision=a.revision)
    assert late.assignment == a2.assignment
    view = {m.member_id: m for m in h.core.describe(G).answer.group.members}
    assert view[a.member_id].revoking == a.assignment - a2.assignment


def test_a_graceful_leave_frees_its_partitions_at_once() -> None:
    h = Harness()
    a = h.join()
    b = h.join()
    a = h.beat(h.beat(a))
    b = h.beat(b)
    assert h.beat(a, epoch=LEAVE).error is GroupError.NONE
    assert h.beat(b).assignment == parts(*range(6))


def test_a_silent_member_keeps_its_partitions_until_its_session_ends() -> None:
    h = Harness()
    a = h.join()
    b = h.join()
    h.clock.advance(9.9)
    h.step(h.core.tick())
    b = h.beat(b)
    assert b.assignment == frozenset(), "given away before a's session ended"
    h.clock.advance(0.1)
    h.step(h.core.tick())
    assert h.beat(b).assignment == parts(*range(6))
    assert h.beat(a).error is GroupError.UNKNOWN_MEMBER


def test_a_static_member_away_keeps_its_partitions_and_takes_them_back() -> None:
    h = Harness()
    s = h.join(instance="host-1")
    assert h.join(instance="host-1").error is GroupError.INSTANCE_IN_USE
    epoch = h.core.describe(G).answer.group.epoch
    assert h.beat(s, epoch=LEAVE_STATIC).error is GroupError.NONE
    back = h.join(instance="host-1")
    assert back.member_id != s.member_id and back.assignment == s.assignment
    assert h.core.describe(G).answer.group.epoch == epoch, "a static restart rebalanced"
    h.beat(back, epoch=LEAVE_STATIC)
    h.clock.advance(10)
    h.step(h.core.tick())
    assert h.core.describe(G).answer.group.members == ()


def test_commits_are_fenced_unless_from_the_holder_at_its_epoch() -> None:
    h = Harness()
    a = h.join()
    b = h.join()
    a2 = h.beat(a)
    revoked = sorted(a.assignment - a2.assignment)[0]
    kept = sorted(a2.assignment)[0]
    assert h.commit(a2, {revoked: 5}) == {revoked: GroupError.NONE}, "a revoking holder commits"
    a3 = h.beat(a2)
    b2 = h.beat(b)
    assert h.commit(b2, {kept: 1}) == {kept: GroupError.FENCED}, "not its partition"
    assert h.commit(a3, {kept: 1}, epoch=a3.epoch + 1) == {kept: GroupError.FENCED}
    assert h.commit(a3, {kept: 1}, epoch=0) == {kept: GroupError.STALE_EPOCH}
    assert h.commit(a3, {kept: 1}, epoch=a2.epoch) == {kept: GroupError.STALE_EPOCH}
    assert h.commit(a2, {revoked: 9}, epoch=a3.epoch) == {revoked: GroupError.FENCED}
    gone = HeartbeatAnswer(GroupError.NONE, 0, "ghost", a3.epoch)
    assert h.commit(gone, {kept: 1}) == {kept: GroupError.FENCED}
    assert h.core.positions(G).answer.positions.keys() == {revoked}


def test_positions_only_move_forward_and_never_past_the_end() -> None:
    h = Harness()
    a = h.join()
    tp = ("t", 0)
    assert h.commit(a, {tp: 10}) == {tp: GroupError.NONE}
    before = len(h.log)
    assert h.commit(a, {tp: 10}) == {tp: GroupError.NONE}
    assert len(h.log) == before, "an unchanged position was written again"
    assert h.commit(a, {tp: 9}) == {tp: GroupError.POSITION_BEHIND}
    assert h.commit(a, {tp: 101}) == {tp: GroupError.POSITION_BEYOND_END}
    assert h.core.positions(G, [tp]).answer.positions[tp].index == 10


def test_reads_wait_for_every_record_emitted_before_them() -> None:
    h = Harness()
    a = h.join()
    h.commit(a, {("t", 0): 3})
    assert h.core.positions(G).answer.wait_for == len(h.log)
    assert h.core.describe(G).answer.wait_for == len(h.log)


def test_reset_and_delete_need_a_group_without_members() -> None:
    h = Harness()
    a = h.join()
    ends = {("t", 0): 50}
    assert (
        h.step(h.core.reset_positions(G, {("t", 0): 1}, ends)).error is GroupError.GROUP_NOT_EMPTY
    )
    assert h.step(h.core.delete_group(G)).error is GroupError.GROUP_NOT_EMPTY
    h.beat(a, epoch=LEAVE)
    assert h.step(h.core.reset_positions(G, {("t", 0): 51}, ends)).error is (
        GroupError.POSITION_BEYOND_END
    )
    assert h.step(h.core.reset_positions(G, {("t", 6): 1}, {("t", 6): 9})).error is (
        GroupError.UNKNOWN_PARTITION
    )
    assert h.step(h.core.reset_positions(G, {("t", 0): 1}, ends)).error is GroupError.NONE
    assert h.core.positions(G).answer.positions[("t", 0)].index == 1
    assert h.step(h.core.delete_group(G)).error is GroupError.NONE
    assert h.step(h.core.describe(G)).error is GroupError.UNKNOWN_GROUP
    assert h.replayed().state_records() == []


def test_every_input_is_bounded() -> None:
    limits = Limits(
        members_per_group_max=2,
        topics_per_subscription_max=2,
        partitions_per_request_max=3,
        groups_max=1,
        name_bytes_max=8,
    )
    h = Harness(limits=limits)
    a = h.join()
    h.join()
    assert h.join().error is GroupError.LIMIT
    assert h.join(topics=("a", "b", "c")).error is GroupError.LIMIT
    assert h.beat(a, owned=parts(0, 1, 2, 3)).error is GroupError.LIMIT
    paused = HeartbeatRequest(
        G, a.member_id, a.epoch, a.revision, None, ("t",), frozenset(), 10.0,
        paused=parts(0, 1, 2, 3),
    )  # fmt: skip
    assert h.step(h.core.heartbeat(paused)).error is GroupError.LIMIT
    assert (
        h.step(
            h.core.commit(
                CommitRequest(G, a.member_id or "", a.epoch, dict.fromkeys(parts(*range(4)), 0)), {}
            )
        ).error
        is GroupError.LIMIT
    )
    other = HeartbeatRequest("other", None, JOIN, 0, None, ("t",), frozenset(), 10.0)
    assert h.step(h.core.heartbeat(other)).error is GroupError.LIMIT
    long = HeartbeatRequest("g" * 9, None, JOIN, 0, None, ("t",), frozenset(), 10.0)
    assert h.step(h.core.heartbeat(long)).error is GroupError.INVALID
    for session_s in (0.5, 301.0):
        bad = HeartbeatRequest(G, None, JOIN, 0, None, ("t",), frozenset(), session_s)
        assert h.step(h.core.heartbeat(bad)).error is GroupError.INVALID


def test_a_new_partition_count_starts_a_new_epoch_but_a_replay_with_it_does_not() -> None:
    h = Harness(partitions=2)
    a = h.join()
    h.step(h.core.set_partitions("t", 6))
    a2 = h.beat(a)
    assert a2.epoch == a.epoch + 1 and a2.assignment == parts(*range(6))
    h.replayed()  # which checks a replay with the same count writes nothing


def test_a_count_changed_while_the_core_was_lost_starts_its_epoch_after_replay() -> None:
    h = Harness(partitions=6)
    h.join()
    core = GroupCoordinator.replay(h.log, h.clock, random.Random(2))
    assert core.set_partitions("t", 8).records != ()
    assert core.describe(G).answer.group.epoch == h.core.describe(G).answer.group.epoch + 1


def _churn(h: Harness, rounds: int) -> None:
    """Joins, heartbeats, commits and leaves: many records over few keys."""
    rng = random.Random(5)
    live: list[HeartbeatAnswer] = []
    for _ in range(rounds):
        if len(live) < 3:
            live.append(h.join())
        i = rng.randrange(len(live))
        live[i] = h.beat(live[i])
        for tp in live[i].assignment:
            h.commit(live[i], {tp: rng.randrange(100)})
        if rng.random() < 0.2:
            h.beat(live.pop(i), epoch=LEAVE)


def test_replay_of_the_log_gives_the_same_state() -> None:
    h = Harness()
    _churn(h, 60)
    assert h.replayed().state_records() == h.core.state_records()


def test_a_checkpoint_restates_the_state_and_then_lets_the_log_be_cut_before_it() -> None:
    h = Harness(checkpoint_floor=20)
    _churn(h, 300)
    cut = h.core.truncate_before
    assert cut is not None and cut > 1, "no checkpoint after many records"
    live = h.core.state_records()
    assert h.replayed(h.log[cut - 1 :]).state_records() == live
    assert h.replayed().state_records() == live
    kept = len(h.log) - cut + 1
    assert kept < len(h.log) / 4, f"the log after the cut ({kept}) stays long"


def test_a_checkpoint_is_not_reported_before_it_is_committed() -> None:
    h = Harness(checkpoint_floor=5, auto_commit=False)
    _churn(h, 30)
    assert h.core.truncate_before is None
    h.core.committed(len(h.log))
    assert h.core.truncate_before is not None


def test_replay_refuses_a_log_where_two_members_hold_one_partition() -> None:
    h = Harness()
    h.join()
    member = [r for r in h.log if isinstance(r, MemberRecord) and r.value is not None][-1]
    assert isinstance(member.value, MemberValue)
    thief = MemberRecord(G, "thief", member.value)
    with pytest.raises(GroupStateError):
        h.replayed([*h.log, thief])


def test_groups_hash_to_a_stable_coordinator_partition() -> None:
    assert coordinator_partition("billing", 50) == coordinator_partition("billing", 50)
    spread = {coordinator_partition(f"g{i}", 8) for i in range(200)}
    assert spread == set(range(8))


def test_a_steady_heartbeat_writes_nothing() -> None:
    """The log grows with changes, not with time."""
    h = Harness()
    a = h.beat(h.join())
    before = len(h.log)
    for _ in range(5):
        h.clock.advance(1)
        a = h.beat(a)
    assert len(h.log) == before


def test_a_read_never_writes_even_when_a_checkpoint_is_due() -> None:
    h = Harness(checkpoint_floor=0)
    _churn(h, 60)
    core = h.replayed()  # every record counts as written, a checkpoint is due
    assert core.describe(G).records == () and core.positions(G).records == ()
    assert core.list_groups().records == ()


def test_a_heartbeat_behind_on_epochs_gets_the_current_answer_one_ahead_is_fenced() -> None:
    """The member id is one process: an old epoch means lost answers, not a
    zombie; joining again would strand its partitions until its session ends."""
    h = Harness()
    a = h.join()
    for _ in range(2):  # two new epochs whose answers a never got
        b = h.join()
        h.beat(h.beat(a))
        h.beat(b, epoch=LEAVE)
    current = h.beat(a)
    assert current.error is GroupError.NONE and current.epoch > a.epoch + 1
    assert current.assignment == parts(*range(6))
    assert h.beat(current, epoch=current.epoch + 1).error is GroupError.FENCED


def test_a_join_sent_again_is_the_same_member_not_a_phantom() -> None:
    """A member that chose its id and lost its join's answer joins again: it
    gets the current answer, and no second member holds partitions."""
    h = Harness()
    join = HeartbeatRequest(G, "c0ffee", JOIN, 0, None, ("t",), frozenset(), 10.0)
    first = h.step(h.core.heartbeat(join))
    again = h.step(h.core.heartbeat(join))
    assert again.member_id == first.member_id == "c0ffee"
    assert again.assignment == first.assignment == parts(*range(6))
    assert [m.member_id for m in h.core.describe(G).answer.group.members] == ["c0ffee"]


def test_a_deleted_topic_s_positions_are_forgotten_even_by_a_core_built_later() -> None:
    h = Harness(partitions=2)
    a = h.join()
    h.step(
        h.core.commit(CommitRequest(G, a.member_id or "", a.epoch, {("t", 0): 5}), {("t", 0): 9})
    )
    later = GroupCoordinator.replay(h.log, h.clock, random.Random(2))
    assert later.known_topics() == {"t"}
    h.step(h.core.set_partitions("t", 0))
    assert h.core.positions(G).answer.positions == {}
    assert (
        GroupCoordinator.replay(h.log, h.clock, random.Random(3)).positions(G).answer.positions
        == {}
    )
    assert later.set_partitions("t", 0).records != ()  # what the shell does for a core built later
    assert later.positions(G).answer.positions == {}


def test_a_step_says_where_its_checkpoint_starts_and_that_part_alone_is_the_state() -> None:
    h = Harness(checkpoint_floor=5)
    seen: list[Step[Any]] = []
    step = h.step

    def keep(s: Step[Any]) -> Any:
        if s.checkpoint_at is not None:
            seen.append(s)
            restated = GroupCoordinator.replay(
                s.records[s.checkpoint_at :], h.clock, random.Random(4)
            )
            assert restated.state_records() == h.core.state_records()
        return step(s)

    h.step = keep  # type: ignore[method-assign]
    _churn(h, 40)
    assert seen, "no checkpoint"
    assert all(0 < s.checkpoint_at <= len(s.records) for s in seen if s.checkpoint_at is not None)


def test_describe_says_why_a_member_is_idle() -> None:
    """No partition left for it, waiting for another member's release, or
    every partition it owns paused (as its heartbeat reported); a member
    that delivers has no reason."""
    h = Harness(partitions=2)
    a = h.beat(h.join())
    b = h.join()  # a must release one before b gets it
    views = {m.member_id: m for m in h.step(h.core.describe(G)).group.members}
    assert views[b.member_id].idle_reason == (
        "waiting: for 1 partition(s) another member is releasing"
    )
    a = h.beat(a)  # told to revoke: a now releases
    a = h.beat(a)
    b = h.beat(b)
    c = h.join()
    paused = HeartbeatRequest(
        G, b.member_id, b.epoch, b.revision, None, ("t",), b.assignment, 10.0,
        paused=b.assignment,
    )  # fmt: skip
    h.step(h.core.heartbeat(paused))
    views = {m.member_id: m for m in h.step(h.core.describe(G)).group.members}
    assert (views[a.member_id].idle_reason, len(views[a.member_id].assignment)) == (None, 1)
    assert views[b.member_id].idle_reason == "paused: it paused every partition it owns"
    assert views[c.member_id].idle_reason == (
        "no partitions left to give it (more members than partitions)"
    )


def test_a_settled_member_s_heartbeat_is_held_and_its_session_runs_from_receipt() -> None:
    """`hold_s`: only a member with nothing to learn is held (a long poll the
    shell answers again when the group changes); answered again later,
    its session still runs from when the heartbeat arrived."""
    h = Harness(partitions=2)
    a = h.beat(h.join())
    request = HeartbeatRequest(G, a.member_id, a.epoch, a.revision, None, ("t",), a.assignment, 6.0)
    settled = h.step(h.core.heartbeat(request))
    assert h.core.hold_s(request, settled) == 1.0  # min(interval, session / 6)
    version = h.core.group_version(G)
    b = h.join()  # a must give one up: the group moves, a is not idle
    assert h.core.group_version(G) != version
    assert h.core.hold_s(request, h.step(h.core.heartbeat(request))) == 0.0
    assert h.core.hold_s(HeartbeatRequest(G, None, JOIN, 0, None, ("t",), frozenset(), 6.0), b) == 0
    received = h.clock.monotonic()
    h.clock.advance(1.0)
    h.step(h.core.heartbeat(request, received_at=received))
    h.clock.advance(5.0)  # 6 s after the heartbeat arrived, 5 s after its answer
    h.step(h.core.tick())
    members = h.step(h.core.describe(G)).group.members
    assert a.member_id not in {m.member_id for m in members}
