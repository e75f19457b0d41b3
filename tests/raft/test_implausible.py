"""Messages no correct member sends are refused and reported, never acted on
(issue 24, finding 2: one forged INSTALL per replica erased a partition);
legitimate large jumps (a replica back from a partition) still get through."""

from __future__ import annotations

from laminar.raft import FOLLOWER, LEADER, HardState, Membership
from laminar.raft.messages import APPEND, HEARTBEAT, INSTALL, Entry, Message

from .harness import Cluster

BIG = 10**6


def _committed_cluster(records: int = 20, **config: object) -> Cluster:
    cluster = Cluster(3, **config)
    leader = cluster.elect("n1")
    for i in range(records):
        leader.propose(f"v{i}".encode())
    cluster.drain()
    cluster.tick(2)
    return cluster


def _install(src: str, dst: str, term: int, anchor: int, anchor_term: int) -> Message:
    membership = Membership(("n1", "n2", "n3")).encode()
    return Message(INSTALL, src, dst, term, anchor, anchor_term, (), commit=anchor, data=membership)


def test_5_1_a_forged_install_at_a_far_term_erases_nothing_and_is_reported() -> None:
    """The attack on main: term 10^6, anchor 10^6, from a node that never led."""
    cluster = _committed_cluster()
    before = cluster.log_of("n2")
    term = cluster.cores["n2"].term
    cluster.cores["n2"].step(_install("n3", "n2", BIG, BIG, BIG))
    cluster.drain()
    assert cluster.log_of("n2") == before and cluster.cores["n2"].term == term
    (anomaly,) = cluster.anomalies["n2"]
    assert anomaly.refused and anomaly.message.src == "n3"
    assert f"term {BIG} is {BIG - term} past this replica's term {term}" in anomaly.reason
    # The group goes on as if nothing happened.
    cluster.propose("n1", b"after")
    assert cluster.data("n2")[-1] == b"after"


def test_5_2_a_second_leader_in_a_term_is_refused() -> None:
    """Election Safety: n1 leads this term, so n3 cannot send a leader's message in it."""
    cluster = _committed_cluster()
    term = cluster.cores["n2"].term
    before = cluster.log_of("n2")
    forged_append = Message(APPEND, "n3", "n2", term, 0, 0, (Entry(1, term, b"forged"),), commit=1)
    cluster.cores["n2"].step(forged_append)
    cluster.cores["n2"].step(_install("n3", "n2", term, BIG, term))
    cluster.drain()
    assert cluster.log_of("n2") == before
    reasons = [a.reason for a in cluster.anomalies["n2"]]
    assert reasons == [f"node n1 leads term {term}, not n3"] * 2
    # The leader itself refuses a rival of its own term.
    cluster.cores["n1"].step(Message(HEARTBEAT, "n3", "n1", term))
    cluster.drain()
    assert cluster.cores["n1"].role == LEADER
    assert cluster.anomalies["n1"][0].reason == f"node n1 leads term {term}, not n3"


def test_an_install_whose_anchor_term_is_impossible_is_refused() -> None:
    """A leader's log holds this replica's committed entry, and log terms never
    decrease: an anchor of an older term, or of a term after the message's, is forged."""
    cluster = _committed_cluster()
    core = cluster.cores["n2"]
    term = core.term
    before = cluster.log_of("n2")
    core.step(_install("n3", "n2", term + 1, BIG, 0))
    core.step(_install("n3", "n2", term + 1, BIG, term + 2))
    cluster.drain()
    assert cluster.log_of("n2") == before
    assert [a.refused for a in cluster.anomalies["n2"]] == [True, True]
    assert all("anchor's term" in a.reason for a in cluster.anomalies["n2"])


def test_an_install_that_discards_committed_entries_is_reported() -> None:
    """Legitimate when the leader's retention removed the records a lagging
    replica committed: it goes ahead, loudly."""
    cluster = _committed_cluster(5)
    cluster.crash("n3")
    leader = cluster.cores["n1"]
    for i in range(5, 20):
        leader.propose(f"v{i}".encode())
    cluster.tick(3)
    cluster.storages["n1"].compact(15)
    cluster.storages["n2"].compact(15)
    cluster.restart("n3")
    cluster.tick(5)
    (anomaly,) = cluster.anomalies["n3"]
    assert not anomaly.refused and anomaly.message.kind == INSTALL
    assert "discards committed entries 1..6" in anomaly.reason
    assert cluster.log_of("n3") == cluster.log_of("n1")


def test_a_learner_back_from_a_partition_accepts_a_large_jump_once_it_is_plausible() -> None:
    """While cut off, learner n4 heard no leader (and a learner never campaigns,
    so only leader messages reach it): the allowance grows with the time
    that took, so it follows the group's far newer term after a while."""
    cluster = Cluster(3, learners=("n4",), term_jump_max=2)
    cluster.elect("n1")
    cluster.propose("n1", b"before")
    cluster.isolate("n4")
    for i in range(6):  # six elections n4 never hears of
        cluster.cores[cluster.wait_for_leader()].transfer_leadership("n2" if i % 2 == 0 else "n1")
        cluster.drain()
    leader = cluster.cores[cluster.wait_for_leader()]
    assert leader.term - cluster.cores["n4"].term > 2
    cluster.heal()
    cluster.tick(1)
    assert cluster.anomalies["n4"] and cluster.anomalies["n4"][0].refused
    cluster.tick(40)  # a few election timeouts: the jump becomes plausible
    n4 = cluster.cores["n4"]
    assert n4.role == FOLLOWER and n4.term == leader.term and n4.leader == leader.id
    cluster.propose(leader.id, b"after the partition")
    assert cluster.data("n4")[-1] == b"after the partition"


def test_a_live_follower_allows_only_term_jump_max() -> None:
    """Hearing its leader keeps the allowance at `term_jump_max`, however long the group runs."""
    cluster = _committed_cluster(1, term_jump_max=5)
    cluster.tick(500)
    core = cluster.cores["n2"]
    core.step(Message(HEARTBEAT, "n3", "n2", core.term + 6))
    core.step(Message(HEARTBEAT, "n1", "n2", core.term + 5))  # within the bound: believed
    cluster.drain()
    assert [a.message.term for a in cluster.anomalies["n2"]] == [core.term + 1]


def test_a_repaired_replica_far_ahead_is_followed() -> None:
    """`laminar repair` starts a rebuilt replica 2**32 terms up: its answer makes
    the leader step down and the group elects in a term past it (campaigns and
    answers to one's own requests may carry any term)."""
    cluster = _committed_cluster(3)
    cluster.crash("n3")
    repaired = cluster.cores["n1"].term + (1 << 32)
    cluster.storages["n3"].set_hard_state(HardState(repaired, None, 0))
    cluster.restart("n3")
    cluster.tick(60)
    leader = cluster.cores[cluster.wait_for_leader()]
    assert leader.term > repaired
    cluster.propose(leader.id, b"after the repair")
    assert all(cluster.data(n)[-1] == b"after the repair" for n in ("n1", "n2", "n3"))
