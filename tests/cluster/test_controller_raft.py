"""The placement controller driving real Raft cores (`laminar.raft.RaftCore`).

Each partition is a Raft group of the in-memory harness (`tests.raft.harness`);
`laminar.replication.moves.drive` reads each leader's status, plans, and
applies the steps through the cores' membership API, the way a node's shell
will. Records are written all along; at the end every member of every group
holds every acknowledged record, once and in order, and every group sits at
its rendezvous target.
"""

from __future__ import annotations

from dataclasses import replace

from laminar.placement import partition_id, replica_nodes
from laminar.raft import NotLeader, ProposalDropped
from laminar.replication.controller import Action, NodeStatus, PlacementPolicy
from laminar.replication.moves import drive
from laminar.swim.messages import MemberState
from tests.raft.harness import Cluster

TICK_MS = 100
GRACE_MS = 2_000
POLICY = PlacementPolicy(3, GRACE_MS, moves_in_flight_max=6, moves_per_node_max=3)
PIDS = tuple(partition_id(1, i) for i in range(24))


class Partitions:
    """Every partition's group, the members' states, and what was acknowledged."""

    def __init__(
        self,
        weights: dict[str, float],
        policy: PlacementPolicy = POLICY,
        pids: tuple[int, ...] = PIDS,
    ) -> None:
        self.policy = policy
        self.pids = pids
        self.now_ms = 0
        self.nodes = {n: NodeStatus(n, w) for n, w in weights.items()}
        self.groups: dict[int, Cluster] = {}
        self.acked: dict[int, list[bytes]] = {pid: [] for pid in pids}
        self.written = 0
        self.refused = 0
        self.removing: set[tuple[int, str]] = set()
        for pid in pids:
            target = tuple(replica_nodes(pid, weights, policy.replication_factor))
            self.groups[pid] = Cluster(ids=target, seed=pid)
            self.groups[pid].elect(target[0])

    def set_state(self, node: str, state: MemberState, weight: float = 1.0) -> None:
        down = None if state.is_live else self.now_ms
        self.nodes[node] = NodeStatus(node, weight, state, down)

    def decommission(self, node: str) -> None:
        self.nodes[node] = replace(self.nodes[node], decommissioned=True)

    def kill(self, node: str) -> None:
        self.set_state(node, MemberState.DEAD)
        for group in self.groups.values():
            if node in group.cores:
                group.crash(node)

    def leader(self, pid: int) -> str | None:
        return self.groups[pid].leader()

    def write(self) -> None:
        """One record to every partition that has a leader; acknowledged once committed."""
        for pid, group in self.groups.items():
            leader = self.leader(pid)
            if leader is None:
                continue
            self.written += 1
            payload = f"{pid}:{self.written}".encode()
            try:
                index = group.propose(leader, payload)
            except (NotLeader, ProposalDropped):
                continue
            if group.cores[leader].status().commit >= index:
                self.acked[pid].append(payload)

    def drive(self) -> None:
        """One controller round over every led group, as a node's shell runs it."""
        leaders = {pid: self.leader(pid) for pid in self.pids}
        cores = {pid: self.groups[pid].cores[n] for pid, n in leaders.items() if n is not None}
        result, refused = drive(cores, self.nodes.values(), self.policy, self.now_ms)
        self.refused += len(refused)
        for step in result.steps:
            group = self.groups[step.pid]
            if step.action is Action.ADD_LEARNER and step.node not in group.cores:
                m = cores[step.pid].membership  # the new replica starts empty, as a learner
                group.add_node(step.node, m.voters, (*m.learners, step.node))
            if step.action is Action.REMOVE_NODE:
                self.removing.add((step.pid, step.node))
        self.retire_removed()

    def retire_removed(self) -> None:
        """A replica whose removal its leader applied stops (and would delete its
        files), unless members observe the group: a node keeps its replica of
        those (`ShardGroups.retire_removed`), to be added back as an observer."""
        if self.policy.observers:
            return
        for pid, node in sorted(self.removing):
            group = self.groups[pid]
            leader = self.leader(pid)
            if leader is not None and node not in group.cores[leader].membership.members:
                self.removing.discard((pid, node))
                if node in group.cores:
                    group.crash(node)

    def tick(self) -> None:
        self.now_ms += TICK_MS
        for group in self.groups.values():
            group.tick()

    def run(self, rounds: int, writes: bool = True) -> None:
        for _ in range(rounds):
            if writes:
                self.write()
            self.drive()
            self.drive()  # plans again before anything applied: pending changes are seen
            self.tick()

    def memberships(self) -> dict[int, tuple[tuple[str, ...], tuple[str, ...]]]:
        result = {}
        for pid, group in self.groups.items():
            m = group.cores[self.leader(pid) or min(group.cores)].membership
            result[pid] = (m.voters, m.learners)
        return result

    def check_at_target_with_every_acknowledged_record(self) -> None:
        assert all(self.leader(pid) is not None for pid in self.pids)
        live = {n for n, s in self.nodes.items() if s.state.is_live}
        weights = {n: self.nodes[n].weight for n in live if not self.nodes[n].decommissioned}
        rf = self.policy.replication_factor
        for pid, (voters, learners) in self.memberships().items():
            target = set(replica_nodes(pid, weights, rf))
            assert set(voters) == target, pid
            assert set(learners) == (live - target if self.policy.observers else set())
            group = self.groups[pid]
            for node in voters + learners:
                data = group.data(node)
                assert len(data) == len(set(data)), f"{node} applied a record twice"
                position = {payload: i for i, payload in enumerate(data)}
                missing = [p for p in self.acked[pid] if p not in position]
                assert not missing, f"partition {pid} on {node} lost {missing[:3]}"
                order = [position[p] for p in self.acked[pid]]
                assert order == sorted(order)
        assert sum(map(len, self.acked.values())) > len(self.pids) * 10
        assert self.refused == 0  # the controller never asks what a core would refuse


