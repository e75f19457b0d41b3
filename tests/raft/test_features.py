"""Scenarios beyond the paper's core: pre-vote, check-quorum, leader transfer,
learners and install-from-index, removing the leader, ReadIndex, quiescence,
restarts, and the API contract (Ready duties, errors)."""

from __future__ import annotations

import itertools
import random

import pytest

from laminar.raft import (
    FOLLOWER,
    HEARTBEAT_KINDS,
    LEADER,
    NOOP,
    NORMAL,
    ConfigChangeRefused,
    Entry,
    HardState,
    MemoryStorage,
    Message,
    NotLeader,
    ProposalDropped,
    RaftConfig,
    RaftCore,
    RaftError,
    Ready,
    ReadyOutstanding,
)
from laminar.raft.budget import ByteBudget
from laminar.raft.core import DEPARTING_TOLD
from laminar.raft.messages import (
    APPEND,
    APPEND_RESP,
    HEARTBEAT,
    HEARTBEAT_RESP,
    INSTALL,
    PRE_VOTE,
    PRE_VOTE_RESP,
    QUIESCE,
)

from .harness import Cluster


def test_the_api_as_the_issue_prints_it() -> None:
    storage = MemoryStorage()
    core = RaftCore(
        RaftConfig(
            node_id="n1",
            voters=("n1",),
            election_ticks=10,
            heartbeat_ticks=1,
            pre_vote=True,
            check_quorum=True,
        ),
        storage,
        random.Random(1),
    )
    applied: list[Entry] = []
    for _ in range(25):
        core.tick()
        while core.has_ready():
            rd = core.ready()
            storage.append(rd.entries)
            if rd.hard_state is not None:
                storage.set_hard_state(rd.hard_state)
            assert rd.messages == ()  # a group of one sends nothing
            applied.extend(rd.committed)
            core.advance(rd)
    st = core.status()
    assert (st.role, st.term, st.leader) == (LEADER, 1, "n1")
    index = core.propose(b"payload")
    while core.has_ready():
        rd = core.ready()
        storage.append(rd.entries)
        if rd.hard_state is not None:
            storage.set_hard_state(rd.hard_state)
        applied.extend(rd.committed)
        core.advance(rd)
    assert [(e.index, e.data, e.kind) for e in applied] == [(1, b"", NOOP), (2, b"payload", NORMAL)]
    assert index == 2 and core.status().commit == 2
    assert storage.initial_state() == HardState(1, "n1", 2)


# -- pre-vote and check-quorum -----------------------------------------------------


@pytest.mark.parametrize("check_quorum", [False, True])
def test_pre_vote_a_partitioned_node_rejoins_without_inflating_terms_or_disrupting(
    check_quorum: bool,
) -> None:
    cluster = Cluster(3, check_quorum=check_quorum)
    cluster.elect("n1")
    term = cluster.cores["n1"].term
    cluster.isolate("n3")
    cluster.tick(100)
    assert cluster.cores["n3"].term == term  # pre-votes never succeed alone
    assert cluster.cores["n3"].role in ("pre_candidate", FOLLOWER)
    cluster.heal()
    cluster.tick(5)
    assert cluster.leader() == "n1" and cluster.cores["n1"].term == term
    assert {c.term for c in cluster.cores.values()} == {term}
    cluster.propose("n1", b"after")
    cluster.tick(2)
    assert cluster.data("n3") == [b"after"]


def test_without_pre_vote_a_rejoining_node_disrupts_the_leader() -> None:
    """The contrast that shows what pre-vote is for."""
    cluster = Cluster(3, pre_vote=False, check_quorum=False)
    cluster.elect("n1")
    term = cluster.cores["n1"].term
    cluster.isolate("n3")
    cluster.tick(100)
    assert cluster.cores["n3"].term > term + 2
    cluster.heal()
    cluster.tick(25)
    assert cluster.cores["n1"].term > term + 2  # deposed by the higher term


def test_check_quorum_an_isolated_leader_steps_down_within_an_election_timeout() -> None:
    cluster = Cluster(3, election_ticks=10)
    cluster.elect("n1")
    cluster.isolate("n1")
    cluster.tick(20, nodes=("n1",))
    assert cluster.cores["n1"].role == FOLLOWER
    with pytest.raises(NotLeader):
        cluster.cores["n1"].propose(b"x")


