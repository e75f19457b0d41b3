"""Unwaited commits of the group consumer (`commit(wait=False)`), driven
without a node by the fake shell of `tests.client.consumer_fakes`. The rules:
one in flight at most, so commits land in the order made; its refusal is
raised by the next commit; a revocation takes its answer before releasing
the partitions; leaving takes it too, and only logs a refusal."""

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
