"""The member core: leases from the send time, the poll deadline, release on
the app's word, stale answers ignored, fencing makes it join again."""

from __future__ import annotations

from laminar.groups.errors import GroupError
from laminar.groups.member import ASSIGNED, LOST, REVOKED, MemberCore
from laminar.groups.messages import (
    JOIN,
    LEAVE,
    LEAVE_STATIC,
    CommitAnswer,
    HeartbeatAnswer,
    HeartbeatRequest,
)
from tests.support.clock import FakeClock

P0, P1 = ("t", 0), ("t", 1)


def _answer(assignment: set[tuple[str, int]], epoch: int = 1, revision: int = 1) -> HeartbeatAnswer:
    return HeartbeatAnswer(GroupError.NONE, 0, "m1", epoch, revision, frozenset(assignment), 1.0)


def _joined(clock: FakeClock, **options: float) -> MemberCore:
    member = MemberCore(clock, "g", ["t"], session_timeout_s=10.0, **options)  # type: ignore[arg-type]
    request = member.next_request()
    assert request is not None and request.member_epoch == JOIN
    assert request.member_id == member.member_id
    member.on_heartbeat_answer(request, _answer({P0, P1}))
    return member


def test_the_lease_runs_from_the_heartbeats_send_time_not_its_answer() -> None:
    clock = FakeClock()
    member = MemberCore(clock, "g", ["t"], session_timeout_s=10.0)
    sent_at = clock.monotonic()
    request = member.next_request()
    assert request is not None
    clock.advance(3)  # the answer waited for the positions log and the network
    member.on_heartbeat_answer(request, _answer({P0}))
    assert member.lease_until == sent_at + 10.0
    clock.advance(6.99)
    assert member.assignment == {P0} and member.holds(P0)
    clock.advance(0.01)
    assert member.assignment == frozenset() and not member.holds(P0)
    assert [c.kind for c in member.take_changes()] == [ASSIGNED, LOST]


def test_a_revoked_partition_stops_being_delivered_but_is_held_until_released() -> None:
    clock = FakeClock()
    member = _joined(clock)
    clock.advance(1)
    request = member.next_request()
    assert request is not None and request.owned == {P0, P1}
    member.on_heartbeat_answer(request, _answer({P0}, revision=2))
    assert member.assignment == {P0} and member.holds(P1)
    grants = dict.fromkeys((P0, P1), 1)
    assert member.commit_request({P1: 5}, grants) is not None, "a revoked partition's last commit"
    assert member.next_request() is None
    member.release([P1])
    report = member.next_request()
    assert report is not None and report.owned == {P0} and report.revision == 2
    assert not member.holds(P1)
    assert [c.kind for c in member.take_changes()] == [ASSIGNED, REVOKED]


def test_a_partition_lost_and_given_back_is_a_new_grant_and_the_old_one_cannot_commit() -> None:
    clock = FakeClock()
    member = _joined(clock)
    first = member.take_changes()[0]
    assert (first.kind, first.grant) == (ASSIGNED, 1) and member.grant(P0) == 1
    grants = dict.fromkeys(first.partitions, first.grant)
    clock.advance(10)  # the lease lapses: another member may take P0 and commit it
    assert member.grant(P0) is None
    request = member.next_request()
    assert request is not None
    member.on_heartbeat_answer(request, _answer({P0}, revision=2))  # given back
    assert member.grant(P0) == 2
    assert member.commit_request({P0: 7}, grants) is None, "read under grant 1"
    again = member.take_changes()[-1]
    assert (again.kind, again.grant) == (ASSIGNED, 2)
    assert member.commit_request({P0: 7}, {P0: again.grant}) is not None


def test_an_answer_to_an_abandoned_heartbeat_is_ignored() -> None:
    clock = FakeClock()
    member = _joined(clock)
    clock.advance(1)
    old = member.next_request()
    clock.advance(member.request_timeout_s)
    new = member.next_request()
    assert old is not None and new is not None and new is not old
    member.on_heartbeat_answer(old, _answer(set(), revision=9))
    assert member.assignment == {P0, P1} and member.revision == 1


def test_processing_past_the_poll_deadline_leaves_and_the_next_poll_rejoins() -> None:
    clock = FakeClock()
    member = _joined(clock, poll_timeout_s=30.0)
    join_id = member.member_id
    member.extend_poll(45.0)
    for _ in range(40):  # heartbeats go on while the app processes
        clock.advance(1)
        request = member.next_request()
        if request is not None:
            member.on_heartbeat_answer(request, _answer({P0, P1}))
    assert member.assignment == {P0, P1}
    clock.advance(5)
    leave = member.next_request()
    assert leave is not None and leave.member_epoch == LEAVE
    assert leave.member_id == join_id
    assert member.assignment == frozenset() and member.next_request() is None
    member.poll_started()
    join = member.next_request()
    assert join is not None and join.member_epoch == JOIN and join.member_id != join_id


