"""Every Raft group of one shard: the clock, messages in and out, and quiescence.

- The clock: one task ticks every active group each `tick_s` (100 ms). Election
  timeouts are 10-20 ticks (1-2 s), heartbeats every tick.
- Messages out go to `Transport.send(node, pid, message)`, which batches them
  per destination; messages in arrive through `receive` and are stepped into
  their group. A message for a group this shard does not have (not opened yet,
  or deleted) is dropped and counted: Raft retries. It is also shown to
  `on_unknown`, which may open the group (a move made this node a learner).
- Quiescence (as CockroachDB's): a leader with no proposal for
  `QUIESCE_AFTER_TICKS` asks its core to quiesce; the core does so only when
  every member has the whole log and the commit index, and tells the
  followers. Quiesced groups are not ticked at all, so thousands of idle
  partitions cost nothing per tick. Any message or proposal wakes a group.
  Because a quiesced follower no longer counts election ticks, the host
  watches the leader's *node* instead: the transport reports when it last
  heard from each node (every link carries a keepalive each tick), and
  followers whose leader's node has been silent for an election timeout are
  woken, so they time out and elect a new leader.
- A group that knows no leader for `leaderless_warn_s` (10 s) is logged with
  this replica's view (role, term, log, the commit it knows of), again each
  time as long again passes, at most `LEADERLESS_LINES` such lines in that
  time for the shard: a partition that cannot elect (its peers down, or a
  bug) is named in the log instead of found by its clients.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from laminar.clock import SYSTEM_CLOCK, Clock
from laminar.lograte import RateLimitedLog
from laminar.raft import LEADER, Message
from laminar.raft.budget import ByteBudget
from laminar.replication.group import RaftGroup

logger = logging.getLogger("laminar.replication")

TICK_S: Final = 0.1
ELECTION_TICKS: Final = 10
QUIESCE_AFTER_TICKS: Final = 3
LEADERLESS_WARN_S: Final = 10.0
"""How long a group may know no leader before it is logged (elections take 1-2 s)."""
LEADERLESS_LINES: Final = 5
"""At most this many leaderless lines per `leaderless_warn_s` (a node's whole
share of partitions may lose its leaders at once)."""


class Transport(Protocol):
    """What the host needs from the network."""

    def send(self, node_id: str, pid: int, message: Message) -> None:
        """Queue `message` for `node_id`; never blocks, may drop."""
        ...

    def last_heard(self, node_id: str) -> float | None:
        """The clock's monotonic() at the last frame from `node_id` (None: never)."""
        ...

    def tick(self) -> None:
        """Once per tick, after the groups ticked (keepalives)."""
        ...