def test_check_quorum_followers_that_hear_a_leader_ignore_vote_requests() -> None:
    cluster = Cluster(3, pre_vote=False, check_quorum=True)
    cluster.elect("n1")
    term = cluster.cores["n1"].term
    cluster.cores["n3"].campaign()  # a disruptive candidate at term + 1
    cluster.drain()
    assert cluster.cores["n2"].term == term  # in lease: ignored
    assert cluster.cores["n1"].role == LEADER


# -- leader transfer ---------------------------------------------------------------


def test_leader_transfer_hands_over_at_once_to_an_up_to_date_voter() -> None:
    cluster = Cluster(3)
    old = cluster.elect("n1")
    cluster.propose("n1", b"a")
    old.transfer_leadership("n2")
    cluster.drain()
    assert cluster.leader() == "n2"
    assert cluster.cores["n2"].term == old.term
    assert old.role == FOLLOWER and old.leader == "n2"
    cluster.propose("n2", b"b")
    cluster.tick(2)
    assert cluster.data("n1") == [b"a", b"b"]


def test_leader_transfer_catches_a_lagging_target_up_first_and_refuses_proposals() -> None:
    cluster = Cluster(3)
    leader = cluster.elect("n1")
    cluster.isolate("n3")
    cluster.propose("n1", b"a")
    cluster.heal()
    leader.transfer_leadership("n3")
    with pytest.raises(ProposalDropped):
        leader.propose(b"during")
    cluster.drain()
    cluster.tick(3)
    assert cluster.leader() == "n3"
    assert b"a" in cluster.data("n3")


def test_leader_transfer_to_a_dead_node_is_abandoned_after_an_election_timeout() -> None:
    cluster = Cluster(3, election_ticks=10)
    leader = cluster.elect("n1")
    cluster.crash("n3")
    cluster.propose("n1", b"a")
    leader.transfer_leadership("n3")
    cluster.tick(12)
    assert leader.role == LEADER and leader.status().transferee is None
    leader.propose(b"b")  # accepted again


# -- membership ---------------------------------------------------------------------


def test_learner_catches_up_from_below_the_leaders_retained_index_and_is_promoted() -> None:
    cluster = Cluster(3)
    leader = cluster.elect("n1")
    for i in range(20):
        leader.propose(f"v{i}".encode())
    cluster.drain()
    cluster.tick(2)
    cluster.storages["n1"].compact(15)  # retention dropped [1, 15] on the leader
    index = leader.add_learner("n4")
    cluster.drain()
    cluster.add_node("n4", ("n1", "n2", "n3"), ("n4",))
    cluster.tick(5)
    installs = [m for m in cluster.sent if m.kind == INSTALL and m.dst == "n4"]
    assert installs and installs[0].index == 15
    storage = cluster.storages["n4"]
    assert storage.first_index() == 16 and storage.last_index() == leader.log.last_index()
    assert cluster.data("n4") == [f"v{i}".encode() for i in range(14, 20)]  # after the anchor
    assert leader.status().progress["n4"].match == leader.log.last_index() >= index
    # A learner does not count: with n2 and n3 down nothing commits.
    cluster.crash("n2")
    cluster.crash("n3")
    cluster.tick(1)
    stuck = leader.propose(b"needs a voter")
    cluster.tick(3)
    assert leader.status().commit < stuck
    cluster.restart("n2")
    cluster.tick(3)
    leader.promote_learner("n4")
    cluster.tick(3)
    assert leader.status().voters == ("n1", "n2", "n3", "n4")
    assert cluster.cores["n4"].status().voters == ("n1", "n2", "n3", "n4")


def test_install_carries_the_membership_in_effect_at_the_anchor() -> None:
    cluster = Cluster(3)
    leader = cluster.elect("n1")
    leader.add_learner("n4")
    cluster.drain()
    cluster.add_node("n4", ("n1", "n2", "n3"), ("n4",))
    cluster.tick(3)
    cluster.crash("n4")  # n4 misses its own promotion
    leader.promote_learner("n4")
    cluster.tick(3)
    for i in range(5):
        leader.propose(f"v{i}".encode())
    cluster.tick(3)
    cluster.storages["n1"].compact(leader.log.applied)
    cluster.storages["n4"] = MemoryStorage()  # a brand-new replica on another disk
    cluster.add_node("n4", ("n1", "n2", "n3"), ("n4",))  # what the shell knew
    cluster.tick(5)
    assert cluster.storages["n4"].first_index() > 1  # it was installed
    assert cluster.cores["n4"].status().voters == ("n1", "n2", "n3", "n4")


