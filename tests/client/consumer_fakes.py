"""A fake shell for the group consumer's core (`laminar.client.consumer`): the
core's plans run against an in-memory log and a coordinator that commits,
answering `Start`/`Join`/`Drop` and recording what became of every call
started (fetches ahead, unwaited commits)."""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, NamedTuple

import pytest

from laminar.client import consumer as consumer_module
from laminar.client.consumer import ConsumedRecord, ConsumerCore
from laminar.client.core import Drop, Join, Plan, Ready, Sleep, Start
from laminar.client.errors import LaminarError, OffsetOutOfRangeError, RequestTimeoutError
from laminar.groups.errors import GroupError
from laminar.groups.frames import CommitAnswerFrame, PositionsAnswerFrame
from laminar.groups.messages import CommitAnswer, HeartbeatAnswer, Position, PositionsAnswer
from tests.support.clock import FakeClock

TOPIC = "t"
P0, P1 = (TOPIC, 0), (TOPIC, 1)
Identity = tuple[str, int, int]


class Fetch(NamedTuple):
    """What `calls.fetch` makes in these tests: the request itself."""

    topic: str
    partition: int
    index: int
    max_records: int
    wait_ms: int


class Offsets(NamedTuple):
    topic: str
    partition: int


class GroupAsk(NamedTuple):
    """What `ConsumerCore._group_call` makes in these tests: an unwaited commit."""

    message: Any
    answer: type


@dataclass
class Handle:
    """A fetch started ahead, as the fake shell keeps it."""

    fetch: Fetch
    fate: str = "in flight"  # then "joined" or "dropped"
    lost: bool = False
    """Its answer was lost on the way (the leader went away meanwhile)."""


@dataclass
class CommitHandle:
    """An unwaited commit: applied when sent, its answer kept for the `Join`."""

    answer: CommitAnswer
    fate: str = "in flight"
    answered: bool = True
    """Whether its answer has come (`Ready`); `Join` takes it either way."""


@dataclass
class Shell:
    """Performs the consumer's plans on an in-memory log (each partition holds
    records 0 .. length-1 from `lowest` on) and a coordinator that commits."""

    lengths: dict[tuple[str, int], int]
    clock: FakeClock = field(default_factory=FakeClock)
    lowest: dict[tuple[str, int], int] = field(default_factory=dict)
    fence_commits: bool = False
    refuse_commits: GroupError | None = None
    """Commits sent from now on are refused with this code per partition
    (one that does not fence the member, unlike `fence_commits`)."""
    unreachable: bool = False
    """Every fetch fails (its leader is away) while set."""
    handles: list[Handle] = field(default_factory=list)
    commit_handles: list[CommitHandle] = field(default_factory=list)
    commits: list[dict[tuple[str, int], int]] = field(default_factory=list)
    ahead_seen_max: dict[tuple[str, int], int] = field(default_factory=dict)
    fetch_s: float = 0.0
    """How long every fetch's answer takes from now on."""
    commits_answer_later: bool = False
    """Unwaited commits sent from now on are unanswered (`Ready` says no)
    until `answer_commits()`."""
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    """The group's committed positions, as a positions query answers them."""
    while_fetching: Callable[[], None] | None = None
    """Runs once, inside the next fetch (what the heartbeat thread does meanwhile)."""

    def answer_commits(self) -> None:
        for handle in self.commit_handles:
            handle.answered = True

    def go_away(self) -> None:
        """The partitions' leader goes away: fetches in flight are lost too."""
        self.unreachable = True
        for h in self.handles:
            h.lost = h.lost or h.fate == "in flight"

    def fetch(self, ask: Fetch) -> list[ConsumedRecord]:
        self.clock.advance(self.fetch_s)
        meanwhile, self.while_fetching = self.while_fetching, None
        if meanwhile is not None:
            meanwhile()
        if self.unreachable:
            raise RequestTimeoutError("the partition's leader is away")
        tp = (ask.topic, ask.partition)
        if ask.index < self.lowest.get(tp, 0):
            raise OffsetOutOfRangeError("before the partition's start")
        end = min(self.lengths[tp], ask.index + ask.max_records)
        return [ConsumedRecord(*tp, i, 0, b"%d" % i, None, None) for i in range(ask.index, end)]

    def call(self, ask: Any) -> Any:
        if isinstance(ask, Fetch):
            return self.fetch(ask)
        tp = (ask.topic, ask.partition)
        return SimpleNamespace(
            lowest_index=self.lowest.get(tp, 0), committed_index=self.lengths[tp]
        )

    def group(self, message: Any, answer: type) -> Any:
        if answer is PositionsAnswerFrame:
            committed = {tp: Position(i, "other", 1, 0) for tp, i in self.positions.items()}
            return PositionsAnswer(GroupError.NONE, 0, committed)
        assert answer is CommitAnswerFrame
        request = message(0).body
        self.commits.append(dict(request.positions))
        code = GroupError.FENCED if self.fence_commits else GroupError.NONE
        code = self.refuse_commits or code
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
        if type(action) is Start and isinstance(action.call, GroupAsk):
            answer = self.group(action.call.message, action.call.answer)
            commit = CommitHandle(answer, answered=not self.commits_answer_later)
            self.commit_handles.append(commit)
            return commit
        if type(action) is Start:
            handle = Handle(action.call)
            self.handles.append(handle)
            return handle
        if type(action) is Join and type(action.handle) is CommitHandle:
            assert action.handle.fate == "in flight", "an unwaited commit joined twice"
            action.handle.fate = "joined"
            return action.handle.answer
        if type(action) is Join:
            assert action.handle.fate == "in flight", "a fetch ahead joined twice or after a drop"
            action.handle.fate = "joined"
            if action.handle.lost:
                raise RequestTimeoutError("the fetch's answer was lost")
            return self.fetch(action.handle.fetch)
        if type(action) is Ready:
            assert action.handle.fate == "in flight", "asked after its answer was taken"
            return action.handle.answered
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


