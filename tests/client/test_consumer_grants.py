"""A partition lost and given back to the same consumer is a new holding
(`laminar.groups.member`: one grant per holding). Meanwhile another member
may have read it and committed past what this one read: what this consumer
read before is neither delivered nor committed after, and it starts again at
the group's committed position. Without this, a record is processed twice
under acknowledged commits (seen on a loaded machine in
tests/system/test_node_consumers.py)."""

from __future__ import annotations

import pytest

from laminar.client.consumer import CommitFailedError
from laminar.groups.errors import GroupError
from tests.client.consumer_fakes import P0, TOPIC, Member, Shell, fake_calls

pytestmark = pytest.mark.usefixtures(fake_calls.__name__)

SESSION_S = 10.0


def _lost_and_given_back(m: Member, *, others_commit: int) -> None:
    """The lease lapses (the coordinator gives P0 to another member, which
    reads it and commits `others_commit`), then P0 comes back to `m`."""
    m.shell.clock.advance(SESSION_S)
    m.shell.positions[P0] = others_commit
    m.assign(P0)


@pytest.mark.parametrize("prefetch", [2, 0])
def test_a_batch_read_before_the_partition_came_back_is_not_committed(prefetch: int) -> None:
    m = Member(Shell({P0: 1000}), prefetch=prefetch)
    m.assign(P0)
    assert [r.index for r in m.poll()] == list(range(100))
    _lost_and_given_back(m, others_commit=60)  # the other member read 0..59 too
    with pytest.raises(CommitFailedError) as refused:
        m.commit()
    assert refused.value.refused == {P0: GroupError.FENCED}
    assert m.shell.commits == [], "nothing sent for what the old holding read"
    assert [r.index for r in m.poll()] == list(range(60, 160)), "from the group's position"


@pytest.mark.parametrize("prefetch", [2, 0])
def test_a_fetch_answered_after_the_partition_came_back_is_not_delivered(prefetch: int) -> None:
    shell = Shell({P0: 1000})
    m = Member(shell, prefetch=prefetch)
    m.assign(P0)
    m.poll()
    m.commit()  # 100
    shell.while_fetching = lambda: _lost_and_given_back(m, others_commit=150)
    got = m.poll()  # its fetch from 100 is answered after P0 came back
    assert not any(100 <= r.index < 150 for r in got), "read and committed by the other member"
    while not got:
        got = m.poll()
    assert got[0].index == 150
    delivered = [i for t, p, i in m.delivered if (t, p) == (TOPIC, 0)]
    assert delivered == list(range(100)) + list(range(150, 150 + len(got)))


def test_an_unwaited_commit_kept_behind_one_in_flight_dies_with_its_grant() -> None:
    """Kept (not yet sent) when P0 was lost; once P0 comes back, what was read
    under the old grant is not sent under the new one."""
    shell = Shell({P0: 1000})
    m = Member(shell)
    m.assign(P0)
    m.poll()
    shell.commits_answer_later = True
    m.commit(wait=False)  # 0..99: sent, unanswered
    m.poll()
    m.commit(wait=False)  # 100..199: kept
    assert shell.commits == [{P0: 100}] and m.core.commits_kept == 1
    shell.answer_commits()
    _lost_and_given_back(m, others_commit=1000)  # the other member read it all
    assert m.poll() == []  # the loss and the new grant taken: nothing left to read
    m.commit()
    assert shell.commits == [{P0: 100}], "what the old grant read, not sent under the new"