def test_removing_the_leader_makes_it_step_down_and_the_rest_elect_a_new_one() -> None:
    cluster = Cluster(3)
    leader = cluster.elect("n1")
    leader.remove_node("n1")
    cluster.drain()
    cluster.tick(2)
    assert leader.role == FOLLOWER
    assert leader.status().voters == ("n2", "n3")
    new = cluster.wait_for_leader(max_ticks=100)
    assert new in ("n2", "n3")
    cluster.propose(new, b"without n1")
    cluster.tick(2)
    other = "n3" if new == "n2" else "n2"
    assert cluster.data(other)[-1] == b"without n1"
    cluster.tick(50)
    assert leader.role == FOLLOWER  # a removed node never campaigns


def test_a_removed_follower_learns_that_its_removal_committed() -> None:
    """Its shell deletes its files on that news (and only on it), so the leader
    keeps telling it (appends up to the removal, then heartbeats carrying the
    commit) before it forgets the node."""
    cluster = Cluster(3)
    leader = cluster.elect("n1")
    cluster.isolate("n3")
    index = leader.remove_node("n3")
    cluster.tick(3)
    assert leader.status().voters == ("n1", "n2")  # committed by n1 and n2 alone
    assert cluster.cores["n3"].status().voters == ("n1", "n2", "n3")
    cluster.heal()
    cluster.tick(3)
    removed = cluster.cores["n3"].status()
    assert removed.voters == ("n1", "n2") and removed.applied >= index
    cluster.tick(1)  # a heartbeat once the leader knows n3 holds its removal
    assert cluster.cores["n3"].removal_confirmed  # the leader's word: the removal is final
    cluster.tick(DEPARTING_TOLD + 1)
    assert "n3" not in leader.status().progress  # told enough: forgotten
    cluster.tick(50)
    assert cluster.cores["n3"].role == FOLLOWER  # a removed node never campaigns


def test_a_removed_follower_learns_its_removal_from_a_leader_that_never_knew_it() -> None:
    """The leader that removed n4 fails before telling it: the new leader does
    not know n4 departed. n4, whose membership still names it a voter,
    campaigns; the leader that gets its vote request sends it the log up to
    its removal and the commit, so its shell can delete its files."""
    cluster = Cluster(4)
    leader = cluster.elect("n1")
    cluster.isolate("n4")
    index = leader.remove_node("n4")
    cluster.tick(3)
    assert leader.status().voters == ("n1", "n2", "n3")
    cluster.crash("n1")
    cluster.heal()
    new = cluster.wait_for_leader(max_ticks=200)
    assert new in ("n2", "n3") and "n4" not in cluster.cores[new].status().progress
    cluster.tick(60)  # n4 times out and asks for votes
    removed = cluster.cores["n4"].status()
    assert removed.voters == ("n1", "n2", "n3") and removed.applied >= index
    assert cluster.leader() == new  # it never disturbed the leader
    cluster.tick(DEPARTING_TOLD + 1)
    assert "n4" not in cluster.cores[new].status().progress


def test_a_removed_follower_that_applied_its_removal_asks_until_a_leader_confirms_it() -> None:
    """n4 applies its removal (an append carried the commit) but the leader
    fails before a heartbeat says the removal is final, and n4 no longer
    campaigns (it is no voter in what it applied). Its own log is not enough
    (it may have been added back since), so it asks the voters it knows with
    a pre-vote; the new leader takes it as departing and tells it."""
    cluster = Cluster(4)
    leader = cluster.elect("n1")
    leader.remove_node("n4")
    cluster.drain()
    n4 = cluster.cores["n4"]
    assert "n4" not in n4.membership.members and not n4.removal_confirmed
    cluster.crash("n1")
    new = cluster.wait_for_leader(max_ticks=200)
    assert "n4" not in cluster.cores[new].status().progress
    cluster.tick(60)
    assert n4.removal_confirmed
    assert cluster.leader() == new  # asking disturbed nobody


