"""The member core: one group member as a client holds it. No I/O.

Both laminar clients drive it from their background heartbeat task: send
what `next_request()` returns, hand back answers, ask `assignment` what to
deliver and `commit_request()` what to commit, and wake up by
`next_wakeup()`. It decides:

- Liveness by lease. Each answered heartbeat grants a lease on the assignment
  from the heartbeat's *send* time for the session timeout. The coordinator's
  session for the same heartbeat runs from its *receipt* for the same time, so
  the lease always ends first (given equal clock rates): by the time the
  coordinator expires the member and gives its partitions away, the member
  has stopped delivering and committing them. A member whose lease lapsed
  drops everything (`Lost`) and goes on heartbeating to get it back.
- Processing time separately. Each `poll_started()` sets a deadline
  `poll_timeout_s` ahead (extend it with `extend_poll`); past it, the member
  leaves the group on its own (its partitions move on) and joins again at the
  next poll. Heartbeats never wait for processing.
- Release on the app's word. A revoked partition is no longer delivered but
  still held (it may commit its last position) until `release()`; the next
  heartbeat reports it gone and the coordinator may give it to another.
- One grant per holding. Every time partitions are given (again) to this
  member they get a new grant number (`Change.grant`, `grant()`). The app
  delivers and commits a partition only under the grant it started it with:
  a partition lost and given back between a poll and its commit (another
  member may have read and committed it meanwhile) is a new holding, and
  what was read under the old one is neither delivered nor committed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from laminar.clock import Clock
from laminar.groups.errors import GroupError
from laminar.groups.messages import (
    JOIN,
    LEAVE,
    LEAVE_STATIC,
    CommitAnswer,
    CommitRequest,
    HeartbeatAnswer,
    HeartbeatRequest,
    TopicPartition,
)

ASSIGNED: Final = "assigned"
REVOKED: Final = "revoked"
"""Stop delivering; commit what was processed, then `release()`."""
LOST: Final = "lost"
"""Gone without a chance to commit: the lease lapsed or the member was fenced."""


@dataclass(frozen=True, slots=True)
class Change:
    """An assignment change for the client's callbacks (on_assign, on_revoke)."""

    kind: str
    partitions: frozenset[TopicPartition]
    grant: int = 0
    """For ASSIGNED: the grant the partitions are held under from now on."""


