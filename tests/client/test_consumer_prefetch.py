"""The group consumer's prefetch (`laminar.client.consumer`), driven without a
node: the core's plans run against an in-memory log by a fake shell that
answers `Start`/`Join`/`Drop` and records what became of every fetch started
ahead. The rules: a batch fetched ahead reaches the app only while its
partition is delivered and read from where the fetch asked; commits name what
poll returned; one batch ahead per partition at most; failures and fencing
end as they do without prefetch."""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, NamedTuple

import pytest

from laminar.client import consumer as consumer_module
from laminar.client.consumer import CommitFailedError, ConsumedRecord, ConsumerCore
from laminar.client.core import Drop, Join, Plan, Sleep, Start
from laminar.client.errors import LaminarError, OffsetOutOfRangeError, RequestTimeoutError
from laminar.client.results import Record
from laminar.groups.errors import GroupError
from laminar.groups.frames import CommitAnswerFrame, PositionsAnswerFrame
from laminar.groups.messages import CommitAnswer, HeartbeatAnswer, PositionsAnswer
from tests.support.clock import FakeClock

TOPIC = "t"
P0, P1 = (TOPIC, 0), (TOPIC, 1)
Identity = tuple[str, int, int]


class _Fetch(NamedTuple):
    """What `calls.fetch` makes in these tests: the request itself."""

    topic: str
    partition: int
    index: int
    max_records: int
    wait_ms: int


class _Offsets(NamedTuple):
    topic: str
    partition: int


@dataclass
class _Handle:
    """A fetch started ahead, as the fake shell keeps it."""

    fetch: _Fetch
    fate: str = "in flight"  # then "joined" or "dropped"
    lost: bool = False
    """Its answer was lost on the way (the leader went away meanwhile)."""


@dataclass
class _Shell:
    """Performs the consumer's plans on an in-memory log (each partition holds
    records 0 .. length-1 from `lowest` on) and a coordinator that commits."""

    lengths: dict[tuple[str, int], int]
    clock: FakeClock = field(default_factory=FakeClock)
    lowest: dict[tuple[str, int], int] = field(default_factory=dict)
    fence_commits: bool = False
    unreachable: bool = False
    """Every fetch fails (its leader is away) while set."""
    handles: list[_Handle] = field(default_factory=list)
    commits: list[dict[tuple[str, int], int]] = field(default_factory=list)
    ahead_seen_max: dict[tuple[str, int], int] = field(default_factory=dict)
    fetch_s: float = 0.0
    """How long every fetch's answer takes from now on."""

    def go_away(self) -> None:
        """The partitions' leader goes away: fetches in flight are lost too."""
        self.unreachable = True
        for h in self.handles:
            h.lost = h.lost or h.fate == "in flight"

    def fetch(self, ask: _Fetch) -> list[Record]:
        self.clock.advance(self.fetch_s)
        if self.unreachable:
            raise RequestTimeoutError("the partition's leader is away")
        tp = (ask.topic, ask.partition)
        if ask.index < self.lowest.get(tp, 0):
            raise OffsetOutOfRangeError("before the partition's start")
        end = min(self.lengths[tp], ask.index + ask.max_records)
        return [Record(i, 0, b"%d" % i, None, None) for i in range(ask.index, end)]

    def call(self, ask: Any) -> Any:
        if isinstance(ask, _Fetch):
            return self.fetch(ask)
        tp = (ask.topic, ask.partition)
        return SimpleNamespace(
            lowest_index=self.lowest.get(tp, 0), committed_index=self.lengths[tp]
        )

    def group(self, message: Any, answer: type) -> Any:
        if answer is PositionsAnswerFrame:
            return PositionsAnswer(GroupError.NONE, 0, {})
        assert answer is CommitAnswerFrame
        request = message(0).body
        self.commits.append(dict(request.positions))
        code = GroupError.FENCED if self.fence_commits else GroupError.NONE
        return CommitAnswer(GroupError.NONE, 0, dict.fromkeys(request.positions, code))

    def run(self, plan: Plan[Any]) -> Any:
        value: Any = None
        step: Callable[[Any], Any] = plan.send
        while True:
            try:
                action = step(value)
            except StopIteration as stop:
                return stop.value
            step, value = plan.send, None
            try:
                value = self._perform(action)
            except LaminarError as exc:
                step, value = plan.throw, exc
            self._count_ahead()

    def _perform(self, action: Any) -> Any:
        if isinstance(action, tuple) and action[:1] == ("call",):
            return self.call(action[1])
        if isinstance(action, tuple) and action[:1] == ("group",):
            return self.group(action[1], action[2])
        if type(action) is Start:
            handle = _Handle(action.call)
            self.handles.append(handle)
            return handle
        if type(action) is Join:
            assert action.handle.fate == "in flight", "a fetch ahead joined twice or after a drop"
            action.handle.fate = "joined"
            if action.handle.lost:
                raise RequestTimeoutError("the fetch's answer was lost")
            return self.fetch(action.handle.fetch)
        if type(action) is Drop:
            assert action.handle.fate == "in flight"
            action.handle.fate = "dropped"
            return None
        if type(action) is Sleep:
            self.clock.advance(action.delay_s)
            return None
        raise AssertionError(f"unexpected action {action!r}")

    def _count_ahead(self) -> None:
        per: dict[tuple[str, int], int] = {}
        for h in self.handles:
            if h.fate == "in flight":
                tp = (h.fetch.topic, h.fetch.partition)
                per[tp] = per.get(tp, 0) + 1
        for tp, n in per.items():
            self.ahead_seen_max[tp] = max(self.ahead_seen_max.get(tp, 0), n)

    def fates(self, tp: tuple[str, int]) -> list[str]:
        return [h.fate for h in self.handles if (h.fetch.topic, h.fetch.partition) == tp]


