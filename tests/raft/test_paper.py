"""The Raft paper, section by section (etcd's raft_paper_test.go is the model).

Each test names the section whose sentence it checks. Messages are stepped by
hand where the sentence is about one node; the Cluster harness is used where
it is about the group."""

from __future__ import annotations

import random

import pytest

from laminar.raft import (
    CANDIDATE,
    FOLLOWER,
    LEADER,
    PRE_CANDIDATE,
    Entry,
    HardState,
    MemoryStorage,
    Message,
    RaftConfig,
    RaftCore,
)
from laminar.raft.messages import (
    APPEND,
    APPEND_RESP,
    HEARTBEAT,
    VOTE,
    VOTE_RESP,
)

from .harness import Cluster

IDS = ("n1", "n2", "n3")


def make_core(
    node: str = "n1",
    voters: tuple[str, ...] = IDS,
    storage: MemoryStorage | None = None,
    **settings: object,
) -> RaftCore:
    config = RaftConfig(node_id=node, voters=voters, pre_vote=False, **settings)  # type: ignore[arg-type]
    return RaftCore(config, storage or MemoryStorage(), random.Random(1))


def run_ready(core: RaftCore, storage: MemoryStorage | None = None) -> list[Message]:
    """Persist (if a storage is given) and advance; return the messages."""
    out: list[Message] = []
    while core.has_ready():
        rd = core.ready()
        if storage is not None:
            storage.append(rd.entries)
            if rd.hard_state is not None:
                storage.set_hard_state(rd.hard_state)
        out.extend(rd.messages)
        core.advance(rd)
    return out


def stored(entries: list[tuple[int, int]]) -> MemoryStorage:
    storage = MemoryStorage()
    storage.append([Entry(i, t, f"e{i}".encode()) for i, t in entries])
    return storage


def become_leader(core: RaftCore, storage: MemoryStorage | None = None) -> None:
    core.campaign()
    for m in run_ready(core, storage):
        if m.kind == VOTE:
            core.step(Message(VOTE_RESP, m.dst, core.id, m.term))
    assert core.role == LEADER


# -- 5.1 ----------------------------------------------------------------------


@pytest.mark.parametrize("role", [FOLLOWER, CANDIDATE, LEADER])
def test_5_1_a_newer_term_turns_any_role_into_a_follower(role: str) -> None:
    """5.1: if a server's term is smaller than another's, it updates its term;
    a candidate or leader that learns of a newer term reverts to follower."""
    core = make_core()
    if role == CANDIDATE:
        core.campaign()
    elif role == LEADER:
        become_leader(core)
    core.step(Message(APPEND, "n2", "n1", 5))
    assert (core.role, core.term, core.leader) == (FOLLOWER, 5, "n2")


def test_5_1_a_stale_term_message_is_ignored() -> None:
    """5.1: if a server receives a request with a stale term number, it rejects it."""
    core = make_core()
    core.step(Message(HEARTBEAT, "n2", "n1", 3))
    run_ready(core)
    core.step(Message(APPEND, "n3", "n1", 2, 0, 0, (Entry(1, 2, b"x"),)))
    assert core.log.last_index() == 0
    replies = run_ready(core)
    assert [(m.kind, m.term) for m in replies] == [(APPEND_RESP, 3)]  # tells n3 of term 3


# -- 5.2 ----------------------------------------------------------------------


def test_5_2_servers_start_as_followers() -> None:
    assert make_core().status().role == FOLLOWER


def test_5_2_leader_sends_heartbeats_every_heartbeat_interval() -> None:
    core = make_core(heartbeat_ticks=2)
    become_leader(core)
    run_ready(core)
    core.tick()
    assert not [m for m in run_ready(core) if m.kind == HEARTBEAT]
    core.tick()
    beats = [m for m in run_ready(core) if m.kind == HEARTBEAT]
    assert sorted(m.dst for m in beats) == ["n2", "n3"]


