"""A move's learner: a shard opens a group on its leader's first message.

`ShardGroups` over real partition logs; messages are handed to its host as
an authenticated peer session would. Bounded: only leader messages, only
partitions the metadata knows, at most `ADOPTED_MAX` groups waiting for their
log to name this node.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

import laminar.raft.core as core_module
import laminar.replication.shard_groups as replication_module
from laminar.log import LogConfig, SyscallBackend
from laminar.log.partitions import PartitionManager
from laminar.raft import Membership, Message
from laminar.raft.messages import APPEND, APPEND_RESP, HEARTBEAT, HEARTBEAT_RESP, VOTE
from laminar.replication.auth import PeerAuth
from laminar.replication.nodes import Node, NodeView
from laminar.replication.shard_groups import ShardGroups
from laminar.wire import ErrorCode
from tests.cluster import test_raft_groups as groups

CONFIG = LogConfig(segment_bytes=1 << 20, preallocate_bytes=0, flush="always")
KNOWN = {(1 << 32) | i for i in range(8)}


def _replication(tmp_path: Path) -> ShardGroups:
    view = NodeView(1, (Node("n4", "127.0.0.1", 1),))
    partitions = PartitionManager(str(tmp_path), CONFIG, SyscallBackend(), owns=lambda pid: True)
    replication = ShardGroups(
        view, PeerAuth.from_secret("n4", None), 0, 1, partitions, 1 << 20, (2,)
    )
    replication.adopt_known(lambda pid: CONFIG if pid in KNOWN else None)
    return replication


def _from_leader(kind: str, pid_term: int = 3) -> Message:
    return Message(kind, "n1", "n4", pid_term, 0, 0, commit=0)


async def _settle(replication: ShardGroups) -> None:
    for _ in range(50):
        await asyncio.sleep(0.01)
        if not replication._opening:
            return


def test_a_leaders_message_opens_a_learner_only_for_a_known_partition(tmp_path: Path) -> None:
    async def scenario() -> None:
        replication = _replication(tmp_path)
        pid = min(KNOWN)
        try:
            replication.host.receive((9 << 32) | 1, _from_leader(APPEND))  # no such topic
            replication.host.receive(pid + 1, _from_leader(VOTE))  # not from a leader
            replication.host.receive(pid, _from_leader(HEARTBEAT))
            await _settle(replication)
            assert set(replication.replicas) == {pid}
            core = replication.replicas[pid].group.core
            # Not a voter: it cannot campaign before its log says who votes.
            assert core.membership == Membership(("n1",), ("n4",))
            assert replication.adoptions_refused == 1
        finally:
            await replication.close()

    asyncio.run(scenario())


def test_a_replica_whose_files_are_here_is_never_adopted(tmp_path: Path) -> None:
    """A restarted voter may hear its leader before the shard reopened its
    group (the metadata is still replaying): opened as the sender's learner,
    with nothing in its log to say otherwise, it would never vote again. It
    waits for the shard to open it instead (Raft resends)."""

    async def scenario() -> None:
        replication = _replication(tmp_path)
        pid = min(KNOWN)
        os.makedirs(replication.partitions.directory(pid))
        try:
            replication.host.receive(pid, _from_leader(HEARTBEAT))
            await _settle(replication)
            assert replication.replicas == {} and replication.adoptions_refused == 0
        finally:
            await replication.close()

    asyncio.run(scenario())


def test_groups_opened_on_messages_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replication_module, "ADOPTED_MAX", 3)

    async def scenario() -> None:
        replication = _replication(tmp_path)
        try:
            for pid in sorted(KNOWN):
                replication.host.receive(pid, _from_leader(APPEND))
                await _settle(replication)
            assert len(replication.replicas) == 3
            assert replication.adoptions_refused == len(KNOWN) - 3
        finally:
            await replication.close()

    asyncio.run(scenario())


def _n4(tmp_path: Path, net: groups.FakeNetwork) -> ShardGroups:
    """Node n4's shard on the fake network; placement over its view never
    names n4 (its weight is tiny), and it knows partition `groups.PID`."""
    members = [Node(n, "127.0.0.1", 1) for n in groups.NODES]
    n4 = ShardGroups(
        NodeView(1, (*members, Node("n4", "127.0.0.1", 1, weight=1e-9))),
        PeerAuth.from_secret("n4", None),
        0,
        1,
        PartitionManager(str(tmp_path / "n4"), CONFIG, SyscallBackend(), owns=lambda p: True),
        1 << 20,
        (2,),
    )
    n4.adopt_known(lambda pid: CONFIG if pid == groups.PID else None)
    n4.host.transport = net.transport("n4")
    n4.host.tick_s = groups.TICK_S
    n4.start()
    net.hosts["n4"] = n4.host
    return n4


def test_a_learner_opened_on_a_message_catches_up_and_becomes_a_voter(tmp_path: Path) -> None:
    """End to end over the fake network: n4 never held the partition; the
    leader adds it as a learner, n4's shard opens the group on the first
    append, catches up, is promoted, n3 is removed, and n4 holds every
    acknowledged record."""

    async def scenario(net: groups.FakeNetwork) -> None:
        acked = [await groups._produce(net, b"before-%d" % n) for n in range(5)]
        n4 = _n4(tmp_path, net)
        nodes = groups.NODES
        assert not n4.holds(groups.PID, 3)
        assert n4.not_here(groups.PID, 3).leader in nodes
        await groups._change(net, lambda c: c.add_learner("n4"), Membership(nodes, ("n4",)))
        await groups._change(net, lambda c: c.promote_learner("n4"), Membership((*nodes, "n4")))
        moved = Membership(("n1", "n2", "n4"))
        await groups._change(net, lambda c: c.remove_node("n3"), moved)
        acked.append(await groups._produce(net, b"after"))
        await groups._until(lambda: n4.host.groups[groups.PID].committed_end > acked[-1][0])
        assert n4.host.groups[groups.PID].core.membership == moved
        assert n4.holds(groups.PID, 3)  # its group's membership, not placement, says so
        values = [value for _, _, value in await groups._records(n4.host)]
        assert values == [*(b"before-%d" % n for n in range(5)), b"after"]

    groups._run(tmp_path, scenario)


def test_a_removed_replica_deletes_its_files_only_once_its_removal_is_committed(
    tmp_path: Path,
) -> None:
    """n4 (a learner) holds the removal entry while no voter's acknowledgement
    reaches the leader: not committed, its files stay however long it waits.
    Once the voters' answers pass, the removal commits, the leader tells n4,
    and n4 deletes its replica (and then names the voters when asked)."""

    async def scenario(net: groups.FakeNetwork) -> None:
        await groups._produce(net, b"x")
        n4 = _n4(tmp_path, net)
        nodes = groups.NODES
        await groups._change(net, lambda c: c.add_learner("n4"), Membership(nodes, ("n4",)))
        await groups._until(lambda: groups.PID in n4.replicas)
        directory = n4.partitions.directory(groups.PID)
        leader = await groups._until(lambda: groups._leader(net))
        voters_answer = {n for n in nodes if n != leader.core.id}
        net.lose = lambda src, dst, m: src in voters_answer and m.kind == APPEND_RESP
        index = leader.core.remove_node("n4")
        n4_log = n4.partitions.directory(groups.PID)
        await groups._until(lambda: n4.host.groups[groups.PID].storage.last_index() >= index)
        await groups._ticks(net, "n4", 15)  # however long it waits...
        await n4.retire_removed()  # ...and a pass of the retirer (it runs every second, too)
        assert os.path.isdir(n4_log) and groups.PID in n4.replicas  # not before
        # The removal commits while n4 hears nothing; the leader still tells it after.
        net.cut.add("n4")
        net.lose = lambda src, dst, m: False
        await groups._until(lambda: leader.core.membership == Membership(nodes))
        await groups._ticks(net, "n4", 5)
        assert await n4.retire_removed() == [] and os.path.isdir(n4_log)
        net.cut.clear()
        await groups._until(lambda: n4.retired == 1, timeout_s=30)  # after the deletion
        assert not os.path.exists(directory) and not os.path.exists(directory + ".deleting")
        assert groups.PID not in n4.replicas
        assert n4.partitions.retired(groups.PID)  # a replayed creation will not reopen it
        refusal = n4.not_here(groups.PID, 3)
        assert refusal.code is ErrorCode.NOT_LEADER and refusal.leader in nodes

    groups._run(tmp_path, scenario)


def test_a_replica_that_applied_its_removal_keeps_its_vote_until_the_leader_says_so(
    tmp_path: Path,
) -> None:
    """n4 joins, votes, and is removed; its log applies the removal, but no
    heartbeat telling it the removal is final gets through. Its replica (its
    term and vote) stays, however long it waits: it used to go after 10 s of
    quiet, judged on its own log, which is wrong for a node added back and
    promoted meanwhile, as n4 then is. Removed once more with the leader's
    word getting through, it deletes its files."""
    nodes = groups.NODES
    four = Membership((*nodes, "n4"))

    async def scenario(net: groups.FakeNetwork) -> None:
        await groups._produce(net, b"x")
        n4 = _n4(tmp_path, net)
        await groups._change(net, lambda c: c.add_learner("n4"), Membership(nodes, ("n4",)))
        await groups._change(net, lambda c: c.promote_learner("n4"), four)
        await groups._until(lambda: groups.PID in n4.replicas)
        replica = n4.replicas[groups.PID]
        directory = n4.partitions.directory(groups.PID)
        net.lose = lambda src, dst, m: dst == "n4" and m.removed
        await groups._change(net, lambda c: c.remove_node("n4"), Membership(nodes))
        await groups._until(lambda: "n4" not in replica.group.core.membership.members)
        await groups._ticks(net, "n4", 30)  # heartbeat rounds, and n4 asks to be told
        assert await n4.retire_removed() == []
        assert os.path.isdir(directory) and n4.replicas[groups.PID] is replica
        await groups._change(net, lambda c: c.add_learner("n4"), Membership(nodes, ("n4",)))
        await groups._change(net, lambda c: c.promote_learner("n4"), four)
        await groups._until(lambda: replica.group.core.membership == four)
        assert await n4.retire_removed() == [] and os.path.isdir(directory)
        net.lose = lambda src, dst, m: False
        await groups._change(net, lambda c: c.remove_node("n4"), Membership(nodes))
        await groups._until(lambda: n4.retired == 1, timeout_s=30)  # after the deletion
        assert not os.path.exists(directory) and not os.path.exists(directory + ".deleting")

    groups._run(tmp_path, scenario)


def test_a_replica_retired_while_its_leader_still_tells_it_stays_retired_until_added_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22's stuck write decisions group: n4 deletes its replica once
    its removal is final while the leader still tracks it as departing (its
    answers are lost here, so the leader keeps telling it). Neither those
    heartbeats nor a record committed meanwhile open a replica again (one
    used to: a learner of the leader alone, which nobody fed, for good).
    Added back before the leader forgot it, n4 opens the group again and
    gets the whole log."""
    monkeypatch.setattr(core_module, "DEPARTING_HEARTBEATS_MAX", 1_000_000)
    nodes = groups.NODES

    async def scenario(net: groups.FakeNetwork) -> None:
        acked = [await groups._produce(net, b"before")]
        n4 = _n4(tmp_path, net)
        await groups._change(net, lambda c: c.add_learner("n4"), Membership(nodes, ("n4",)))
        await groups._until(lambda: groups.PID in n4.replicas)
        directory = n4.partitions.directory(groups.PID)
        heard: list[Message] = []

        def lose_n4s_answers(src: str, dst: str, message: Message) -> bool:
            if dst == "n4":
                heard.append(message)
            return src == "n4" and message.kind == HEARTBEAT_RESP

        net.lose = lose_n4s_answers
        await groups._change(net, lambda c: c.remove_node("n4"), Membership(nodes))
        await groups._until(lambda: n4.retired == 1)  # its retirer runs every second
        since = len(heard)
        acked.append(await groups._produce(net, b"after the removal"))
        await groups._until(  # still told, of a commit past that record too
            lambda: any(m.removed and m.index >= acked[-1][0] for m in heard[since:])
        )
        told = len(heard)  # what those messages would have opened, five more of them:
        await groups._until(lambda: len(heard) >= told + 5, what="five more messages to n4")
        assert groups.PID not in n4.replicas and not os.path.isdir(directory)
        assert n4.partitions.retired(groups.PID)
        leader = await groups._until(lambda: groups._leader(net))
        assert "n4" in leader.core.status().progress  # departing: not forgotten yet
        net.lose = lambda src, dst, message: False
        await groups._change(net, lambda c: c.add_learner("n4"), Membership(nodes, ("n4",)))
        group = await groups._until(lambda: n4.host.groups.get(groups.PID))
        await groups._until(lambda: group.committed_end > acked[-1][0])
        assert group.core.membership == Membership(nodes, ("n4",))
        values = [value for _, _, value in await groups._records(n4.host)]
        assert values == [b"before", b"after the removal"]

    groups._run(tmp_path, scenario)


def test_a_gossip_cluster_opens_no_group_for_a_request_on_placements_guess(
    tmp_path: Path,
) -> None:
    """Placement names n4 (a move's target) before the group added it: a
    request there is sent elsewhere, not served by a group opened on the
    guess (which would count itself a voter)."""

    async def scenario() -> None:
        members = [Node(n, "127.0.0.1", 1) for n in groups.NODES]
        view = NodeView(1, (*members, Node("n4", "127.0.0.1", 1, weight=1e9)))
        replication = ShardGroups(
            view,
            PeerAuth.from_secret("n4", None),
            0,
            1,
            PartitionManager(str(tmp_path), CONFIG, SyscallBackend(), owns=lambda pid: True),
            1 << 20,
            (2,),
        )
        pid = min(KNOWN)
        try:
            assert replication.holds(pid, 3) and replication.serves(pid, 3)  # static: opens
            replication.follow_membership(lambda p: 3, 1000)
            assert replication.holds(pid, 3) and not replication.serves(pid, 3)
            refusal = replication.not_here(pid, 3)
            assert refusal.leader in groups.NODES  # not itself
        finally:
            await replication.close()

    asyncio.run(scenario())
