"""The coordinator's decision table: the first decision wins, replay gives the same table."""

from __future__ import annotations

import msgpack

from laminar.wire.writes import Published, StagedPart, WriteState
from laminar.writes.decisions import (
    Action,
    Decisions,
    aborted_entry,
    committed_entry,
    done_entry,
)

PARTS = (StagedPart(5, 1, 0, 9, 2, 20),)
PUB = (Published(5, 100, 20),)
DAY_MS = 86_400_000


def test_a_commit_is_decided_then_done_and_answered_from_then_on() -> None:
    d = Decisions(retention_ms=DAY_MS)
    assert d.action_for_commit(1) is Action.CHECK_AND_DECIDE
    d.apply(committed_entry(1, PARTS, 10))
    assert d.state_of(1) == WriteState.COMMITTED
    assert d.action_for_commit(1) is Action.ROLL_FORWARD
    assert [x.commit_id for x in d.pending()] == [1]
    d.apply(done_entry(1, PUB, 20))
    assert d.action_for_commit(1) is Action.ANSWER_DONE
    assert d.get(1).published == PUB  # type: ignore[union-attr]
    assert d.pending() == []


def test_the_first_decision_wins() -> None:
    d = Decisions(retention_ms=DAY_MS)
    d.apply(aborted_entry(2, 1))
    d.apply(committed_entry(2, PARTS, 2))  # cannot happen through the shell; replay must hold
    assert d.state_of(2) == WriteState.ABORTED
    assert d.action_for_commit(2) is Action.REFUSE
    d.apply(committed_entry(3, PARTS, 3))
    d.apply(aborted_entry(3, 4))
    assert d.state_of(3) == WriteState.COMMITTED


def test_replay_rebuilds_the_same_states() -> None:
    entries = [
        committed_entry(1, PARTS, 1),
        aborted_entry(2, 2),
        committed_entry(3, PARTS, 3),
        done_entry(1, PUB, 4),
    ]
    live, replayed = Decisions(DAY_MS), Decisions(DAY_MS)
    for e in entries:
        live.apply(e)
    for e in entries:
        replayed.apply(e)
    for cid in (1, 2, 3, 4):
        assert live.state_of(cid) == replayed.state_of(cid)
    assert replayed.state_of(4) == WriteState.UNKNOWN


def test_finished_decisions_are_forgotten_after_retention_pending_ones_never() -> None:
    d = Decisions(retention_ms=1000, decisions_max=10)
    d.apply(committed_entry(1, PARTS, 0))
    d.apply(done_entry(1, PUB, 0))
    d.apply(committed_entry(2, PARTS, 0))  # pending: kept however old
    d.apply(aborted_entry(3, 900))
    assert d.forget_old(now_ms=1500) == 1
    assert d.state_of(1) == WriteState.UNKNOWN
    assert d.state_of(2) == WriteState.COMMITTED
    assert d.state_of(3) == WriteState.ABORTED
    assert d.forget_old(now_ms=10**9) == 1
    assert d.state_of(2) == WriteState.COMMITTED


def test_the_count_bound_forgets_the_oldest_finished_first() -> None:
    d = Decisions(retention_ms=DAY_MS, decisions_max=3)
    for cid in range(5):
        d.apply(aborted_entry(cid, cid))
    d.forget_old(now_ms=10)
    assert [d.state_of(c) for c in range(5)] == [WriteState.UNKNOWN] * 2 + [WriteState.ABORTED] * 3


def test_entries_written_before_parts_named_their_node_replay() -> None:
    """Decision entries of six-field parts (before clusters) are parts held by
    the node that replays them."""
    decisions = Decisions(retention_ms=10_000)
    old = msgpack.packb({"k": "c", "id": 7, "t": 1, "parts": [[5, 1, 0, 9, 2, 20]]})
    assert decisions.apply(old).parts == (StagedPart(5, 1, 0, 9, 2, 20, ""),)


def test_a_decision_keeps_its_owner_and_done_repeats_it() -> None:
    d = Decisions(DAY_MS)
    d.apply(committed_entry(1, PARTS, 1, "User:alice"))
    d.apply(aborted_entry(2, 2, "User:bob"))
    d.apply(committed_entry(3, PARTS, 3))
    assert [d.get(c).principal for c in (1, 2, 3)] == ["User:alice", "User:bob", None]  # type: ignore[union-attr]
    alone = Decisions(DAY_MS)  # retention took the "committed" entry before "done"
    alone.apply(done_entry(1, PUB, 4, "User:alice"))
    assert alone.get(1).principal == "User:alice"  # type: ignore[union-attr]
    old = msgpack.packb({"k": "a", "id": 4, "t": 5})  # written before owners existed
    assert d.apply(old).principal is None
