"""The simulation driver: one seed, one run, every checker watching.

A run has a safety phase (faults on: partitions, one-way cuts, loss,
duplication, reordering, crashes at any point of handling a Ready, restarts,
compaction, membership changes, clock skew) and then a liveness phase (the
network heals, crashed members restart, no new faults) in which a proposal
must commit on every member within `params.liveness_steps` steps.

Time is in steps. Each step: inject faults, tick every live node by its own
rate, deliver the messages due, let every node handle its Ready (send a
leader's appends, persist, send the answers, apply, advance; a crash can
strike between any two), then the client workload. Messages sent at step t
arrive at t+1 at the earliest.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from itertools import count

from laminar.raft import (
    ANCHOR,
    CONFIG,
    LEADER,
    NORMAL,
    ConfigChangeRefused,
    Entry,
    Membership,
    NotLeader,
    ProposalDropped,
    Ready,
)
from laminar.raft.messages import VOTE_RESP

from .checkers import Checker
from .checkers.durability import Durability
from .checkers.election_safety import ElectionSafety
from .checkers.leader_completeness import LeaderCompleteness
from .checkers.liveness import Liveness
from .checkers.log_matching import LogMatching
from .checkers.reads import LinearizableReads
from .checkers.removal import RemovalFinality
from .checkers.state_machine_safety import StateMachineSafety
from .history import History, Violation
from .network import SimNetwork
from .node import SimNode, SimStorage
from .params import Params

UNCOMMITTED_ENTRIES_MAX = 32

ALL_CHECKERS: tuple[type[Checker], ...] = (
    Liveness,  # first at the end: without recovery, the end state means nothing
    ElectionSafety,
    LogMatching,
    LeaderCompleteness,
    StateMachineSafety,
    Durability,
    LinearizableReads,
    RemovalFinality,
    Liveness,
)


class Simulation:
    def __init__(
        self,
        seed: int,
        params: Params | None = None,
        checkers: Iterable[type[Checker]] = ALL_CHECKERS,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.params = params or Params.draw(self.rng)
        p = self.params
        self.history = History()
        self.checkers = [checker(self.history) for checker in checkers]
        self._node_hooks = [c for c in self.checkers if type(c).on_node is not Checker.on_node]
        self.network = SimNetwork(
            random.Random(self.rng.random()), p.drop, p.duplicate, p.delay_steps_max
        )
        ids = [f"n{i}" for i in range(1, p.nodes + 1)]
        self._spare_ids = (f"n{i}" for i in count(p.nodes + 1))
        self.nodes: dict[str, SimNode] = {}
        self.destroyed: set[str] = set()  # removed from the group: never restarted
        self.now = 0
        self.faults = True
        self._payloads = count()
        self._pending: dict[tuple[str, int, int], bytes] = {}  # (node, incarnation, index)
        self._leader_hint: str | None = None
        self._membership_change: tuple[str, int, int] | None = None  # (node, incarnation, index)
        self._probe_acked: bytes | None = None
        self._probes: list[bytes] = []
        self._probed: tuple[str, int] | None = None  # the leadership the last probe went to
        self.recovered_after_steps: int | None = None
        self.initial_membership = Membership(tuple(ids))
        for node_id in ids:
            self._add_node(node_id, self.initial_membership)

    # -- running -------------------------------------------------------------------

    def run(self) -> None:
        """Run both phases; raises Violation (with the seed) on the first failure."""
        try:
            for _ in range(self.params.safety_steps):
                self.step()
            self.faults = False
            self.network.heal()
            self.network.calm()
            for step in range(1, self.params.liveness_steps + 1):
                self.step()
                if self._recovered():
                    self.recovered_after_steps = step
                    break
            for checker in self.checkers:
                checker.at_end(self)
        except Violation as violation:
            raise Violation(
                violation.checker, f"{violation} (step {self.now}); reproduce with seed={self.seed}"
            ) from None

    def step(self) -> None:
        self.now += 1
        if self.faults:
            self._inject_faults()
        else:
            self._keep_members_running()
        live = [node for node in self.nodes.values() if node.core is not None]
        for node in live:
            node.tick_credit += node.tick_rate
            while node.tick_credit >= 1 and node.core is not None:
                node.tick_credit -= 1
                node.core.tick()
                self._observe(node)
        for message in self.network.due(self.now):
            node = self.nodes.get(message.dst)
            if node is not None and node.core is not None:
                node.core.step(message)
                self._observe(node)
        for node in live:
            self._handle_ready(node)
        if self.faults:
            self._client_workload()
        else:
            self._liveness_probe()

    def _observe(self, node: SimNode) -> None:
        for checker in self._node_hooks:
            checker.on_node(node)

    # -- a node's application loop -------------------------------------------------------

    def _handle_ready(self, node: SimNode) -> None:
        p = self.params
        rng = self.rng
        while node.core is not None and node.core.has_ready():
            core = node.core
            rd = core.ready()
            crash_at = -1
            if self.faults and rng.random() < p.crash_in_ready:
                crash_at = rng.randrange(5)
            if (
                self.faults
                and p.crash_after_vote
                and any(m.kind == VOTE_RESP and not m.reject for m in rd.messages)
                and rng.random() < p.crash_after_vote
            ):
                crash_at = 5  # vote persisted and sent, then the process dies and restarts
            storage = node.storage
            for message in rd.messages_before_persist():  # a leader's appends go out first
                self.network.send(message, self.now)
            if crash_at == 0:
                return node.crash()  # nothing of this Ready reached the disk
            if crash_at == 1:
                # A torn write: some prefix of the entries made it.
                storage.append(rd.entries[: rng.randrange(len(rd.entries) + 1)])
                return node.crash()
            storage.append(rd.entries)
            if crash_at == 2:
                return node.crash()  # entries persisted, hard state not
            if rd.hard_state is not None:
                storage.set_hard_state(rd.hard_state)
            after = rd.messages_after_persist()
            if crash_at == 3:
                for message in after:
                    if rng.random() < 0.5:
                        self.network.send(message, self.now)
                return node.crash()
            for message in after:
                self.network.send(message, self.now)
            self._apply(node, rd)
            if crash_at >= 4:
                node.crash()  # applied, never advanced
                if crash_at == 5:
                    self._start(node)  # a supervisor restarts it at once
                return None
            core.advance(rd)
            for read in rd.read_states:
                for checker in self.checkers:
                    checker.on_read_state(node, read)
            self._observe(node)
        return None

    def _apply(self, node: SimNode, rd: Ready) -> None:
        if rd.entries and rd.entries[0].kind == ANCHOR:
            anchor = rd.entries[0]
            node.applied = max(node.applied, anchor.index)
            node.memberships = [(anchor.index, Membership.decode(anchor.data))]
            for checker in self.checkers:
                checker.on_skip(node, anchor.index)
        for entry in rd.committed:
            for checker in self.checkers:
                checker.on_apply(node, entry)
            self.history.record_committed(entry)
            if entry.kind == CONFIG:
                node.memberships.append((entry.index, Membership.decode(entry.data)))
            payload = self._pending.pop((node.id, node.incarnation, entry.index), None)
            if payload is not None and entry.data == payload and entry.kind == NORMAL:
                self.history.record_ack(entry)  # the client hears "committed"
        if rd.committed:
            node.applied = rd.committed[-1].index

    # -- faults ----------------------------------------------------------------------

    def _inject_faults(self) -> None:
        p = self.params
        rng = self.rng
        running = [n for n in self.nodes.values() if n.core is not None]
        down = [n for n in self.nodes.values() if n.core is None and n.id not in self.destroyed]
        if p.partition_rate and rng.random() < p.partition_rate:
            ids = [n.id for n in self.nodes.values() if n.id not in self.destroyed]
            if rng.random() < 0.5:
                self.network.partition(ids)
            else:
                a, b = rng.sample(ids, 2)
                self.network.cut_one_way(a, b)
        if rng.random() < p.heal_rate:
            self.network.heal()
        if running and p.crash_rate and rng.random() < p.crash_rate:
            rng.choice(running).crash()
        if p.leader_crash_rate and rng.random() < p.leader_crash_rate:
            leader = self._leader()
            if leader is not None:
                leader.crash()
        if down and rng.random() < p.restart_rate:
            self._start(rng.choice(down))
        if running and p.compact_rate and rng.random() < p.compact_rate:
            self._compact(rng.choice(running))
        if p.membership_rate and rng.random() < p.membership_rate:
            self._change_membership()

    def _compact(self, node: SimNode) -> None:
        """Retention: drop a random part of what this node applied."""
        storage = node.storage
        first = storage.first_index()
        limit = min(node.applied, storage.initial_state().commit)
        if limit >= first:
            storage.compact(self.rng.randint(first, limit))

    def _keep_members_running(self) -> None:
        self._destroy_removed()
        members = set(self._committed_membership().members)
        for node in self.nodes.values():
            if node.id in members and node.core is None and node.id not in self.destroyed:
                self._start(node)

    def _destroy_removed(self) -> None:
        """A running removed node goes once it takes its removal as final (a
        leader told it), as a shell deletes its replica; a crashed one at once."""
        members = self._committed_membership().members
        for node in self.nodes.values():
            removed = node.id not in members and node.id not in self.destroyed
            final = node.core is None or node.core.removal_confirmed
            if removed and final and self._removal_committed(node.id):
                self.destroyed.add(node.id)
                node.crash()

    # -- membership ------------------------------------------------------------------

    def _committed_membership(self) -> Membership:
        latest = self.history.latest_config
        return Membership.decode(latest.data) if latest else self.initial_membership

    def _change_membership(self) -> None:
        """The controller: one step at a time, through the current leader.
        Removed nodes are destroyed once their removal is committed and final
        (`_destroy_removed`)."""
        if self._membership_change is not None:
            node_id, incarnation, index = self._membership_change
            node = self.nodes[node_id]
            entry = self.history.committed.get(index)
            same_process = node.core is not None and node.incarnation == incarnation
            if entry is None and same_process and node.core.log.term(index) is not None:
                return  # still pending
            self._membership_change = None
        self._destroy_removed()
        leader = self._leader()
        if leader is None or leader.core is None:
            return
        core = leader.core
        current = core.membership
        rng = self.rng
        choices = []
        if len(current.members) < 6:
            choices.append("add")
        if current.learners:
            choices.append("promote")
        if len(current.voters) > 3 or current.learners:
            choices.append("remove")
        if not choices:
            return
        action = rng.choice(choices)
        try:
            if action == "add":
                new_id = next(self._spare_ids)
                index = core.add_learner(new_id)
                learners = (*current.learners, new_id)
                self._add_node(new_id, Membership(current.voters, learners))
            elif action == "promote":
                index = core.promote_learner(rng.choice(current.learners))
            else:
                removable = [
                    n for n in current.members if len(current.voters) > 3 or n in current.learners
                ]
                index = core.remove_node(rng.choice(removable))
        except (NotLeader, ConfigChangeRefused, ProposalDropped):
            return
        self._membership_change = (leader.id, leader.incarnation, index)

    def _removal_committed(self, node_id: str) -> bool:
        """Was a membership without `node_id` committed after one with it?"""
        seen = False
        for entry in self.history.configs:
            members = Membership.decode(entry.data).members
            if node_id in members:
                seen = True
            elif seen:
                return True
        return False

    def _add_node(self, node_id: str, membership: Membership) -> None:
        p = self.params
        rate = p.tick_rates[len(self.nodes) % len(p.tick_rates)]
        node = SimNode(node_id, membership, rate, self._persisted)
        self.nodes[node_id] = node
        self._start(node)

    def _start(self, node: SimNode) -> None:
        for checker in self.checkers:
            checker.before_start(node)
        node.start(self.params, self.rng, use_applied=self.rng.random() < 0.5)
        for checker in self.checkers:
            checker.on_start(node)

    def _persisted(self, node_id: str, storage: SimStorage, entries: Sequence[Entry]) -> None:
        for checker in self.checkers:
            checker.on_persist(node_id, storage, entries)

    # -- clients -------------------------------------------------------------------

    def _leader(self) -> SimNode | None:
        best = None
        for node in self.nodes.values():
            core = node.core
            newer = (
                best is None
                or best.core is None
                or (core is not None and core.term > best.core.term)
            )
            if core is not None and core.role == LEADER and newer:
                best = node
        return best

    def _client_workload(self) -> None:
        rng = self.rng
        p = self.params
        if rng.random() < p.propose_rate:
            self._propose(f"w{next(self._payloads)}".encode())
        if p.read_rate and rng.random() < p.read_rate:
            node = self._pick_target()
            if node is not None and node.core is not None:
                try:
                    request_id = node.core.read_index()
                except NotLeader as refusal:
                    self._leader_hint = refusal.leader_hint
                    return
                for checker in self.checkers:
                    checker.on_read_start(node, request_id)

    def _pick_target(self) -> SimNode | None:
        """A client's guess at the leader: the last hint, else a random node."""
        node = self.nodes.get(self._leader_hint or "")
        if node is None or node.core is None or self.rng.random() < 0.2:
            node = self.rng.choice(list(self.nodes.values()))
        return node if node.core is not None else None

    def _propose(self, payload: bytes, target: SimNode | None = None) -> bool:
        node = target or self._pick_target()
        if node is None or node.core is None:
            return False
        log = node.core.log
        if log.last_index() - log.committed >= UNCOMMITTED_ENTRIES_MAX:
            return False  # clients bound what they have in flight
        try:
            index = node.core.propose(payload)
        except NotLeader as refusal:
            self._leader_hint = refusal.leader_hint
            return False
        except ProposalDropped:
            return False
        self._pending[node.id, node.incarnation, index] = payload
        return True

    def _liveness_probe(self) -> None:
        """Propose one fresh probe to each new leadership until one is acknowledged."""
        if self._probe_acked is not None:
            return
        for data in self._probes:
            if data in self.history.acked:
                self._probe_acked = data
                return
        leader = self._leader()
        if leader is None or leader.core is None:
            return
        leadership = (leader.id, leader.core.term)
        if leadership != self._probed:
            payload = f"probe{next(self._payloads)}".encode()
            if self._propose(payload, leader):
                self._probes.append(payload)
                self._probed = leadership

    def _recovered(self) -> bool:
        """A probe was acknowledged and every member applied every acknowledged write."""
        if self._probe_acked is None:
            return False
        index = self.history.acked_max_index
        return all(node.applied >= index for node in self.members_alive())

    # -- for checkers ----------------------------------------------------------------

    def members_alive(self) -> list[SimNode]:
        members = set(self._committed_membership().members)
        return [n for n in self.nodes.values() if n.id in members and n.core is not None]

    def describe_roles(self) -> str:
        return ", ".join(
            f"{n.id}={n.core.role}@{n.core.term}" if n.core else f"{n.id}=down"
            for n in self.nodes.values()
        )


def run_seed(
    seed: int, params: Params | None = None, checkers: Iterable[type[Checker]] = ALL_CHECKERS
) -> None:
    """Run one seed; raises Violation naming the seed on failure."""
    Simulation(seed, params, checkers).run()
