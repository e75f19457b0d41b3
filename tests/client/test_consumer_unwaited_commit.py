"""Unwaited commits of the group consumer (`commit(wait=False)`), driven
without a node by the fake shell of `tests.client.consumer_fakes`. The rules:
one in flight at most, so commits land in the order made; those made while
it is unanswered (or within `commit_interval_s` of it) are kept, merged,
and leave with the next commit or poll (or are
committed by a waited commit, before a revocation's release, at the leave);
its refusal is raised by the next commit; a revocation takes its answer
before releasing the partitions; leaving takes it too, and only logs a
refusal."""

from __future__ import annotations

import pytest

from laminar.client.consumer import CommitFailedError
from laminar.groups.errors import GroupError
from tests.client.consumer_fakes import P0, P1, Member, Shell, fake_calls

pytestmark = pytest.mark.usefixtures(fake_calls.__name__)


def _in_flight(shell: Shell) -> int:
    return sum(h.fate == "in flight" for h in shell.commit_handles)


def test_commits_land_in_order_one_in_flight_and_each_names_what_poll_returned() -> None:
    shell = Shell({P0: 250, P1: 250})
    member = Member(shell, max_records=100)
    member.assign(P0, P1)
    seen = []
    while len(member.delivered) < 500:
        member.poll()
        member.commit(wait=False)
        assert _in_flight(shell) == 1
        seen.append(dict(member.core._delivered))
    member.commit()  # waited: takes the last answer, then commits (the same) again
    assert _in_flight(shell) == 0
    assert [h.fate for h in shell.commit_handles] == ["joined"] * len(seen)
    # In the order made, each after what poll returned:
    assert shell.commits == [*seen, {P0: 250, P1: 250}]


def test_a_refused_unwaited_commit_is_raised_by_the_next_commit() -> None:
    shell = Shell({P0: 50})
    member = Member(shell)
    member.assign(P0)
    member.poll()
    shell.fence_commits = True
    member.commit(wait=False)  # sent; refused, but nobody has looked yet
    shell.fence_commits = False
    with pytest.raises(CommitFailedError) as raised:
        member.commit(wait=False)
    assert raised.value.refused == {P0: GroupError.FENCED}


def test_a_revocation_takes_the_unwaited_answer_before_releasing() -> None:
    """The next owner of a released partition must find what this member
    committed: the answer comes before the release."""
    shell = Shell({P0: 50, P1: 50})
    member = Member(shell)
    member.assign(P0, P1)
    member.poll()
    member.commit(wait=False)
    released = []
    release = member.core.member.release

    def watched(parts: frozenset[tuple[str, int]]) -> None:
        released.append([h.fate for h in shell.commit_handles])
        release(parts)

    member.core.member.release = watched  # type: ignore[method-assign]
    member.assign(P1)  # P0 revoked
    member.poll()
    assert released == [["joined"]]


def test_leaving_takes_the_unwaited_answer_and_logs_a_refusal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    shell = Shell({P0: 50})
    member = Member(shell)
    member.assign(P0)
    member.poll()
    shell.fence_commits = True
    member.commit(wait=False)
    member.leave()
    assert [h.fate for h in shell.commit_handles] == ["joined"]
    assert "the last unwaited commit failed" in caplog.text


def _kept_behind_one_in_flight(shell: Shell, member: Member) -> list[dict[tuple[str, int], int]]:
    """Three polls, each committed unwaited while the first commit stays
    unanswered: the first is sent, the next two kept. What poll had returned
    after each."""
    shell.commits_answer_later = True
    seen = []
    for _ in range(3):
        member.poll()
        member.commit(wait=False)
        seen.append(dict(member.core._delivered))
    assert len(shell.commit_handles) == 1 and member.core.commits_kept == 2
    return seen