class FakeClient:
    """What the core asks of a client: calls as plans (answered by `Shell`)."""

    _view = None

    def _call_plan(self, ask: Any) -> Generator[Any, Any, Any]:
        return (yield ("call", ask))

    def _note_leader(self, error: LaminarError) -> None:
        pass


class Core(ConsumerCore):
    def _group_plan(self, message: Any, answer: type) -> Plan[Any]:
        return (yield ("group", message, answer))  # type: ignore[misc]

    def _group_call(self, pid: int, message: Any, answer: type) -> Any:
        return GroupAsk(message, answer)

    def _coordinator_plan(self) -> Plan[int]:
        return 0
        yield  # a plan that asks nothing


@pytest.fixture
def fake_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        consumer_module.calls,
        "fetch_parsed",
        lambda t, p, i, _max_bytes, n, wait, _parse: Fetch(t, p, i, n, wait),
    )
    monkeypatch.setattr(consumer_module.calls, "list_offsets", lambda t, p, *a, **k: Offsets(t, p))


def heartbeat_answer(assignment: set[tuple[str, int]], revision: int) -> HeartbeatAnswer:
    return HeartbeatAnswer(GroupError.NONE, 0, "m1", 1, revision, frozenset(assignment), 1.0)


class Member:
    """A consumer core, its shell, and the coordinator's word on its assignment."""

    def __init__(
        self,
        shell: Shell,
        *,
        prefetch: int = 2,
        max_records: int = 100,
        commit_interval_s: float = 0.0,
    ) -> None:
        """No interval between unwaited commits unless asked (the shell's clock
        moves only when told)."""
        self.shell = shell
        self.core = Core(
            FakeClient(),  # type: ignore[arg-type]
            "g",
            [TOPIC],
            max_records=max_records,
            prefetch=prefetch,
            commit_interval_s=commit_interval_s,
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
        self.core.member.on_heartbeat_answer(request, heartbeat_answer(set(parts), self.revision))

    def poll(self) -> list[ConsumedRecord]:
        got: list[ConsumedRecord] = self.shell.run(self.core.poll_plan(0.0))
        self.delivered += [(r.topic, r.partition, r.index) for r in got]
        return got

    def commit(self, *, wait: bool = True) -> None:
        self.shell.run(self.core.commit_plan(None, wait=wait))

    def leave(self) -> None:
        self.shell.run(self.core.leave_plan())


def all_identities(lengths: dict[tuple[str, int], int], start: int = 0) -> list[Identity]:
    return [(t, p, i) for (t, p), n in sorted(lengths.items()) for i in range(start, n)]