@pytest.mark.parametrize("pre_vote", [False, True])
def test_5_2_a_follower_that_hears_nothing_starts_an_election(pre_vote: bool) -> None:
    """5.2: a follower whose election timeout elapses increments its term,
    votes for itself and asks every other server for its vote (with pre-vote,
    it first asks at term + 1 without changing its term)."""
    core = RaftCore(
        RaftConfig(node_id="n1", voters=IDS, pre_vote=pre_vote), MemoryStorage(), random.Random(3)
    )
    for _ in range(2 * 10):
        core.tick()
    messages = run_ready(core)
    if pre_vote:
        assert core.role == PRE_CANDIDATE and core.term == 0
        assert {(m.kind, m.dst, m.term) for m in messages} == {
            ("pre_vote", "n2", 1),
            ("pre_vote", "n3", 1),
        }
    else:
        assert (core.role, core.term, core.vote) == (CANDIDATE, 1, "n1")
        assert {(m.kind, m.dst, m.term) for m in messages} == {(VOTE, "n2", 1), (VOTE, "n3", 1)}


@pytest.mark.parametrize(
    ("size", "granted", "rejected", "role"),
    [
        (1, 0, 0, LEADER),
        (3, 1, 0, LEADER),
        (3, 0, 2, FOLLOWER),
        (3, 0, 1, CANDIDATE),
        (5, 2, 0, LEADER),
        (5, 1, 2, CANDIDATE),
        (5, 0, 3, FOLLOWER),
    ],
)
def test_5_2_an_election_is_won_lost_or_undecided(
    size: int, granted: int, rejected: int, role: str
) -> None:
    """5.2: a candidate wins with votes from a majority, returns to follower
    when a majority refused, and otherwise keeps waiting."""
    voters = tuple(f"n{i}" for i in range(1, size + 1))
    core = make_core(voters=voters)
    core.campaign()
    run_ready(core)
    others = voters[1:]
    for node in others[:granted]:
        core.step(Message(VOTE_RESP, node, "n1", 1))
    for node in others[granted : granted + rejected]:
        core.step(Message(VOTE_RESP, node, "n1", 1, reject=True))
    assert core.role == role


def test_5_2_a_follower_votes_at_most_once_per_term_first_come_first_served() -> None:
    core = make_core()
    core.step(Message(VOTE, "n2", "n1", 1))
    core.step(Message(VOTE, "n3", "n1", 1))
    core.step(Message(VOTE, "n2", "n1", 1))  # a retry by the same candidate
    replies = [(m.dst, m.reject) for m in run_ready(core) if m.kind == VOTE_RESP]
    assert replies == [("n2", False), ("n3", True), ("n2", False)]
    assert core.vote == "n2"


def test_5_2_a_candidate_steps_down_for_a_leader_of_its_term() -> None:
    core = make_core()
    core.campaign()
    core.step(Message(APPEND, "n2", "n1", 1))
    assert (core.role, core.leader, core.term) == (FOLLOWER, "n2", 1)


def test_5_2_election_timeouts_are_randomized_between_one_and_two_timeouts() -> None:
    """5.2: randomized election timeouts make split votes rare."""
    seen = set()
    for seed in range(60):
        core = RaftCore(
            RaftConfig(node_id="n1", voters=IDS, pre_vote=False, election_ticks=10),
            MemoryStorage(),
            random.Random(seed),
        )
        ticks = 0
        while core.role == FOLLOWER:
            core.tick()
            ticks += 1
        seen.add(ticks)
    assert min(seen) >= 10 and max(seen) < 20 and len(seen) > 5


# -- 5.3 ----------------------------------------------------------------------


def test_5_3_the_leader_appends_replicates_and_commits_after_a_majority() -> None:
    """5.3: the leader appends the command, sends AppendEntries in parallel,
    and once a majority stored it, applies it and tells followers."""
    cluster = Cluster(3)
    leader = cluster.elect("n1")
    cluster.cut.add(("n1", "n3"))
    index = cluster.propose("n1", b"x")
    assert leader.status().commit == index  # n1 + n2 is a majority
    assert cluster.data("n1") == [b"x"] and cluster.data("n2") == [b"x"]
    assert cluster.data("n3") == []
    cluster.heal()
    cluster.cores["n1"].report_unreachable("n3")  # what a shell does when a link breaks
    cluster.tick(2)
    assert cluster.data("n3") == [b"x"]


