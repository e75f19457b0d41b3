"""A member process: a member core driven by an app that consumes and commits.

The app reads from the committed position when given a partition, moves on
a few records per step, commits now and then, commits its last position when
a partition is revoked and releases it a little later. The process can be
alive, paused (SIGSTOP: nothing runs, messages wait in its socket), stalled
(the app is stuck processing: heartbeats go on, polls do not), crashed
(silent for ever) or gone (left gracefully).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from laminar.groups.member import ASSIGNED, LOST, REVOKED, MemberCore
from laminar.groups.messages import CommitRequest, HeartbeatRequest, Position, TopicPartition

ALIVE, PAUSED, CRASHED, GONE = "alive", "paused", "crashed", "gone"


class SimMember:
    def __init__(
        self,
        name: str,
        clock: Any,
        rng: random.Random,
        group: str,
        topics: list[str],
        instance_id: str | None,
        session_timeout_s: float,
        poll_timeout_s: float,
    ) -> None:
        self.name = name
        self._clock = clock
        self._rng = rng
        self.core = MemberCore(
            clock,
            group,
            topics,
            instance_id=instance_id,
            session_timeout_s=session_timeout_s,
            poll_timeout_s=poll_timeout_s,
            rng=random.Random(rng.random()),
        )
        self.state = ALIVE
        self.wake_at = 0.0
        """When a paused process resumes or a stalled app polls again."""
        self.stalled = False
        self.inbox: list[Any] = []
        self.next_index: dict[TopicPartition, int] = {}
        self.grants: dict[TopicPartition, int] = {}
        self._release_at: dict[TopicPartition, float] = {}
        self.sent_commits: list[CommitRequest] = []

    @property
    def running(self) -> bool:
        """A process whose leases count (a paused one may still hold some)."""
        return self.state in (ALIVE, PAUSED)

    def step(
        self,
        send: Callable[[Any], None],
        committed: dict[TopicPartition, Position],
        ends: dict[TopicPartition, int],
    ) -> None:
        if self.state != ALIVE:
            return
        now = self._clock.monotonic()
        if self.stalled and now >= self.wake_at:
            self.stalled = False
        for message in self.inbox:
            self._receive(message)
        self.inbox.clear()
        if not self.stalled:
            self.core.poll_started()
        self._react(send, committed)
        if not self.stalled:
            for tp in sorted(self.core.assignment):
                end = ends[tp]
                self.next_index[tp] = min(end, self.next_index[tp] + self._rng.randint(0, 3))
            if self.next_index and self._rng.random() < 0.3:
                self._commit(send, dict(self.next_index))
        for tp, at in list(self._release_at.items()):
            if now >= at:
                self.core.release([tp])
                del self._release_at[tp]
        for _ in range(2):  # a leave and a heartbeat can both be due
            request = self.core.next_request()
            if request is None:
                break
            send(("hb", request))

    def _react(
        self, send: Callable[[Any], None], committed: dict[TopicPartition, Position]
    ) -> None:
        for change in self.core.take_changes():
            if change.kind == ASSIGNED:
                for tp in sorted(change.partitions):
                    self.next_index[tp] = committed[tp].index if tp in committed else 0
                    self.grants[tp] = change.grant
            elif change.kind == REVOKED:
                last = {
                    tp: self.next_index[tp] for tp in change.partitions if tp in self.next_index
                }
                self._commit(send, last)
                for tp in sorted(change.partitions):
                    self.next_index.pop(tp, None)
                    self._release_at[tp] = self._clock.monotonic() + self._release_delay_s()
            else:
                assert change.kind == LOST
                for tp in sorted(change.partitions):
                    self.next_index.pop(tp, None)
                    self._release_at.pop(tp, None)

    def _release_delay_s(self) -> float:
        """How long the app's on_revoke takes: mostly short, sometimes long."""
        if self._rng.random() < 0.2:
            return self._rng.uniform(0.3, 1.5)
        return self._rng.uniform(0.0, 0.1)

    def _commit(self, send: Callable[[Any], None], positions: dict[TopicPartition, int]) -> None:
        request = self.core.commit_request(positions, self.grants)
        if request is not None:
            self.sent_commits.append(request)
            send(("commit", request))

    def _receive(self, message: Any) -> None:
        kind, request, answer = message
        if kind == "hb":
            assert isinstance(request, HeartbeatRequest)
            self.core.on_heartbeat_answer(request, answer)
        else:
            self.core.on_commit_answer(request, answer)

    def deliver(self, message: Any) -> None:
        if self.state in (ALIVE, PAUSED):
            self.inbox.append(message)
