"""The group consumer's prefetch (`laminar.client.consumer`), driven without a
node: the core's plans run against an in-memory log by a fake shell that
answers `Start`/`Join`/`Drop` and records what became of every fetch started
ahead. The rules: a batch fetched ahead reaches the app only while its
partition is delivered and read from where the fetch asked; commits name what
poll returned; one batch ahead per partition at most; failures and fencing
end as they do without prefetch."""

from __future__ import annotations

import pytest

from laminar.client.consumer import CommitFailedError
from laminar.client.errors import LaminarError
from tests.client.consumer_fakes import (
    P0,
    P1,
    TOPIC,
    Identity,
    Member,
    Shell,
    all_identities,
    fake_calls,
)

pytestmark = pytest.mark.usefixtures(fake_calls.__name__)


@pytest.mark.parametrize("prefetch", [2, 1, 0])
def test_every_record_is_delivered_once_in_order_and_commits_name_what_poll_returned(
    prefetch: int,
) -> None:
    lengths = {P0: 450, P1: 330}
    m = Member(Shell(lengths), prefetch=prefetch)
    m.assign(P0, P1)
    returned: dict[tuple[str, int], int] = {}
    for _ in range(20):
        got = m.poll()
        if got:
            m.commit()
            returned.update({(r.topic, r.partition): r.index + 1 for r in got})
            assert m.shell.commits[-1] == returned, "after what poll returned, nothing more"
    assert sorted(m.delivered) == all_identities(lengths)
    assert len(set(m.delivered)) == len(m.delivered)
    for tp in (P0, P1):
        mine = [i for t, p, i in m.delivered if (t, p) == tp]
        assert mine == sorted(mine)
    stats = m.core.prefetch_stats
    if prefetch:
        assert stats.used > 0 and m.shell.fates(P0).count("joined") > 0
    else:
        assert m.shell.handles == [] and stats.started == 0


@pytest.mark.parametrize("prefetch", [1, 2, 3, 5])
def test_at_most_prefetch_batches_are_ahead_one_per_partition_and_the_count_says_so(
    prefetch: int,
) -> None:
    lengths = {P0: 1000, P1: 1000, (TOPIC, 2): 1000}
    m = Member(Shell(lengths), prefetch=prefetch, max_records=50)
    m.assign(*lengths)
    for _ in range(30):
        m.poll()
        m.commit()
        stats = m.core.prefetch_stats
        in_flight = sum(1 for h in m.shell.handles if h.fate == "in flight")
        assert stats.ahead == in_flight <= prefetch
    assert max(m.shell.ahead_seen_max.values()) == 1
    assert m.core.prefetch_stats.ahead_max == min(prefetch, len(lengths))
    assert m.core.prefetch_stats.used >= 29, "the next poll's partition is the one ahead"


def test_a_revoked_partition_s_batch_fetched_ahead_is_dropped_never_delivered() -> None:
    m = Member(Shell({P0: 1000, P1: 1000}))
    m.assign(P0, P1)
    m.poll()
    m.poll()
    assert "in flight" in m.shell.fates(P1), "P1 has a batch ahead"
    before = [i for t, p, i in m.delivered if (t, p) == P1]
    m.commit()
    m.assign(P0)  # P1 revoked: it moves to another member
    for _ in range(5):
        m.poll()
    assert [i for t, p, i in m.delivered if (t, p) == P1] == before
    assert m.shell.fates(P1)[-1] == "dropped"
    assert "in flight" not in m.shell.fates(P1)
    assert m.core.prefetch_stats.dropped >= 1


def test_a_paused_partition_s_batch_ahead_is_dropped_and_resume_goes_on_without_a_gap() -> None:
    lengths = {P0: 400, P1: 400}
    m = Member(Shell(lengths))
    m.assign(P0, P1)
    m.poll()
    m.poll()
    assert m.shell.fates(P1)[-1] == "in flight"
    m.core.pause([P1])
    paused_at = len([1 for t, p, _ in m.delivered if (t, p) == P1])
    for _ in range(3):
        m.poll()
    assert len([1 for t, p, _ in m.delivered if (t, p) == P1]) == paused_at
    assert m.shell.fates(P1)[-1] == "dropped"
    m.core.resume([P1])
    for _ in range(20):
        m.poll()
    assert sorted(m.delivered) == all_identities(lengths)
    assert len(set(m.delivered)) == len(m.delivered)