def test_5_3_followers_apply_committed_entries_in_log_order() -> None:
    cluster = Cluster(3)
    cluster.elect("n1")
    for i in range(10):
        cluster.cores["n1"].propose(f"v{i}".encode())
    cluster.drain()
    cluster.tick(2)
    expected = [f"v{i}".encode() for i in range(10)]
    for node in IDS:
        assert cluster.data(node) == expected
        indices = [e.index for e in cluster.applied[node]]
        assert indices == list(range(1, len(indices) + 1))


@pytest.mark.parametrize(
    ("prev", "accept"),
    [((0, 0), True), ((2, 2), True), ((2, 1), False), ((3, 2), False), ((4, 2), False)],
)
def test_5_3_a_follower_refuses_entries_whose_predecessor_does_not_match(
    prev: tuple[int, int], accept: bool
) -> None:
    """5.3: if the follower does not find an entry with the same index and
    term as the one preceding the new entries, it refuses them."""
    storage = stored([(1, 1), (2, 2)])
    storage.set_hard_state(HardState(2, None, 0))
    core = make_core(storage=storage)
    core.step(Message(APPEND, "n2", "n1", 2, prev[0], prev[1]))
    (reply,) = run_ready(core, storage)
    assert reply.kind == APPEND_RESP and reply.reject is not accept


def test_5_3_a_follower_deletes_a_conflicting_suffix_and_appends() -> None:
    """5.3: an existing entry that conflicts with a new one (same index,
    different term) is deleted with all that follow it."""
    storage = stored([(1, 1), (2, 2), (3, 2)])
    storage.set_hard_state(HardState(3, None, 1))
    core = make_core(storage=storage)
    core.step(Message(APPEND, "n2", "n1", 3, 1, 1, (Entry(2, 3, b"new"),), commit=1))
    run_ready(core, storage)
    assert [(e.index, e.term) for e in storage.entries(1, 3, 1 << 20)] == [(1, 1), (2, 3)]


FIGURE_7_FOLLOWERS = {
    "a": [1, 1, 1, 4, 4, 5, 5, 6, 6],
    "b": [1, 1, 1, 4],
    "c": [1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 6],
    "d": [1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 7, 7],
    "e": [1, 1, 1, 4, 4, 4, 4],
    "f": [1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3],
}


@pytest.mark.parametrize("case", sorted(FIGURE_7_FOLLOWERS))
def test_5_3_figure_7_the_leader_brings_any_follower_log_into_line(case: str) -> None:
    """5.3, Figure 7: whatever a follower's log holds, the leader's log wins."""
    leader_terms = [1, 1, 1, 4, 4, 5, 5, 6, 6, 6]
    cluster = Cluster(3, pre_vote=False)
    for node, terms in (("n1", leader_terms), ("n2", FIGURE_7_FOLLOWERS[case])):
        storage = cluster.storages[node]
        storage.append([Entry(i, t, b"") for i, t in enumerate(terms, 1)])
        storage.set_hard_state(HardState(8, None, 0))
        cluster.restart(node)
    cluster.storages["n3"].set_hard_state(HardState(8, None, 0))
    cluster.restart("n3")
    cluster.cut.add(("n2", "n1"))  # n2 must not win with a longer log
    cluster.cut.add(("n2", "n3"))
    cluster.elect("n1")
    cluster.heal()
    cluster.tick(30)
    assert cluster.log_of("n2") == cluster.log_of("n1")


# -- 5.4 ----------------------------------------------------------------------


def test_5_4_1_vote_requests_carry_the_candidates_last_entry() -> None:
    storage = stored([(1, 1), (2, 3)])
    storage.set_hard_state(HardState(3, None, 0))
    core = make_core(storage=storage)
    core.campaign()
    requests = run_ready(core, storage)
    assert {(m.kind, m.index, m.log_term, m.term) for m in requests} == {(VOTE, 2, 3, 4)}