class RaftHost:
    """The Raft groups of one shard (see the module docstring)."""

    def __init__(
        self,
        transport: Transport,
        tick_s: float = TICK_S,
        on_unknown: Callable[[int, Message], None] | None = None,
        move_budget: ByteBudget | None = None,
        on_failed: Callable[[int, BaseException], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.transport = transport
        self.clock = clock
        """What `last_heard` times are read against: the transport's clock."""
        self._on_unknown = on_unknown
        self._on_failed = on_failed
        """Told when a group's Ready loop dies (its storage failed): it is offline."""
        self.move_budget = move_budget
        """Shared by every group's leader for what it sends learners; refilled each tick."""
        self.tick_s = tick_s
        self.groups: dict[int, RaftGroup] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._idle_ticks: dict[int, int] = {}
        self._leaderless: dict[int, tuple[float, float]] = {}
        """Per group that knows no leader: since when, and when it is next logged."""
        self._leaderless_log = RateLimitedLog(
            logger, LEADERLESS_LINES, LEADERLESS_WARN_S, clock.monotonic
        )
        self.dropped_messages = 0
        self._ticker: asyncio.Task[None] | None = None

    # -- groups -----------------------------------------------------------------

    def add(self, group: RaftGroup) -> None:
        """Start driving `group` (its Ready loop runs in its own task)."""
        if group.pid in self.groups:
            raise ValueError(f"partition {group.pid} already has a Raft group here")
        self.groups[group.pid] = group
        group.core.learner_budget = self.move_budget
        self._idle_ticks[group.pid] = 0
        task = asyncio.get_running_loop().create_task(group.run())
        self._tasks[group.pid] = task
        task.add_done_callback(functools.partial(self._stopped, group))

    def _stopped(self, group: RaftGroup, task: asyncio.Task[None]) -> None:
        failure = None if task.cancelled() else task.exception()
        if failure is None:
            return
        logger.error("partition %d is offline: its Raft group failed", group.pid)
        if self._on_failed is not None and self.groups.get(group.pid) is group:
            self._on_failed(group.pid, failure)

    async def remove(self, pid: int) -> None:
        """Stop and close `pid`'s group (its files stay)."""
        group = self.groups.pop(pid, None)
        self._idle_ticks.pop(pid, None)
        self._leaderless.pop(pid, None)
        task = self._tasks.pop(pid, None)
        if group is None:
            return
        await group.close()
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def send(self, pid: int, messages: Sequence[Message]) -> None:
        """A group's outgoing messages (its `Send`)."""
        for message in messages:
            self.transport.send(message.dst, pid, message)

    def receive(self, pid: int, message: Message) -> None:
        group = self.groups.get(pid)
        if group is None or group.closed:
            self.dropped_messages += 1
            if group is None and self._on_unknown is not None:
                self._on_unknown(pid, message)
            return
        try:
            group.step(message)
        except ValueError as exc:  # a message for another node id: a peer's bug
            self.dropped_messages += 1
            logger.warning("partition %d: dropped a raft message: %s", pid, exc)

    async def hand_over_leaderships(self, timeout_s: float) -> tuple[int, int]:
        """Move every leadership held here to a follower (drain): (moved, tried).
        A transfer the core abandons (after an election timeout) or that is not
        done within `timeout_s` leaves the group to elect once this node stops."""
        loop = asyncio.get_running_loop()
        tried = [group for group in self.groups.values() if group.hand_over()]
        deadline = loop.time() + timeout_s
        while any(group.is_leader for group in tried) and loop.time() < deadline:
            await asyncio.sleep(self.tick_s)
        return sum(not group.is_leader for group in tried), len(tried)

    # -- the clock --------------------------------------------------------------

    def active_groups(self) -> int:
        """Groups ticked each tick (not quiesced): what new groups cost until
        they have elected a leader and gone quiet."""
        return sum(not group.core.quiesced for group in self.groups.values())

    async def wait_active_below(self, limit: int) -> None:
        """Back-pressure for whoever opens many groups at once (a topic create):
        yield to the loop, then wait until fewer than `limit` groups are
        active, or three election timeouts pass (a group whose peers have not
        opened their replicas yet cannot elect; it must not hold up the rest)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 3 * ELECTION_TICKS * self.tick_s
        await asyncio.sleep(0)
        while self.active_groups() >= limit and loop.time() < deadline:
            await asyncio.sleep(self.tick_s)

    def start(self) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self._tick_forever())

    async def _tick_forever(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            next_at += self.tick_s
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            if loop.time() - next_at > self.tick_s * ELECTION_TICKS:
                next_at = loop.time()  # the loop stalled: do not tick a burst to catch up
            self.tick()

    def tick(self) -> None:
        if self.move_budget is not None:
            self.move_budget.refill()
        now = self.clock.monotonic()
        silent_s = self.tick_s * ELECTION_TICKS
        for pid, group in self.groups.items():
            core = group.core
            if core.quiesced:
                leader = core.leader
                if leader is not None and leader != core.id:
                    heard = self.transport.last_heard(leader)
                    if heard is None or now - heard > silent_s:
                        core.wake()  # the leader's node went silent: time out
                continue
            group.tick()
            if core.leader is None:
                self._watch_leaderless(pid, group, now)
            else:
                self._leaderless.pop(pid, None)
            if core.role == LEADER:
                idle = self._idle_ticks[pid] = 0 if group.take_busy() else self._idle_ticks[pid] + 1
                if idle >= QUIESCE_AFTER_TICKS and core.quiesce():
                    group.kick()
        self.transport.tick()

    @property
    def leaderless_warn_s(self) -> float:
        """How long a group may know no leader before it is logged; also the
        window of the lines' rate limit."""
        return self._leaderless_log.interval_s

    @leaderless_warn_s.setter
    def leaderless_warn_s(self, seconds: float) -> None:
        self._leaderless_log.interval_s = seconds

    def _watch_leaderless(self, pid: int, group: RaftGroup, now: float) -> None:
        since, due = self._leaderless.setdefault(pid, (now, now + self.leaderless_warn_s))
        if now < due:
            return
        self._leaderless[pid] = (since, now + self.leaderless_warn_s)
        core = group.core
        self._leaderless_log.warning(
            "leaderless",
            "partition %d: no leader known for %.1f s (this replica: %s at term %d, log "
            "to %d, committed %d, the group's commit as last told %s; voters %s): its "
            "peers may be down or unreachable, or its election cannot complete",
            pid,
            now - since,
            core.role,
            core.term,
            core.log.last_index(),
            core.log.committed,
            core.leader_commit,
            ",".join(sorted(core.membership.voters)),
        )

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
        for pid in list(self.groups):
            await self.remove(pid)