def test_commits_made_while_one_is_unanswered_are_kept_and_leave_merged_with_the_next() -> None:
    shell = Shell({P0: 1000, P1: 1000})
    member = Member(shell, max_records=100)
    member.assign(P0, P1)
    seen = _kept_behind_one_in_flight(shell, member)
    shell.answer_commits()
    member.commit(wait=False)  # the first one's answer is in: sent, with what was kept
    assert shell.commits == [seen[0], {**seen[2], **member.core._delivered}]
    assert [h.fate for h in shell.commit_handles] == ["joined", "in flight"]


def test_a_poll_sends_what_was_kept_once_the_answer_is_in() -> None:
    """An app that commits no more still gets its kept positions committed."""
    shell = Shell({P0: 1000, P1: 1000})
    member = Member(shell, max_records=100)
    member.assign(P0, P1)
    seen = _kept_behind_one_in_flight(shell, member)
    member.poll()  # the first one is still unanswered: nothing sent
    assert shell.commits == [seen[0]]
    shell.answer_commits()
    member.poll()
    assert shell.commits == [seen[0], seen[2]]
    assert [h.fate for h in shell.commit_handles] == ["joined", "in flight"]


def test_a_refusal_a_poll_took_is_raised_by_the_next_commit() -> None:
    shell = Shell({P0: 1000})
    member = Member(shell, max_records=100)
    member.assign(P0)
    shell.refuse_commits = GroupError.POSITION_BEYOND_END
    _kept_behind_one_in_flight(shell, member)  # the first sent (refused), two kept
    shell.refuse_commits = None
    shell.answer_commits()
    member.poll()  # takes the refusal: not raised here, and sends nothing after it
    assert len(shell.commits) == 1
    with pytest.raises(CommitFailedError) as raised:
        member.commit(wait=False)
    assert raised.value.refused == {P0: GroupError.POSITION_BEYOND_END}
    member.commit(wait=False)  # told: what was kept goes now
    assert shell.commits[1:] == [dict(member.core._delivered)]


def test_unwaited_commits_leave_at_most_once_per_interval_and_a_poll_sends_what_waits() -> None:
    """Within `commit_interval_s` of the last unwaited commit sent, later ones
    are kept though its answer is in; once the interval is over the next
    poll (or commit) sends them merged."""
    shell = Shell({P0: 1000})
    member = Member(shell, max_records=100, commit_interval_s=0.005)
    member.assign(P0)
    member.poll()
    member.commit(wait=False)  # sent
    for _ in range(3):
        member.poll()
        member.commit(wait=False)  # answered, but within the interval: kept
    assert len(shell.commits) == 1 and member.core.commits_kept == 3
    kept = dict(member.core._kept)
    shell.clock.advance(0.01)
    member.poll()  # the interval is over: the poll sends what waits
    assert shell.commits[1:] == [kept]
    shell.clock.advance(0.01)
    member.commit(wait=False)  # over again: sent at once
    assert shell.commits[2:] == [dict(member.core._delivered)]


@pytest.mark.parametrize("then", ["waited commit", "revocation", "leave"])
def test_what_was_kept_is_committed_by_a_waited_commit_a_revocation_and_a_leave(
    then: str,
) -> None:
    shell = Shell({P0: 1000, P1: 1000})
    member = Member(shell, max_records=100)
    member.assign(P0, P1)
    seen = _kept_behind_one_in_flight(shell, member)
    if then == "waited commit":
        shell.run(member.core.commit_plan({P1: 999}))
        assert shell.commits[-1] == {**seen[2], P1: 999}
    elif then == "revocation":
        released = []
        release = member.core.member.release

        def watched(parts: frozenset[tuple[str, int]]) -> None:
            released.append(list(shell.commits))
            release(parts)

        member.core.member.release = watched  # type: ignore[method-assign]
        member.assign(P1)  # P0 revoked
        member.poll()
        assert released == [[seen[0], seen[2]]], "kept positions committed before the release"
    else:
        member.leave()
        assert shell.commits == [seen[0], seen[2]]
    assert [h.fate for h in shell.commit_handles] == ["joined"]
