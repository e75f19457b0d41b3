"""The assignors: every partition to one subscriber, balance within one, and
for uniform-sticky the fewest moves that balance needs."""

from __future__ import annotations

import random

import pytest

from laminar.groups.assignors import (
    Subscriber,
    range_assign,
    uniform_sticky_assign,
)
from laminar.groups.messages import TopicPartition


def _subs(
    topics: dict[str, set[str]], current: dict[str, set[TopicPartition]] | None = None
) -> dict[str, Subscriber]:
    current = current or {}
    return {
        m: Subscriber(frozenset(ts), frozenset(current.get(m, set())), m)
        for m, ts in topics.items()
    }


def _check_complete(assignment: dict[str, frozenset[TopicPartition]], subs, counts) -> None:
    seen: list[TopicPartition] = [tp for ps in assignment.values() for tp in ps]
    assert len(seen) == len(set(seen)), "a partition given twice"
    wanted = {(t, p) for s in subs.values() for t in s.topics for p in range(counts.get(t, 0))}
    assert set(seen) == wanted
    for m, ps in assignment.items():
        assert all(t in subs[m].topics for t, _ in ps), "a partition of an unsubscribed topic"


def test_range_gives_contiguous_runs_extra_partitions_to_the_first_members() -> None:
    subs = _subs({"a": {"t"}, "b": {"t"}, "c": {"t", "u"}})
    got = range_assign(subs, {"t": 7, "u": 2})
    assert got["a"] == {("t", 0), ("t", 1), ("t", 2)}
    assert got["b"] == {("t", 3), ("t", 4)}
    assert got["c"] == {("t", 5), ("t", 6), ("u", 0), ("u", 1)}


@pytest.mark.parametrize("seed", range(200))
def test_uniform_sticky_is_balanced_within_one_and_moves_the_fewest(seed: int) -> None:
    rng = random.Random(seed)
    counts = {"t": rng.randint(0, 24), "u": rng.randint(0, 9)}
    members = [f"m{i}" for i in range(rng.randint(1, 7))]
    partitions = [(t, p) for t, n in counts.items() for p in range(n)]
    # current: a random earlier assignment, some members new, some partitions gone
    current: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for tp in [*partitions, ("t", 99), ("gone", 0)]:
        owner = rng.choice([*members, None])
        if owner is not None:
            current[owner].add(tp)
    subs = _subs({m: {"t", "u"} for m in members}, current)
    got = uniform_sticky_assign(subs, counts)
    _check_complete(got, subs, counts)
    loads = [len(ps) for ps in got.values()]
    assert max(loads) - min(loads) <= 1
    # fewest moves: each member keeps at most its quota, the r extra slots go
    # to members that had more than q.
    valid = {m: {tp for tp in current[m] if tp in set(partitions)} for m in members}
    q, r = divmod(len(partitions), len(members))
    kept_max = sum(min(len(v), q) for v in valid.values()) + min(
        r, sum(1 for v in valid.values() if len(v) > q)
    )
    moves = sum(len(valid[m] - got[m]) for m in members)
    assert moves == sum(len(v) for v in valid.values()) - kept_max


@pytest.mark.parametrize("seed", range(100))
def test_uniform_sticky_with_different_subscriptions_leaves_no_useful_move(seed: int) -> None:
    rng = random.Random(seed)
    counts = {"t": rng.randint(0, 12), "u": rng.randint(0, 12), "v": rng.randint(1, 5)}
    subs = _subs({f"m{i}": set(rng.sample(sorted(counts), rng.randint(1, 3))) for i in range(5)})
    got = uniform_sticky_assign(subs, counts)
    _check_complete(got, subs, counts)
    for _donor, ps in got.items():
        for receiver in got:
            if len(got[receiver]) <= len(ps) - 2:
                assert not any(t in subs[receiver].topics for t, _ in ps)


def test_uniform_sticky_keeps_every_partition_of_a_member_within_its_quota() -> None:
    """A join moves only what the newcomer needs: the others never stop."""
    before = uniform_sticky_assign(_subs({"a": {"t"}, "b": {"t"}}), {"t": 6})
    current = {m: set(ps) for m, ps in before.items()}
    after = uniform_sticky_assign(_subs({"a": {"t"}, "b": {"t"}, "c": {"t"}}, current), {"t": 6})
    assert after["a"] <= before["a"] and after["b"] <= before["b"]
    assert len(after["c"]) == 2