def test_a_fenced_commit_drops_everything_and_joins_again() -> None:
    clock = FakeClock()
    member = _joined(clock)
    commit = member.commit_request({P0: 3, ("t", 9): 1}, {P0: 1, ("t", 9): 1})
    assert commit is not None and dict(commit.positions) == {P0: 3}
    member.on_commit_answer(commit, CommitAnswer(GroupError.NONE, 0, {P0: GroupError.STALE_EPOCH}))
    assert member.assignment == {P0, P1}, "a stale epoch is retriable"
    member.on_commit_answer(commit, CommitAnswer(GroupError.NONE, 0, {P0: GroupError.FENCED}))
    assert member.assignment == frozenset()
    join = member.next_request()
    assert join is not None and join.member_epoch == JOIN


def test_an_unknown_member_answer_makes_it_join_again() -> None:
    clock = FakeClock()
    member = _joined(clock)
    clock.advance(1)
    request = member.next_request()
    assert request is not None
    member.on_heartbeat_answer(request, HeartbeatAnswer(GroupError.UNKNOWN_MEMBER, 0))
    assert member.assignment == frozenset() and member.take_changes()[-1].kind == LOST
    join = member.next_request()
    assert isinstance(join, HeartbeatRequest) and join.member_epoch == JOIN
    assert join.member_id != request.member_id, "a fenced member joins as a new one"


def test_close_sends_a_leave_static_members_a_temporary_one() -> None:
    clock = FakeClock()
    for instance, epoch in ((None, LEAVE), ("host-1", LEAVE_STATIC)):
        member = MemberCore(clock, "g", ["t"], instance_id=instance)
        request = member.next_request()
        assert request is not None
        member.on_heartbeat_answer(request, _answer({P0}))
        leave = member.close()
        assert leave is not None and leave.member_epoch == epoch
        assert member.assignment == frozenset() and member.next_request() is None
        member.poll_started()
        assert member.next_request() is None, "a closed member joined again"


def test_it_wakes_for_the_next_heartbeat_and_retries_a_failed_one_at_once() -> None:
    clock = FakeClock()
    member = _joined(clock)
    assert member.next_wakeup() == clock.monotonic() + 1.0  # the answer's interval
    clock.advance(1)
    request = member.next_request()
    assert request is not None and member.next_request() is None
    assert member.next_wakeup() == clock.monotonic() + member.request_timeout_s
    member.on_heartbeat_failed(request)
    assert member.next_request() is not None


def test_a_paused_partition_is_held_but_not_delivered() -> None:
    clock = FakeClock()
    member = _joined(clock)
    member.pause([P0])
    assert member.assignment == {P1} and member.holds(P0)
    member.resume([P0])
    assert member.assignment == {P0, P1}


def test_a_partition_not_started_yet_commits_under_the_grant_it_is_held_under() -> None:
    clock = FakeClock()
    member = _joined(clock)
    assert member.commit_request({P0: 4}, {}) is not None, "set before any poll"
    clock.advance(10)
    assert member.commit_request({P0: 4}, {}) is None, "not held"


def test_a_refused_heartbeat_stops_the_member_until_the_app_polls_again() -> None:
    """Refused for good (another principal's instance, a missing ACL): the
    member lets go and sends nothing more (no retry storm, no leave that
    would be refused too); the refusal is told once; the next poll joins again."""
    clock = FakeClock()
    member = _joined(clock)
    member.take_changes()
    clock.advance(1)
    request = member.next_request()
    assert request is not None
    refusal = PermissionError("not yours")
    member.on_heartbeat_refused(request, refusal)
    assert member.assignment == frozenset() and not member.holds(P0)
    assert [c.kind for c in member.take_changes()] == [LOST]
    clock.advance(60)
    assert member.next_request() is None, "nothing sent after a refusal"
    assert member.take_refusal() is refusal and member.take_refusal() is None
    assert member.close() is None, "no leave"
    again = MemberCore(clock, "g", ["t"])
    first = again.next_request()
    assert first is not None
    again.on_heartbeat_refused(first, refusal)
    again.poll_started()
    retry = again.next_request()
    assert retry is not None and retry.member_epoch == JOIN, "the next poll joins again"