def test_a_departing_node_that_holds_its_removal_gets_only_heartbeats_telling_it() -> None:
    """Its shell deletes its replica on that news, and opens a fresh one on a
    leader's message that might be a move's: so once it holds its removal,
    nothing after it goes there, only heartbeats saying the removal is final
    (here for as long as its answers do not reach the leader)."""
    cluster = Cluster(4)
    leader = cluster.elect("n1")
    # Its answers to heartbeats are lost: the leader keeps telling it.
    cluster.lose = lambda m: m.src == "n4" and m.kind == HEARTBEAT_RESP
    index = leader.remove_node("n4")
    cluster.tick(3)
    assert cluster.cores["n4"].removal_confirmed
    sent = len(cluster.sent)
    cluster.propose("n1", b"after the removal")
    cluster.tick(3)
    to_n4 = [m for m in cluster.sent[sent:] if m.dst == "n4"]
    assert to_n4 and all(m.kind == HEARTBEAT and m.removed and m.hint == index for m in to_n4)
    assert cluster.data("n2")[-1] == b"after the removal"


def test_a_departing_node_added_back_is_sent_the_log_from_scratch() -> None:
    """n4 is removed and deletes its replica while the leader still tells it
    (it keeps n4's progress for that); the group adds n4 back before the
    leader forgot it. What the leader knew of n4's log went with its replica:
    n4 gets the whole log again, not appends after its old match (which its
    empty log would refuse for good)."""
    cluster = Cluster(4)
    leader = cluster.elect("n1")
    cluster.propose("n1", b"before")
    cluster.lose = lambda m: m.src == "n4" and m.kind == HEARTBEAT_RESP
    leader.remove_node("n4")
    cluster.tick(3)
    assert cluster.cores["n4"].removal_confirmed and "n4" in leader.status().progress
    cluster.crash("n4")
    del cluster.storages["n4"]  # its shell retired the replica: files and all
    cluster.lose = lambda m: False
    cluster.add_node("n4", ("n1",), ("n4",))  # a fresh replica, opened on a message
    leader.add_learner("n4")
    cluster.tick(5)
    assert cluster.data("n4") == [b"before"]
    assert cluster.cores["n4"].membership == leader.membership


def test_a_replica_added_back_fresh_never_elects_itself_on_a_membership_it_replays() -> None:
    """The group began as n1 alone, grew to n1-n3 and moved off n1; n1 is
    added back with an empty log. Catching up, n1 applies the first entries,
    whose membership has n1 as the only voter. If the leader dies then, n1
    must not win an election alone on that old membership: it would lead
    without the group's committed entries and overwrite them on n2 and n3."""
    cluster = Cluster(1, max_append_bytes=1)  # an entry per append: n1 can stop anywhere
    leader = cluster.elect("n1")
    for node in ("n2", "n3"):
        cluster.add_node(node, leader.status().voters, (node,))
        leader.add_learner(node)
        cluster.tick(2)
        leader.promote_learner(node)
        cluster.tick(2)
    cluster.propose("n1", b"committed by n1-n3")
    leader.transfer_leadership("n2")
    cluster.tick(3)
    leader = cluster.cores["n2"]
    assert leader.role == LEADER
    leader.remove_node("n1")
    cluster.tick(3)
    cluster.propose("n2", b"committed by n2 and n3")
    cluster.crash("n1")
    del cluster.storages["n1"]
    first_growth = 2  # n1 alone, then n1 with the learner n2: still n1 the only voter
    cluster.lose = lambda m: (
        m.dst == "n1"
        and m.kind == APPEND
        and m.index + len(m.entries) > first_growth
        and bool(m.entries)
    )
    cluster.add_node("n1", leader.status().voters, ("n1",))
    leader.add_learner("n1")
    cluster.tick(3)
    n1 = cluster.cores["n1"]
    assert n1.log.applied == first_growth and n1.status().voters == ("n1",)
    assert n1.leader_commit is not None and n1.leader_commit > first_growth
    cluster.crash("n2")
    cluster.crash("n3")
    sent = len(cluster.sent)
    cluster.tick(50)
    assert n1.role != LEADER
    assert not [m for m in cluster.sent[sent:] if m.src == "n1" and m.kind == APPEND]