class MemberCore:
    """See the module docstring."""

    def __init__(
        self,
        clock: Clock,
        group: str,
        topics: Iterable[str],
        *,
        instance_id: str | None = None,
        session_timeout_s: float = 10.0,
        poll_timeout_s: float = 300.0,
        assignor: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._clock = clock
        self._rng = rng or random.SystemRandom()
        self.group = group
        self.topics = tuple(sorted(set(topics)))
        self.instance_id = instance_id
        self.session_timeout_s = session_timeout_s
        self.poll_timeout_s = poll_timeout_s
        self.assignor = assignor
        self.request_timeout_s = session_timeout_s / 3
        """An unanswered heartbeat is abandoned (its answer ignored) after this."""
        now = clock.monotonic()
        self.member_id = self._new_member_id()
        """Chosen here, so a join sent again is the same member (not a phantom
        holding partitions until its session ends); a new one after a fence."""
        self._announced = False
        """Whether a request went out under `member_id`: then a leave is due."""
        self.epoch = JOIN
        self.revision = 0
        self._assigned: frozenset[TopicPartition] = frozenset()
        self._releasing: frozenset[TopicPartition] = frozenset()
        self._grants: dict[TopicPartition, int] = {}
        """The grant each partition held (assigned or releasing) came with."""
        self._last_grant = 0
        self._lease_until = -math.inf
        self._in_flight: HeartbeatRequest | None = None
        self._sent_at = now
        self._next_at = now
        self._poll_deadline = now + poll_timeout_s
        self._active = True
        """False after close() or a poll deadline passed."""
        self._closed = False
        self._leave: HeartbeatRequest | None = None
        self._paused: set[TopicPartition] = set()
        self._changes: list[Change] = []
        self._refusal: Exception | None = None

    # -- what the client asks ---------------------------------------------

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        """What to deliver now: assigned, leased and not paused."""
        self._expire()
        return self._assigned - self._paused

    def holds(self, tp: TopicPartition) -> bool:
        """Whether the member may act on `tp` now (deliver or commit it)."""
        return (
            self._clock.monotonic() < self._lease_until and tp in self._assigned | self._releasing
        )

    def grant(self, tp: TopicPartition) -> int | None:
        """The grant `tp` is held under now (None: not held)."""
        return self._grants.get(tp) if self.holds(tp) else None

    @property
    def joined(self) -> bool:
        """Whether the coordinator has answered this member's join."""
        return self.epoch > JOIN

    @property
    def lease_until(self) -> float:
        return self._lease_until

    def take_changes(self) -> list[Change]:
        """Assignment changes since the last call, in order."""
        changes, self._changes = self._changes, []
        return changes

    def next_wakeup(self) -> float:
        """When the member next has something to do (monotonic seconds)."""
        due = [self._poll_deadline]
        if self._assigned or self._releasing:
            due.append(self._lease_until)
        if self._active:
            inflight = self._in_flight is not None
            due.append(self._sent_at + self.request_timeout_s if inflight else self._next_at)
        return min(due)

    # -- heartbeats -------------------------------------------------------

    def next_request(self) -> HeartbeatRequest | None:
        """The heartbeat (or leave) to send now, if any."""
        now = self._expire()
        if self._leave is not None:
            leave, self._leave = self._leave, None
            return leave
        if not self._active:
            return None
        if self._in_flight is not None and now < self._sent_at + self.request_timeout_s:
            return None
        if self._in_flight is None and now < self._next_at:
            return None
        self._in_flight = self._request(self.epoch)
        self._sent_at = now
        self._announced = True
        return self._in_flight

    def _request(self, epoch: int) -> HeartbeatRequest:
        return HeartbeatRequest(
            group=self.group,
            member_id=self.member_id,
            member_epoch=epoch,
            revision=self.revision,
            instance_id=self.instance_id,
            topics=self.topics,
            owned=self._assigned | self._releasing,
            session_timeout_s=self.session_timeout_s,
            assignor=self.assignor,
            paused=frozenset(self._paused & self._assigned),
        )

    def on_heartbeat_answer(self, request: HeartbeatRequest, answer: HeartbeatAnswer) -> None:
        """Apply the answer to the heartbeat in flight (others are stale: ignored)."""
        if request is not self._in_flight:
            return
        self._in_flight = None
        now = self._clock.monotonic()
        if answer.error in (GroupError.UNKNOWN_MEMBER, GroupError.FENCED):
            self._rejoin()
            return
        self._next_at = now + answer.heartbeat_interval_s
        if answer.error is not GroupError.NONE:
            return
        self.epoch, self.revision = answer.epoch, answer.revision
        self._lease_until = self._sent_at + self.session_timeout_s
        revoked = self._assigned - answer.assignment
        added = answer.assignment - self._assigned
        self._assigned = answer.assignment
        self._releasing = (self._releasing | revoked) - added
        if revoked:
            self._changes.append(Change(REVOKED, revoked))
        if added:
            self._last_grant += 1
            self._grants.update(dict.fromkeys(added, self._last_grant))
            self._changes.append(Change(ASSIGNED, added, self._last_grant))
        self._expire()

    def on_heartbeat_failed(self, request: HeartbeatRequest) -> None:
        """The heartbeat could not be sent or its connection broke: retry now."""
        if request is self._in_flight:
            self._in_flight = None
            self._next_at = self._clock.monotonic()

    def on_heartbeat_refused(self, request: HeartbeatRequest, reason: Exception) -> None:
        """The coordinator refused the heartbeat in a way sending it again
        cannot change (not authorized, invalid, over a limit): the member
        stops (no retry storm), lets go of what it held, and the app hears
        `reason` from `take_refusal`; its next poll tries to join again."""
        if request is not self._in_flight:
            return
        self._in_flight = None
        self._active = False
        self._announced = False  # a leave would be refused the same way
        self._drop(LOST)
        self._refusal = reason

    def take_refusal(self) -> Exception | None:
        """Why the coordinator stopped this member, once (None: it did not)."""
        refusal, self._refusal = self._refusal, None
        return refusal

    def release(self, partitions: Iterable[TopicPartition]) -> None:
        """The app is done with these revoked partitions: report it at once."""
        self._releasing -= frozenset(partitions)
        for tp in partitions:
            if tp not in self._assigned:
                self._grants.pop(tp, None)
        self._next_at = self._clock.monotonic()

    def subscribe(self, topics: Iterable[str]) -> None:
        self.topics = tuple(sorted(set(topics)))
        self._next_at = self._clock.monotonic()

    # -- commits ----------------------------------------------------------

    def commit_request(
        self, positions: Mapping[TopicPartition, int], grants: Mapping[TopicPartition, int]
    ) -> CommitRequest | None:
        """A commit of the positions of partitions held now under the grant
        the app read them under (`grants`); others are left out. A partition
        absent from `grants` (the app has not started it yet: nothing read
        of it could be read again by a later holding) counts as the current."""
        held = {
            tp: index
            for tp, index in positions.items()
            if (grant := self.grant(tp)) is not None and grants.get(tp, grant) == grant
        }
        if not held or not self.joined:
            return None
        return CommitRequest(self.group, self.member_id, self.epoch, held)

    def on_commit_answer(self, request: CommitRequest, answer: CommitAnswer) -> None:
        """FENCED means this member is not the group's any more: join again."""
        current = (request.member_id, request.member_epoch) == (self.member_id, self.epoch)
        if current and GroupError.FENCED in answer.results.values():
            self._rejoin()

    # -- processing time --------------------------------------------------

    def poll_started(self) -> None:
        """The app asks for records: it is alive. Rejoins after a poll expiry."""
        now = self._clock.monotonic()
        self._poll_deadline = now + self.poll_timeout_s
        if not self._active and not self._closed:
            self._active = True
            self._rejoin()

    def extend_poll(self, seconds: float) -> None:
        """Processing takes longer: move the poll deadline `seconds` from now."""
        self._poll_deadline = max(self._poll_deadline, self._clock.monotonic() + seconds)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self._paused.update(partitions)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._paused.difference_update(partitions)

    def close(self) -> HeartbeatRequest | None:
        """Leave the group (a static member temporarily: epoch -2); the
        returned leave is the last request."""
        leave = None
        if self._announced:
            leave = self._request(LEAVE_STATIC if self.instance_id is not None else LEAVE)
        self._drop(LOST)
        self._active = False
        self._closed = True
        self._in_flight = None  # a held heartbeat's late answer is ignored
        return leave

    # -- inside -----------------------------------------------------------

    def _expire(self) -> float:
        """Drop a lapsed lease; leave when the poll deadline passed."""
        now = self._clock.monotonic()
        if now >= self._lease_until:
            self._drop(LOST)
        if self._active and now >= self._poll_deadline:
            self._active = False
            if self._announced:
                self._leave = self._request(LEAVE)
            self._drop(LOST)
            self._forget()
        return now

    def _drop(self, kind: str) -> None:
        lost = self._assigned | self._releasing
        self._assigned = self._releasing = frozenset()
        self._grants.clear()
        self._lease_until = -math.inf
        if lost:
            self._changes.append(Change(kind, lost))

    def _rejoin(self) -> None:
        self._drop(LOST)
        self._forget()
        self._next_at = self._clock.monotonic()

    def _forget(self) -> None:
        """Join next as a new member: the old one is gone or fenced."""
        self.member_id = self._new_member_id()
        self._announced = False
        self.epoch, self.revision = JOIN, 0
        self._in_flight = None

    def _new_member_id(self) -> str:
        return f"{self._rng.getrandbits(128):032x}"