class _FakeClient:
    """What the core asks of a client: calls as plans (answered by `_Shell`)."""

    _view = None

    def _call_plan(self, ask: Any) -> Generator[Any, Any, Any]:
        return (yield ("call", ask))

    def _note_leader(self, error: LaminarError) -> None:
        pass


class _Core(ConsumerCore):
    def _group_plan(self, message: Any, answer: type) -> Plan[Any]:
        return (yield ("group", message, answer))  # type: ignore[misc]


@pytest.fixture(autouse=True)
def _fake_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        consumer_module.calls,
        "fetch",
        lambda t, p, i, _max_bytes, n, wait: _Fetch(t, p, i, n, wait),
    )
    monkeypatch.setattr(consumer_module.calls, "list_offsets", lambda t, p, *a, **k: _Offsets(t, p))


def _answer(assignment: set[tuple[str, int]], revision: int) -> HeartbeatAnswer:
    return HeartbeatAnswer(GroupError.NONE, 0, "m1", 1, revision, frozenset(assignment), 1.0)


class _Member:
    """A consumer core, its shell, and the coordinator's word on its assignment."""

    def __init__(self, shell: _Shell, *, prefetch: int = 2, max_records: int = 100) -> None:
        self.shell = shell
        self.core = _Core(
            _FakeClient(),  # type: ignore[arg-type]
            "g",
            [TOPIC],
            max_records=max_records,
            prefetch=prefetch,
            clock=shell.clock,
        )
        self.revision = 0
        self.delivered: list[Identity] = []

    def assign(self, *parts: tuple[str, int]) -> None:
        """The coordinator's heartbeat answer: the member holds `parts` now."""
        self.shell.clock.advance(2.0)
        request = self.core.member.next_request()
        assert request is not None
        self.revision += 1
        self.core.member.on_heartbeat_answer(request, _answer(set(parts), self.revision))

    def poll(self) -> list[ConsumedRecord]:
        got: list[ConsumedRecord] = self.shell.run(self.core.poll_plan(0.0))
        self.delivered += [(r.topic, r.partition, r.index) for r in got]
        return got

    def commit(self) -> None:
        self.shell.run(self.core.commit_plan(None))


def _all(lengths: dict[tuple[str, int], int], start: int = 0) -> list[Identity]:
    return [(t, p, i) for (t, p), n in sorted(lengths.items()) for i in range(start, n)]


@pytest.mark.parametrize("prefetch", [2, 1, 0])
def test_every_record_is_delivered_once_in_order_and_commits_name_what_poll_returned(
    prefetch: int,
) -> None:
    lengths = {P0: 450, P1: 330}
    m = _Member(_Shell(lengths), prefetch=prefetch)
    m.assign(P0, P1)
    returned: dict[tuple[str, int], int] = {}
    for _ in range(20):
        got = m.poll()
        if got:
            m.commit()
            returned.update({(r.topic, r.partition): r.index + 1 for r in got})
            assert m.shell.commits[-1] == returned, "after what poll returned, nothing more"
    assert sorted(m.delivered) == _all(lengths)
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
    m = _Member(_Shell(lengths), prefetch=prefetch, max_records=50)
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
    m = _Member(_Shell({P0: 1000, P1: 1000}))
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
    m = _Member(_Shell(lengths))
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
    assert sorted(m.delivered) == _all(lengths)
    assert len(set(m.delivered)) == len(m.delivered)


def test_a_seek_drops_the_batch_fetched_ahead_from_the_old_position() -> None:
    m = _Member(_Shell({P0: 1000}))
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
    shell = _Shell({P0: 1000})
    m = _Member(shell)
    m.assign(P0)
    m.poll()  # 0..99, and a fetch ahead from 100
    shell.lowest[P0] = 500  # retention removed 0..499 meanwhile
    got = m.poll() or m.poll()
    assert [r.index for r in got] == list(range(500, 600))
    assert not any(100 <= i < 500 for _, _, i in m.delivered)
    assert m.core.prefetch_stats.failed == 1


@pytest.mark.parametrize("prefetch", [2, 0])
def test_a_batch_that_comes_after_the_lease_ran_out_is_not_delivered(prefetch: int) -> None:
    shell = _Shell({P0: 1000})
    m = _Member(shell, prefetch=prefetch)
    m.assign(P0)
    m.poll()
    shell.fetch_s = 11.0  # the answer comes after the session (10 s from the heartbeat)
    assert m.poll() == []
    assert m.delivered == [(TOPIC, 0, i) for i in range(100)]


def _script(prefetch: int, steps: list[str]) -> tuple[list[Identity], list[str]]:
    """The same app run with and without prefetch: what it got, what it saw."""
    shell = _Shell({P0: 600, P1: 600})
    m = _Member(shell, prefetch=prefetch)
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
    m = _Member(_Shell({P0: 1000, P1: 1000}))
    m.assign(P0, P1)
    m.poll()
    assert m.core.prefetch_stats.ahead == 2
    m.shell.run(m.core.leave_plan())
    assert [h.fate for h in m.shell.handles] == ["dropped", "dropped"]
    assert m.core.prefetch_stats.ahead == 0