def test_membership_changes_are_one_step_at_a_time() -> None:
    cluster = Cluster(3)
    leader = cluster.elect("n1")
    with pytest.raises(ConfigChangeRefused, match="learners first"):
        leader.propose_membership(("n1", "n2", "n3", "n4"))
    with pytest.raises(ConfigChangeRefused, match="one change at a time"):
        leader.propose_membership(("n1",))
    leader.add_learner("n4")
    with pytest.raises(ConfigChangeRefused, match="not applied yet"):
        leader.add_learner("n5")
    cluster.drain()
    leader.add_learner("n5")  # the first is applied now
    with pytest.raises(NotLeader) as refusal:
        cluster.cores["n2"].add_learner("n6")
    assert refusal.value.leader_hint == "n1"


# -- reads ------------------------------------------------------------------------


def test_read_index_is_confirmed_by_a_heartbeat_quorum() -> None:
    cluster = Cluster(3)
    leader = cluster.elect("n1")
    index = cluster.propose("n1", b"x")
    request = leader.read_index()
    cluster.drain()
    assert [(r.request_id, r.index) for r in cluster.read_states["n1"]] == [(request, index)]
    with pytest.raises(NotLeader):
        cluster.cores["n2"].read_index()


def test_read_index_on_a_deposed_leader_is_never_confirmed_and_is_dropped() -> None:
    cluster = Cluster(3, check_quorum=False)
    old = cluster.elect("n1")
    cluster.isolate("n1")
    request = old.read_index()
    cluster.tick(3)
    assert cluster.read_states["n1"] == []
    cluster.elect("n2")
    cluster.propose("n2", b"newer")
    cluster.heal()
    cluster.tick(3)
    assert old.role == FOLLOWER
    assert cluster.read_states["n1"] == []
    assert cluster.dropped_reads["n1"] == [request]


def test_a_new_leader_confirms_reads_only_after_committing_in_its_term() -> None:
    cluster = Cluster(3, check_quorum=False)
    cluster.elect("n1")
    cluster.propose("n1", b"x")
    cluster.tick(2)
    cluster.isolate("n1")
    leader = cluster.cores["n2"]
    leader.campaign()
    cluster.pump("n2")
    cluster.deliver_queued()  # the (pre-)vote request reaches n3
    cluster.pump("n3")
    cluster.deliver_queued()
    if leader.role != LEADER:  # with pre-vote: one more round for the real vote
        cluster.pump("n2")
        cluster.deliver_queued()
        cluster.pump("n3")
        cluster.deliver_queued()
    assert leader.role == LEADER
    request = leader.read_index()
    cluster.cut.add(("n2", "n3"))  # its no-op cannot commit
    cluster.tick(3, nodes=("n2", "n3"))
    assert cluster.read_states["n2"] == []
    cluster.cut.discard(("n2", "n3"))
    cluster.tick(3, nodes=("n2", "n3"))
    (read,) = cluster.read_states["n2"]
    assert read.request_id == request and read.index == leader.log.last_index()


# -- quiescence ---------------------------------------------------------------------


def test_an_idle_group_quiesces_and_wakes_on_a_proposal() -> None:
    cluster = Cluster(3)
    leader = cluster.elect("n1")
    cluster.propose("n1", b"x")
    cluster.tick(2)
    assert leader.quiesce()
    cluster.drain()
    assert all(c.status().quiesced for c in cluster.cores.values())
    sent = len(cluster.sent)
    cluster.tick(100)
    assert len(cluster.sent) == sent  # no heartbeats, no elections
    cluster.propose("n1", b"y")
    cluster.tick(2)
    assert not any(c.status().quiesced for c in cluster.cores.values())
    assert cluster.data("n3") == [b"x", b"y"]


def test_quiesced_followers_elect_a_new_leader_once_woken() -> None:
    cluster = Cluster(3)
    leader = cluster.elect("n1")
    cluster.tick(2)
    assert leader.quiesce()
    cluster.drain()
    cluster.crash("n1")
    cluster.tick(100)
    assert cluster.leader() is None  # quiesced: nobody notices on their own
    for node in ("n2", "n3"):
        cluster.cores[node].wake()  # the shell learned n1's node is down
    assert cluster.wait_for_leader() in ("n2", "n3")


