"""A small in-memory cluster for scenario tests (etcd's `network`): messages
are delivered until the cluster is quiet, except over cut links or to crashed
nodes. Each node is a RaftCore over a MemoryStorage driven exactly as the
issue's loop prints it (persist, then send, then apply, then advance)."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable

from laminar.raft import (
    LEADER,
    NORMAL,
    Anomaly,
    Entry,
    MemoryStorage,
    Message,
    RaftConfig,
    RaftCore,
    ReadState,
)


class Cluster:
    def __init__(
        self,
        size: int = 3,
        *,
        ids: tuple[str, ...] | None = None,
        learners: tuple[str, ...] = (),
        pre_vote: bool = True,
        check_quorum: bool = True,
        election_ticks: int = 10,
        heartbeat_ticks: int = 1,
        seed: int = 0,
        **config: object,
    ) -> None:
        self.voters = ids or tuple(f"n{i}" for i in range(1, size + 1))
        self.learners = learners
        self.settings = dict(
            election_ticks=election_ticks,
            heartbeat_ticks=heartbeat_ticks,
            pre_vote=pre_vote,
            check_quorum=check_quorum,
            **config,
        )
        self.rng = random.Random(seed)
        self.storages: dict[str, MemoryStorage] = {}
        self.cores: dict[str, RaftCore] = {}
        self.applied: dict[str, list[Entry]] = {}
        self.read_states: dict[str, list[ReadState]] = {}
        self.dropped_reads: dict[str, list[int]] = {}
        self.anomalies: dict[str, list[Anomaly]] = {}
        self.cut: set[tuple[str, str]] = set()
        self.lose: Callable[[Message], bool] = lambda message: False
        """Messages to lose besides those over cut links."""
        self.queue: deque[Message] = deque()
        self.sent: list[Message] = []  # every message ever sent, for assertions
        for node in self.voters + learners:
            self.add_node(node, self.voters, learners)

    # -- nodes ---------------------------------------------------------------------

    def add_node(
        self,
        node: str,
        voters: tuple[str, ...],
        learners: tuple[str, ...] = (),
        applied: int | None = None,
    ) -> RaftCore:
        storage = self.storages.setdefault(node, MemoryStorage())
        config = RaftConfig(
            node_id=node, voters=voters, learners=learners, applied=applied, **self.settings
        )  # type: ignore[arg-type]
        core = RaftCore(config, storage, random.Random(self.rng.random()))
        self.cores[node] = core
        self.applied[node] = []
        self.read_states.setdefault(node, [])
        self.dropped_reads.setdefault(node, [])
        self.anomalies.setdefault(node, [])
        return core

    def crash(self, node: str) -> None:
        """The process dies: whatever it did not persist is gone."""
        del self.cores[node]

    def restart(
        self,
        node: str,
        applied: int | None = None,
        voters: tuple[str, ...] | None = None,
        learners: tuple[str, ...] | None = None,
    ) -> RaftCore:
        """Start `node` again from what it persisted."""
        voters = self.voters if voters is None else voters
        learners = self.learners if learners is None else learners
        return self.add_node(node, voters, learners, applied)

    # -- the network -------------------------------------------------------------------

    def isolate(self, node: str) -> None:
        for other in self.storages:
            if other != node:
                self.cut.add((node, other))
                self.cut.add((other, node))

    def heal(self) -> None:
        self.cut.clear()

    def drain(self, max_rounds: int = 10_000) -> None:
        """Handle every Ready and deliver every message until nothing moves."""
        for _ in range(max_rounds):
            moved = False
            for node, core in list(self.cores.items()):
                while core.has_ready():
                    self._handle_ready(node, core)
                    moved = True
            while self.queue:
                message = self.queue.popleft()
                moved = True
                self._deliver(message)
            if not moved:
                return
        raise AssertionError("the cluster never went quiet")

    def _handle_ready(self, node: str, core: RaftCore) -> None:
        storage = self.storages[node]
        rd = core.ready()
        storage.append(rd.entries)
        if rd.hard_state is not None:
            storage.set_hard_state(rd.hard_state)
        self.queue.extend(rd.messages)
        self.sent.extend(rd.messages)
        self.applied[node].extend(rd.committed)
        self.read_states[node].extend(rd.read_states)
        self.dropped_reads[node].extend(rd.dropped_reads)
        self.anomalies[node].extend(rd.anomalies)
        core.advance(rd)

    def pump(self, node: str) -> None:
        """Handle `node`'s Readies only (its messages are queued, not delivered)."""
        core = self.cores[node]
        while core.has_ready():
            self._handle_ready(node, core)

    def deliver_queued(self) -> None:
        """Deliver what is queued now, once, without handling any Ready."""
        for _ in range(len(self.queue)):
            self._deliver(self.queue.popleft())

    def _deliver(self, message: Message) -> None:
        core = self.cores.get(message.dst)
        cut = (message.src, message.dst) in self.cut
        if core is not None and not cut and not self.lose(message):
            core.step(message)

    def tick(self, ticks: int = 1, nodes: tuple[str, ...] | None = None) -> None:
        for _ in range(ticks):
            for node in nodes or tuple(self.cores):
                if node in self.cores:
                    self.cores[node].tick()
            self.drain()

    # -- helpers -----------------------------------------------------------------------

    def elect(self, node: str) -> RaftCore:
        """Make `node` campaign now and return it as leader."""
        self.cores[node].campaign()
        self.drain()
        core = self.cores[node]
        assert core.role == LEADER, f"{node} did not win: {core.status()}"
        return core

    def leader(self) -> str | None:
        leaders = [n for n, c in self.cores.items() if c.role == LEADER]
        if not leaders:
            return None
        return max(leaders, key=lambda n: self.cores[n].term)

    def wait_for_leader(self, max_ticks: int = 200) -> str:
        for _ in range(max_ticks):
            leader = self.leader()
            if leader is not None:
                return leader
            self.tick()
        raise AssertionError(f"no leader after {max_ticks} ticks")

    def propose(self, node: str, data: bytes) -> int:
        index = self.cores[node].propose(data)
        self.drain()
        return index

    def data(self, node: str) -> list[bytes]:
        """The normal payloads `node` applied, in order."""
        return [e.data for e in self.applied[node] if e.kind == NORMAL]

    def log_of(self, node: str) -> list[tuple[int, int]]:
        storage = self.storages[node]
        first, last = storage.first_index(), storage.last_index()
        if first > last:
            return []
        return [(e.index, e.term) for e in storage.entries(first, last + 1, 1 << 62)]