def test_a_seek_drops_the_batch_fetched_ahead_from_the_old_position() -> None:
    m = Member(Shell({P0: 1000}))
    m.assign(P0)
    m.poll()
    assert m.shell.fates(P0) == ["in flight"]
    m.core.seek(P0, 700)
    got = m.poll()
    assert [r.index for r in got] == list(range(700, 800))
    assert m.shell.fates(P0)[0] == "dropped"
    m.commit()
    assert m.shell.commits[-1] == {P0: 800}


def test_a_fetch_ahead_that_meets_retention_is_made_again_and_the_position_moves() -> None:
    shell = Shell({P0: 1000})
    m = Member(shell)
    m.assign(P0)
    m.poll()  # 0..99, and a fetch ahead from 100
    shell.lowest[P0] = 500  # retention removed 0..499 meanwhile
    got = m.poll() or m.poll()
    assert [r.index for r in got] == list(range(500, 600))
    assert not any(100 <= i < 500 for _, _, i in m.delivered)
    assert m.core.prefetch_stats.failed == 1


@pytest.mark.parametrize("prefetch", [2, 0])
def test_a_batch_that_comes_after_the_lease_ran_out_is_not_delivered(prefetch: int) -> None:
    shell = Shell({P0: 1000})
    m = Member(shell, prefetch=prefetch)
    m.assign(P0)
    m.poll()
    shell.fetch_s = 11.0  # the answer comes after the session (10 s from the heartbeat)
    assert m.poll() == []
    assert m.delivered == [(TOPIC, 0, i) for i in range(100)]


def _script(prefetch: int, steps: list[str]) -> tuple[list[Identity], list[str]]:
    """The same app run with and without prefetch: what it got, what it saw."""
    shell = Shell({P0: 600, P1: 600})
    m = Member(shell, prefetch=prefetch)
    m.assign(P0, P1)
    seen: list[str] = []
    for step in steps:
        try:
            if step == "poll":
                m.poll()
            elif step == "commit":
                m.commit()
            elif step == "fence":
                shell.fence_commits = True
            elif step == "rejoin":
                shell.fence_commits = False
                m.assign(P1)
            elif step == "away":
                shell.go_away()
            elif step == "back":
                shell.unreachable = False
            seen.append("ok")
        except CommitFailedError as exc:
            seen.append("commit refused: " + ",".join(c.name for c in exc.refused.values()))
        except LaminarError as exc:
            seen.append(type(exc).__name__)
    return m.delivered, seen


@pytest.mark.parametrize(
    "steps",
    [
        # a fenced commit: the member lost everything; nothing ahead is delivered after it
        ["poll", "commit", "poll", "fence", "commit", "poll", "poll", "rejoin", "poll", "poll"],
        # the leader goes away while the app works and comes back before the next poll
        ["poll", "commit", "away", "commit", "back", "poll", "poll", "commit", "poll"],
        # the leader is away at the poll too: the poll fails as it would without prefetch
        ["poll", "away", "poll", "poll", "back", "poll", "poll"],
    ],
    ids=["fenced", "leader-away-and-back", "leader-away-at-poll"],
)
def test_fencing_and_failed_fetches_end_as_they_do_without_prefetch(steps: list[str]) -> None:
    assert _script(2, steps) == _script(0, steps)


def test_leaving_drops_every_batch_ahead() -> None:
    m = Member(Shell({P0: 1000, P1: 1000}))
    m.assign(P0, P1)
    m.poll()
    assert m.core.prefetch_stats.ahead == 2
    m.shell.run(m.core.leave_plan())
    assert [h.fate for h in m.shell.handles] == ["dropped", "dropped"]
    assert m.core.prefetch_stats.ahead == 0