def test_quiesce_refuses_while_a_follower_lags() -> None:
    cluster = Cluster(3)
    leader = cluster.elect("n1")
    cluster.isolate("n3")
    cluster.propose("n1", b"x")
    assert not leader.quiesce()
    assert not [m for m in cluster.sent if m.kind == QUIESCE]


# -- restarts -------------------------------------------------------------------------


def test_a_restart_redelivers_committed_entries_from_the_first_index() -> None:
    cluster = Cluster(3)
    cluster.elect("n1")
    for data in (b"a", b"b"):
        cluster.propose("n1", data)
    cluster.tick(2)
    cluster.crash("n2")
    cluster.restart("n2")
    cluster.drain()
    assert [e.index for e in cluster.applied["n2"]] == [1, 2, 3]
    cluster.crash("n3")
    cluster.restart("n3", applied=2)
    cluster.drain()
    assert [e.index for e in cluster.applied["n3"]] == [3]


def test_a_restarted_follower_learns_how_far_the_group_committed_before_it_applies() -> None:
    """Its own commit index predates what was committed while it was down, so
    it is no measure of "caught up": the first word from the leader, even a
    heartbeat that may not raise its commit, tells it the leader's."""
    cluster = Cluster(3)
    cluster.elect("n1")
    cluster.propose("n1", b"a")
    cluster.crash("n3")
    for data in (b"b", b"c"):
        cluster.propose("n1", data)
    leader = cluster.cores["n1"]
    n3 = cluster.restart("n3")
    assert n3.leader_commit is None and leader.leader_commit == leader.log.committed == 4
    leader.tick()  # a heartbeat: its commit is capped at n3's match (2)
    cluster.pump("n1")
    cluster.queue = type(cluster.queue)(m for m in cluster.queue if m.kind == HEARTBEAT)
    cluster.deliver_queued()
    assert n3.log.committed == 2 and n3.leader_commit == 4
    cluster.tick(5)  # the leader resends what n3 missed
    assert cluster.applied["n3"][-1].index == n3.leader_commit == 4


def _lagging_follower_of_a_dead_leader(seed: int = 0) -> tuple[Cluster, RaftCore]:
    """n3 heard n1 lead but got none of its entries (it knows the group
    committed past its log, so it may not campaign); then n1 died."""
    cluster = Cluster(3, seed=seed)
    cluster.elect("n1")
    cluster.lose = lambda m: m.dst == "n3" and m.kind == APPEND
    for data in (b"a", b"b"):
        cluster.propose("n1", data)
    cluster.tick(1, ("n1",))  # a heartbeat reaches n3: it learns the leader's commit
    cluster.crash("n1")
    n3 = cluster.cores["n3"]
    assert n3.leader == "n1" and n3.leader_commit is not None
    assert n3.log.last_index() < n3.leader_commit
    return cluster, n3


@pytest.mark.parametrize("silent_ticks", range(10, 60))
def test_a_follower_that_may_not_campaign_grants_votes_once_its_leader_is_silent(
    silent_ticks: int,
) -> None:
    """Its leader's lease ends with an election timeout of silence, whatever
    the tick a candidate's (pre-)vote arrives at. It once restarted the lease
    at each of its own timeouts: a candidate on the same period as it, its
    pre-votes always in that window, never won (a partition stayed leaderless
    for minutes on a real 4-node cluster)."""
    cluster, n3 = _lagging_follower_of_a_dead_leader()
    for _ in range(silent_ticks):
        n3.tick()
    n2 = cluster.cores["n2"]
    last, last_term = n2.log.last_index(), n2.log.last_term()
    n3.step(Message(PRE_VOTE, "n2", "n3", n2.term + 1, last, last_term))
    answers = [m for m in n3.ready().messages if m.kind == PRE_VOTE_RESP]
    assert [m.reject for m in answers] == [False], f"after {silent_ticks} silent ticks"


def test_a_pre_candidate_draws_a_new_election_timeout_each_time() -> None:
    """Unanswered pre-votes change no term, so nothing else redraws it: on
    one fixed period two replicas would stay in one phase for good."""
    cluster = Cluster(3)
    cluster.elect("n1")
    cluster.crash("n1")
    cluster.crash("n3")
    n2 = cluster.cores["n2"]
    sent_at = []
    for tick in range(400):
        n2.tick()
        if n2.has_ready():
            rd = n2.ready()
            if any(m.kind == PRE_VOTE for m in rd.messages):
                sent_at.append(tick)
            n2.advance(rd)
    gaps = {b - a for a, b in itertools.pairwise(sent_at)}
    assert len(sent_at) > 10 and len(gaps) > 1, sent_at


