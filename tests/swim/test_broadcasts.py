"""The piggyback queue and Lifeguard's arithmetic, on their own."""

from __future__ import annotations

import math

from laminar.swim import Alive, Suspect
from laminar.swim.broadcasts import BroadcastQueue
from laminar.swim.codec import update_size
from laminar.swim.config import push_pull_interval_for, retransmit_limit, suspicion_timeout_ms
from laminar.swim.lifeguard import Awareness, Suspicion, suspicion_timeout_for


def test_news_about_a_member_replaces_older_news_about_it() -> None:
    queue = BroadcastQueue(update_size)
    queue.queue(Suspect("c", 0, "a"))
    queue.queue(Alive("c", 1, "c:1", 1.0))
    assert len(queue) == 1
    assert queue.pending("c") == Alive("c", 1, "c:1", 1.0)


def test_least_sent_goes_first_and_each_update_stops_at_the_limit() -> None:
    queue = BroadcastQueue(update_size)
    queue.queue(Suspect("old", 0, "a"))
    queue.take(1000, transmit_limit=3)
    queue.queue(Suspect("new", 0, "a"))
    size = update_size(Suspect("new", 0, "a"))
    assert [u.node_id for u, _ in queue.take(size, transmit_limit=3)] == ["new"]
    sends = 1
    for _ in range(10):
        if queue.pending("old") is None:
            break
        queue.take(1000, transmit_limit=3)
        sends += 1
    assert sends == 3


def test_take_respects_the_byte_budget() -> None:
    queue = BroadcastQueue(update_size)
    for i in range(100):
        queue.queue(Suspect(f"n{i}", i, "a"))
    taken = queue.take(200, transmit_limit=10)
    assert sum(size for _, size in taken) <= 200
    assert len(taken) >= 200 // max(size for _, size in taken)


def test_memberlist_formulas() -> None:
    assert retransmit_limit(4, 1) == 4
    assert retransmit_limit(4, 100) == 12
    assert retransmit_limit(4, 1000) == 16
    assert suspicion_timeout_ms(4, 1, 1000) == 4000
    assert suspicion_timeout_ms(4, 100, 1000) == 8000
    assert suspicion_timeout_ms(4, 1000, 1000) == 12000
    assert push_pull_interval_for(30_000, 32) == 30_000
    assert push_pull_interval_for(30_000, 64) == 60_000
    assert push_pull_interval_for(30_000, 1000) == 30_000 * (math.ceil(math.log2(1000) - 5) + 1)


def test_suspicion_timeout_shrinks_logarithmically_to_the_minimum() -> None:
    assert suspicion_timeout_for(0, 3, 1000, 6000) == 6000
    assert suspicion_timeout_for(1, 3, 1000, 6000) == 3500
    assert suspicion_timeout_for(3, 3, 1000, 6000) == 1000
    assert suspicion_timeout_for(0, 0, 1000, 6000) == 1000


def test_a_suspicion_counts_each_accuser_once_and_never_the_first() -> None:
    s = Suspicion("a", expected=2, min_ms=1000, max_ms=6000, start_ms=100)
    assert s.deadline_ms == 6100
    assert not s.confirm("a")
    assert s.confirm("b") and not s.confirm("b")
    assert s.confirm("c")
    assert s.deadline_ms == 1100
    assert not s.confirm("d")  # enough already


def test_awareness_is_held_in_range_and_scales_timeouts() -> None:
    a = Awareness(max_multiplier=8)
    a.apply(-3)
    assert a.score == 0
    a.apply(100)
    assert a.score == 7 and a.scale(500) == 4000
    off = Awareness(max_multiplier=8, enabled=False)
    off.apply(5)
    assert off.scale(500) == 500