WEIGHTS = {"n1": 1.0, "n2": 1.0, "n3": 1.0, "n4": 1.0, "n5": 1.0}


def test_a_killed_nodes_partitions_get_back_to_rf_on_the_others_after_the_grace() -> None:
    parts = Partitions(WEIGHTS)
    parts.run(5)
    held = {pid for pid, (voters, _) in parts.memberships().items() if "n2" in voters}
    assert held
    parts.kill("n2")
    before = parts.memberships()
    while parts.now_ms < GRACE_MS - TICK_MS:  # within the grace: nothing moves
        parts.run(1)
    assert {pid: m[0] for pid, m in parts.memberships().items()} == {
        pid: m[0] for pid, m in before.items()
    }
    parts.run(60)
    parts.check_at_target_with_every_acknowledged_record()
    assert not any("n2" in voters for voters, _ in parts.memberships().values())


def test_a_joining_node_takes_only_the_partitions_it_wins() -> None:
    parts = Partitions(WEIGHTS)
    parts.run(3)
    before = parts.memberships()
    parts.set_state("n6", MemberState.ALIVE, 2.0)
    winners = {pid for pid in PIDS if "n6" in replica_nodes(pid, {**WEIGHTS, "n6": 2.0}, 3)}
    assert winners and winners != set(PIDS)
    for _ in range(60):
        parts.run(1)
        for pid, membership in parts.memberships().items():
            if pid not in winners:
                assert membership == before[pid]  # nothing else moves, ever
            assert len(membership[0]) >= 3  # a voter leaves only after its replacement votes
    parts.check_at_target_with_every_acknowledged_record()


def test_a_decommissioned_leader_hands_over_and_its_partitions_move() -> None:
    """While it still runs, with no grace (a node that merely stopped keeps its
    place for the grace: it may be restarting)."""
    parts = Partitions(WEIGHTS)
    parts.run(3)
    led = {pid for pid in PIDS if parts.leader(pid) == "n1"}
    assert led
    parts.set_state("n1", MemberState.LEFT)  # stopped on purpose: a restart, nothing moves
    parts.run(GRACE_MS // TICK_MS - 2)
    assert all("n1" in voters for pid, (voters, _) in parts.memberships().items() if pid in led)
    parts.set_state("n1", MemberState.ALIVE)
    parts.decommission("n1")
    parts.run(60)
    parts.check_at_target_with_every_acknowledged_record()
    assert not any(parts.leader(pid) == "n1" for pid in PIDS)
    assert not any("n1" in voters for voters, _ in parts.memberships().values())


def test_every_other_member_observes_a_group_kept_on_fewer_voters() -> None:
    """The metadata group's policy: the top three vote, every other live
    member is a learner holding the whole log (an eighth node of a gossip
    cluster must get the topic list). A dead voter's place goes to an
    observer, promoted once caught up; the dead one is removed."""
    policy = PlacementPolicy(3, GRACE_MS, observers=True)
    parts = Partitions(WEIGHTS, policy, pids=(0,))

    def settled() -> None:
        parts.run(10, writes=False)  # learners are not waited for: let them catch up
        parts.check_at_target_with_every_acknowledged_record()

    parts.run(30)
    settled()
    assert len(parts.memberships()[0][1]) == 2
    voter = parts.memberships()[0][0][1]
    parts.kill(voter)
    parts.run(80)
    settled()
    voters, learners = parts.memberships()[0]
    assert voter not in voters + learners and len(voters) == 3 and len(learners) == 1
    parts.set_state("n6", MemberState.ALIVE, 5.0)  # joins at the top: observes, then votes
    parts.run(80)
    settled()
    assert "n6" in parts.memberships()[0][0]


def test_a_learner_that_never_answered_is_not_promoted() -> None:
    """A group grown from one voter: the new node's shell has not opened the
    group yet (it acknowledged nothing). Its tracker match is 0, which is no
    match: promoting it would make a voter of nothing and leave the group
    unable to commit (1 of 2 voters)."""
    pid = partition_id(1, 0)
    group = Cluster(ids=("n1",), seed=1)
    core = group.elect("n1")
    core.add_learner("n2")  # never opened on n2: nothing reaches it
    group.tick(20)
    assert core.membership.learners == ("n2",)
    nodes = [NodeStatus("n1", 1.0), NodeStatus("n2", 1.0)]
    plan, refused = drive({pid: core}, nodes, PlacementPolicy(2, GRACE_MS), 0)
    assert not refused and plan.steps == ()
    assert "match is not known" in plan.waiting[pid]