def test_a_lagging_follower_and_a_candidate_on_one_period_elect_a_leader() -> None:
    """The same, end to end: whatever the draws, the up-to-date replica wins."""
    for seed in range(100):
        cluster, _ = _lagging_follower_of_a_dead_leader(seed)
        assert cluster.wait_for_leader(max_ticks=300) == "n2", f"seed {seed}"


def test_a_restarted_voter_remembers_its_vote() -> None:
    storage = MemoryStorage()
    config = RaftConfig(node_id="n1", voters=("n1", "n2", "n3"), pre_vote=False)
    core = RaftCore(config, storage, random.Random(1))
    core.step(Message("vote", "n2", "n1", 5))
    rd = core.ready()
    assert rd.must_sync and rd.hard_state == HardState(5, "n2", 0)
    storage.set_hard_state(rd.hard_state)
    core.advance(rd)
    again = RaftCore(config, storage, random.Random(2))
    again.step(Message("vote", "n3", "n1", 5))
    (reply,) = again.ready().messages
    assert reply.reject


# -- the contract of Ready and the shell's seams ---------------------------------------


def test_ready_must_be_advanced_before_the_next_and_with_itself() -> None:
    core = RaftCore(RaftConfig(node_id="n1", voters=("n1",)), MemoryStorage(), random.Random(1))
    core.campaign()
    rd = core.ready()
    assert not core.has_ready()
    with pytest.raises(ReadyOutstanding):
        core.ready()
    with pytest.raises(RaftError):
        core.advance(type(rd)())
    core.advance(rd)


def _write_in_flight(cluster: Cluster) -> tuple[int, Ready]:
    """n1 leads; it proposes and takes the Ready, whose write is now in flight."""
    leader = cluster.elect("n1")
    index = leader.propose(b"x")
    rd = leader.ready()
    assert rd.entries[-1].index == index
    return index, rd


def _acknowledge(cluster: Cluster, follower: str, rd: Ready) -> None:
    """`follower` receives the leader's early append, persists it and answers."""
    (append,) = [m for m in rd.messages_before_persist() if m.dst == follower]
    core = cluster.cores[follower]
    core.step(append)
    frd = core.ready()
    assert not frd.messages_before_persist()  # an acknowledgement waits for the write
    cluster.storages[follower].append(frd.entries)
    (ack,) = frd.messages_after_persist()
    core.advance(frd)
    assert ack.kind == APPEND_RESP and not ack.reject
    cluster.cores["n1"].step(ack)


def test_a_leader_sends_its_appends_before_its_write_but_counts_it_only_after() -> None:
    """Raft thesis 10.2.1: the appends go out while the leader persists the same
    entries; one follower's acknowledgement is then not a majority, because the
    leader's own copy counts only once `advance` says it is durable (were it
    counted, a power cut on the leader now would leave a commit on one disk)."""
    cluster = Cluster(3)
    index, rd = _write_in_flight(cluster)
    assert {(m.kind, m.dst) for m in rd.messages_before_persist()} == {
        (APPEND, "n2"),
        (APPEND, "n3"),
    }
    assert not rd.messages_after_persist()
    leader = cluster.cores["n1"]
    _acknowledge(cluster, "n2", rd)
    assert leader.status().commit < index
    cluster.storages["n1"].append(rd.entries)
    leader.advance(rd)
    assert leader.status().commit == index


def test_a_commit_by_the_followers_alone_survives_a_power_cut_on_the_leader() -> None:
    cluster = Cluster(3)
    index, rd = _write_in_flight(cluster)
    _acknowledge(cluster, "n2", rd)
    _acknowledge(cluster, "n3", rd)
    assert cluster.cores["n1"].status().commit == index  # the followers are a majority
    cluster.crash("n1")  # before its own write: the entry never reached its disk
    assert cluster.storages["n1"].last_index() < index
    cluster.cores["n2"].campaign()
    cluster.drain()
    cluster.restart("n1")
    cluster.propose(cluster.wait_for_leader(), b"y")
    for node in ("n1", "n2", "n3"):
        assert cluster.data(node)[-2:] == [b"x", b"y"], node


