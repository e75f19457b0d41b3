"""The coordinator core behind a simulated positions log.

The records of one call are appended as one batch (all or none commit);
batches commit after a random delay; an answer is sent only once its
`wait_for` record is committed. A failover (or a failed append) throws the
core away with every uncommitted record and every unsent answer, and builds a
new core by replaying the committed log, decoded from its bytes. A committed
checkpoint lets the log drop what precedes it. Requests sent to a coordinator
that has since failed over are lost with it. A settled member's heartbeat is
held as the node's shell holds it (`GroupCoordinator.hold_s`): answered again
once the group changes (its version), else sent as it was when the hold is up.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from laminar.groups.coordinator import GroupCoordinator, Step
from laminar.groups.messages import (
    CommitRequest,
    HeartbeatAnswer,
    HeartbeatRequest,
    Position,
    TopicPartition,
)
from laminar.groups.records import PositionRecord, decode, encode

from .history import History

COORDINATOR = "coordinator"


@dataclass(frozen=True)
class Parked:
    """A held heartbeat: its answer so far and the group version it was made at."""

    sender: str
    request: HeartbeatRequest
    answer: HeartbeatAnswer
    version: int
    received_at: float
    until: float


class SimCoordinatorNode:
    def __init__(
        self,
        clock: Any,
        rng: random.Random,
        counts: dict[str, int],
        history: History,
        checkpoint_floor: int,
    ) -> None:
        self._clock = clock
        self._rng = rng
        self.counts = counts
        self.history = history
        self._checkpoint_floor = checkpoint_floor
        self.log: list[bytes] = []
        """Committed records; log[i] has sequence number base + i."""
        self.base = 1
        self.pending: list[list[bytes]] = []
        """Batches appended, not committed yet: one per call that wrote."""
        self._held: list[tuple[int, str, Any]] = []
        self.parked: list[Parked] = []
        self.generation = 0
        self.failovers = 0
        self._build([])

    def _build(self, records: list[bytes]) -> None:
        self.core = GroupCoordinator.replay(
            [decode(r) for r in records],
            self._clock,
            random.Random(self._rng.random()),
            heartbeat_interval_s=0.5,
            checkpoint_floor=self._checkpoint_floor,
        )
        for topic, count in sorted(self.counts.items()):
            self._take(self.core.set_partitions(topic, count))

    @property
    def committed_seq(self) -> int:
        return self.base + len(self.log) - 1

    def _take(self, step: Step[Any], reply: Callable[[Any], tuple[str, Any]] | None = None) -> None:
        assert step.first_seq == self.committed_seq + sum(map(len, self.pending)) + 1
        if step.records:
            self.pending.append([encode(r) for r in step.records])
        if reply is not None:
            destination, message = reply(step.answer)
            self._held.append((step.answer.wait_for, destination, message))

    def heartbeat(
        self, sender: str, request: HeartbeatRequest, received_at: float | None = None
    ) -> None:
        now = self._clock.monotonic()
        step = self.core.heartbeat(request, received_at=received_at)
        hold = self.core.hold_s(request, step.answer)
        if hold > 0:
            self._take(step)
            version = self.core.group_version(request.group)
            received = now if received_at is None else received_at
            # answered again, it is held only for what is left of its first hold
            until = received + hold
            self.parked.append(Parked(sender, request, step.answer, version, received, until))
            return
        self._take(step, lambda answer: (sender, ("hb", request, self._interval(request, answer))))

    def _interval(self, request: HeartbeatRequest, answer: HeartbeatAnswer) -> HeartbeatAnswer:
        """As the shell: a member whose next heartbeat would be held asks at once."""
        if self.core.next_is_held(request, answer):
            return dataclasses.replace(answer, heartbeat_interval_s=0.0)
        return answer

    def _unpark(self) -> None:
        """Answer the held heartbeats whose group changed or whose hold is up."""
        now = self._clock.monotonic()
        parked, self.parked = self.parked, []
        for p in parked:
            if self.core.group_version(p.request.group) != p.version:
                self.heartbeat(p.sender, p.request, p.received_at)
            elif now >= p.until:
                answer = self._interval(p.request, p.answer)
                self._held.append((answer.wait_for, p.sender, ("hb", p.request, answer)))
            else:
                self.parked.append(p)

    def commit(self, sender: str, request: CommitRequest, ends: dict[TopicPartition, int]) -> Any:
        step = self.core.commit(request, ends)
        self._take(step, lambda answer: (sender, ("commit", request, answer)))
        return step.answer

    def tick(self) -> None:
        self._take(self.core.tick())

    def set_partitions(self, topic: str, count: int) -> None:
        self.counts[topic] = count
        self._take(self.core.set_partitions(topic, count))

    def progress(self, commit_probability: float) -> list[tuple[str, Any]]:
        """Commit what the log has appended (maybe), then release the answers
        that waited for it; returns them to send."""
        self._unpark()
        if self.pending and self._rng.random() < commit_probability:
            count = self._rng.randint(1, len(self.pending))
            for raw in (r for batch in self.pending[:count] for r in batch):
                self.log.append(raw)
                record = decode(raw)
                if isinstance(record, PositionRecord) and record.value is not None:
                    tp = (record.topic, record.partition)
                    self.history.position_committed(record.group, tp, record.value)
            del self.pending[:count]
            self.core.committed(self.committed_seq)
            cut = self.core.truncate_before
            if cut is not None and cut > self.base:
                del self.log[: cut - self.base]
                self.base = cut
        ready = [(d, m) for w, d, m in self._held if w <= self.committed_seq]
        self._held = [h for h in self._held if h[0] > self.committed_seq]
        return ready

    def fail_over(self, new_node: bool) -> None:
        """Rebuild from the committed log: on a new node (a failover), or on
        the same one after a failed append (requests in flight still arrive)."""
        self.pending.clear()
        self._held.clear()
        self.parked.clear()
        self.base = 1
        self._build(self.log)
        self.failovers += 1
        if new_node:
            self.generation += 1

    def durable_positions(self, group: str) -> dict[TopicPartition, Position]:
        return self.history.positions.get(group, {})