@pytest.mark.parametrize(
    ("candidate_last", "granted"),
    [((2, 2), True), ((3, 2), True), ((1, 2), False), ((9, 1), False), ((1, 3), True)],
)
def test_5_4_1_a_voter_denies_a_candidate_with_a_less_up_to_date_log(
    candidate_last: tuple[int, int], granted: bool
) -> None:
    storage = stored([(1, 1), (2, 2)])
    storage.set_hard_state(HardState(2, None, 0))
    core = make_core(storage=storage)
    core.step(Message(VOTE, "n2", "n1", 3, *candidate_last))
    (reply,) = run_ready(core, storage)
    assert reply.kind == VOTE_RESP and reply.reject is not granted


def test_5_4_2_a_leader_commits_only_entries_of_its_term_by_counting_replicas() -> None:
    """5.4.2: entries from previous terms are not committed by counting
    replicas; they commit once an entry of the current term does."""
    storage = stored([(1, 1), (2, 2)])
    storage.set_hard_state(HardState(2, None, 0))
    core = make_core(storage=storage)
    become_leader(core, storage)  # term 3, no-op at index 3
    run_ready(core, storage)
    core.step(Message(APPEND_RESP, "n2", "n1", 3, index=2))
    assert core.status().commit == 0  # a majority holds index 2, but it is of term 2
    core.step(Message(APPEND_RESP, "n2", "n1", 3, index=3))
    assert core.status().commit == 3


def test_5_4_2_figure_8_an_old_term_entry_on_a_majority_is_not_committed() -> None:
    """Figure 8 (c)-(e): S1 leads term 4 and copies its term-2 entry at index 2
    to a majority (S1, S2, S3) before any entry of term 4 gets there. That
    entry is NOT committed: S5, holding a term-3 entry at index 2, can still
    win term 5 and overwrite it. Had S1 applied it, two nodes would apply
    different entries at index 2."""
    ids = ("s1", "s2", "s3", "s4", "s5")
    cluster = Cluster(ids=ids, pre_vote=False, check_quorum=False)
    logs = {
        "s1": [(1, 1), (2, 2)],
        "s2": [(1, 1), (2, 2)],
        "s3": [(1, 1)],
        "s4": [(1, 1)],
        "s5": [(1, 1), (2, 3)],
    }
    for node, entries in logs.items():
        storage = cluster.storages[node]
        storage.append([Entry(i, t, f"t{t}".encode()) for i, t in entries])
        storage.set_hard_state(HardState(3, None, 1))
        cluster.restart(node, applied=1)
    # (c) S1 wins term 4 with S2, S3, S4; its appends are lost...
    cluster.isolate("s5")
    s1 = cluster.cores["s1"]
    s1.campaign()
    for request in run_ready(s1, cluster.storages["s1"]):
        voter = cluster.cores[request.dst]
        if request.dst != "s5":
            voter.step(request)
            for reply in run_ready(voter, cluster.storages[request.dst]):
                s1.step(reply)
    assert s1.role == LEADER and s1.term == 4
    run_ready(s1, cluster.storages["s1"])  # the no-op (4, 3) and appends: dropped
    # ...except those that carry only the term-2 entry to S2 and S3.
    for node in ("s2", "s3"):
        follower = cluster.cores[node]
        follower.step(Message(APPEND, "s1", node, 4, 1, 1, (Entry(2, 2, b"t2"),), commit=1))
        for reply in run_ready(follower, cluster.storages[node]):
            s1.step(reply)
    assert s1.status().commit == 1  # a majority holds (2, 2), yet it is not committed
    # (d) S1 crashes; S5 wins term 5 with S2, S3, S4 and overwrites index 2.
    cluster.crash("s1")
    cluster.queue.clear()
    cluster.heal()
    cluster.cores["s5"].campaign()  # term 4: the others already voted for S1
    cluster.drain()
    cluster.elect("s5")  # term 5
    cluster.tick(3)
    for node in ("s2", "s3", "s4", "s5"):
        assert cluster.log_of(node)[1] == (2, 3)
    applied_at_2 = {e.term for n in ids for e in cluster.applied[n] if e.index == 2}
    assert applied_at_2 == {3}