def test_a_commit_only_change_needs_no_sync() -> None:
    storage = MemoryStorage()
    follower = RaftCore(
        RaftConfig(node_id="n2", voters=("n1", "n2", "n3")), storage, random.Random(1)
    )
    follower.step(Message("append", "n1", "n2", 1, 0, 0, (Entry(1, 1, b"x"),)))
    rd = follower.ready()
    assert rd.must_sync and rd.entries == (Entry(1, 1, b"x"),)
    storage.append(rd.entries)
    follower.advance(rd)
    follower.step(Message(HEARTBEAT, "n1", "n2", 1, commit=1))
    rd = follower.ready()
    assert rd.hard_state == HardState(1, None, 1) and not rd.must_sync and not rd.entries
    assert rd.committed == (Entry(1, 1, b"x"),)


def test_heartbeats_carry_only_what_a_shell_coalesces() -> None:
    cluster = Cluster(3)
    cluster.elect("n1")
    cluster.tick(3)
    beats = [m for m in cluster.sent if m.kind in HEARTBEAT_KINDS]
    assert beats
    assert all(not m.entries and not m.reject and not m.hint and not m.data for m in beats)
    leader = cluster.cores["n1"]
    assert all(m.index == leader.log.committed for m in beats if m.kind == HEARTBEAT)
    per_tick = [m for m in beats if m.kind == HEARTBEAT and m.src == "n1"]
    assert len({m.dst for m in per_tick}) == 2


def test_messages_for_another_node_or_of_unknown_kind_are_refused() -> None:
    core = RaftCore(
        RaftConfig(node_id="n1", voters=("n1", "n2")), MemoryStorage(), random.Random(1)
    )
    with pytest.raises(ValueError, match="for 'n2'"):
        core.step(Message(HEARTBEAT, "n1", "n2", 1))
    with pytest.raises(ValueError, match="unknown message kind"):
        core.step(Message("gossip", "n2", "n1", 1))


def test_a_learner_is_copied_within_the_move_budget_per_tick() -> None:
    """Moves are rate-limited: with a shared byte budget, each tick sends a
    learner at most that many bytes of entries (one entry may overdraw it),
    and the learner still catches up; voters are not limited."""
    cluster = Cluster(3)
    leader = cluster.elect("n1")
    for i in range(40):
        leader.propose(b"%03d" % i + b"x" * 97)  # 100 bytes each
    cluster.drain()
    budget = ByteBudget(250)
    leader.learner_budget = budget
    leader.add_learner("n4")
    cluster.drain()
    cluster.add_node("n4", ("n1", "n2", "n3"), ("n4",))
    per_tick = []
    for _ in range(40):
        before = len(cluster.sent)
        budget.refill()
        cluster.tick(1)
        per_tick.append(
            sum(
                len(e.data)
                for m in cluster.sent[before:]
                if m.dst == "n4" and m.kind == APPEND
                for e in m.entries
            )
        )
    assert max(per_tick) <= 250 + 100 and sum(per_tick) >= 4000
    assert cluster.data("n4") == cluster.data("n1")
    assert budget.sent_bytes == sum(per_tick)


def test_a_leader_counts_its_own_entry_only_once_it_is_persisted() -> None:
    """Thesis 10.2.1: the leader's appends go out before its own write, so a
    follower may acknowledge an entry the leader has not persisted yet. That
    acknowledgement alone is no majority of three: the entry commits only
    once the leader's own Ready is advanced (its fsync done)."""
    cluster = Cluster(3)
    leader = cluster.elect("n1")
    index = leader.propose(b"x")
    rd = leader.ready()
    assert [e.index for e in rd.entries] == [index]
    appends = [m for m in rd.messages_before_persist() if m.kind == APPEND and m.dst == "n2"]
    assert appends, "the append goes out before the leader persists"
    for message in appends:  # n2 persists and answers; n3 hears nothing
        cluster.cores["n2"].step(message)
    cluster.pump("n2")
    for answer in [m for m in cluster.queue if m.dst == "n1" and m.kind == APPEND_RESP]:
        leader.step(answer)
    assert leader.log.committed < index, "committed on one follower's disk and no leader's"
    cluster.storages["n1"].append(rd.entries)
    leader.advance(rd)
    assert leader.log.committed >= index
