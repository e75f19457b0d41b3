"""Spec tests of the SWIM core, one behaviour each, citing the paper's section
(Das, Gupta, Motivala, "SWIM", DSN 2002) or Lifeguard's (Dadgar et al. 2018)."""

from __future__ import annotations

import random

import pytest

from laminar.swim import (
    Ack,
    Alive,
    Dead,
    Gossip,
    Member,
    MemberState,
    Packet,
    Ping,
    PingReq,
    PushPull,
    Suspect,
    Swim,
    SwimConfig,
    SwimUsageError,
)
from laminar.swim.codec import encode_packet
from laminar.swim.config import retransmit_limit, suspicion_timeout_ms
from laminar.swim.messages import Nack
from tests.swim.harness import Group, addr, of_kind

ALIVE, SUSPECT, DEAD, LEFT = (
    MemberState.ALIVE,
    MemberState.SUSPECT,
    MemberState.DEAD,
    MemberState.LEFT,
)


def core(name: str, others: dict[str, int], config: SwimConfig | None = None) -> Swim:
    """A core named `name` that knows `others` (name -> incarnation) as alive."""
    members = [Member(n, addr(n), ALIVE, inc, 1.0) for n, inc in others.items()]
    return Swim(name, addr(name), rng=random.Random(name), now_ms=0, config=config, members=members)


def gossip(*updates) -> Packet:
    return Packet(Gossip(), tuple(updates))


def first_probe(group: Group, name: str) -> tuple[int, str]:
    """Tick `name` alone until it sends its first ping; returns (time, target)."""
    for now in range(0, 2000, 10):
        group.tick(name, now)
        pings = [o for s, o in group.in_flight if s == name and isinstance(o.packet.message, Ping)]
        if pings:
            return now, pings[0].packet.message.target
    raise AssertionError("no probe within two periods")


# --- probing (SWIM 3.1, 4.3) ------------------------------------------------------


def test_each_period_probes_one_member_and_its_ack_ends_the_probe() -> None:
    g = Group(["a", "b", "c"])
    first_probe(g, "a")
    assert len(g.take(of_kind(Ping))) == 1
    g.run(10_000)
    a = g.cores["a"]
    assert 9 <= a.stats.probes <= 11
    assert a.stats.probes_failed == 0
    assert g.state("a", "b") is ALIVE and g.state("a", "c") is ALIVE


def test_round_robin_probes_every_member_once_per_round() -> None:
    names = [f"m{i}" for i in range(8)]
    g = Group(names)
    g.run(7 * 1000 + 999)
    targets = [
        o.packet.message.target
        for s, o in g.sent
        if s == "m0" and isinstance(o.packet.message, Ping)
    ]
    assert sorted(targets[:7]) == names[1:]


def test_missed_ack_asks_k_members_and_a_relayed_ack_keeps_the_target_alive() -> None:
    g = Group(["a", "b", "c", "d", "e"])
    t, target = first_probe(g, "a")
    g.take(of_kind(Ping))  # the direct ping is lost
    g.tick("a", t + 500)
    requests = [o for s, o in g.in_flight if isinstance(o.packet.message, PingReq)]
    assert len(requests) == 3
    assert {o.packet.message.target for o in requests} == {target}
    assert addr(target) not in {o.address for o in requests}
    g.settle()  # helpers ping the target, it acks them, they relay to a
    g.tick("a", t + 1000)
    assert g.cores["a"].stats.probes_failed == 0
    assert g.state("a", target) is ALIVE


def test_a_helper_that_hears_nothing_sends_a_nack() -> None:
    g = Group(["a", "b", "c"])
    g.cores["b"].step(Packet(PingReq(77, "c", addr("c"), "a", addr("a"))), 0)
    g.collect("b")
    g.take(of_kind(Ping, to="c"))
    g.tick("b", g.config.nack_timeout_ms - 1)
    assert not g.take(of_kind(Nack))
    g.tick("b", g.config.nack_timeout_ms)
    nacks = g.take(of_kind(Nack, to="a"))
    assert [o.packet.message.seq for o in nacks] == [77]


def test_an_ack_from_a_member_other_than_the_one_probed_is_ignored() -> None:
    """Issue 24 (finding 7): c must not vouch for the target a probes; only the
    target's own ack (or one relayed by a helper a asked) ends the probe."""
    g = Group(["a", "b", "c", "d"])
    t, target = first_probe(g, "a")
    (ping,) = g.take(of_kind(Ping))
    other = next(n for n in "bcd" if n != target)
    a = g.cores["a"]
    a.step(Packet(Ack(ping.packet.message.seq, other)), t + 1)
    a.step(Packet(Nack(ping.packet.message.seq, other)), t + 2)
    assert a.stats.foreign_acks == 2
    g.tick("a", t + 500)  # still unanswered: a asks helpers
    assert g.take(of_kind(PingReq))
    a.step(Packet(Ack(ping.packet.message.seq, target)), t + 600)
    g.tick("a", t + 1000)
    assert a.stats.probes_failed == 0 and a.stats.foreign_acks == 2


def test_a_helper_relays_only_the_ack_of_the_member_it_pinged() -> None:
    g = Group(["a", "b", "c", "d"])
    b = g.cores["b"]
    b.step(Packet(PingReq(77, "c", addr("c"), "a", addr("a"))), 0)
    g.collect("b")
    (ping,) = g.take(of_kind(Ping, to="c"))
    b.step(Packet(Ack(ping.packet.message.seq, "d")), 1)
    g.collect("b")
    assert not g.take(of_kind(Ack, to="a")) and b.stats.foreign_acks == 1
    b.step(Packet(Ack(ping.packet.message.seq, "c")), 2)
    g.collect("b")
    assert [o.packet.message.seq for o in g.take(of_kind(Ack, to="a"))] == [77]


def test_no_ack_at_all_makes_the_target_suspect_and_the_suspicion_spreads() -> None:
    g = Group(["a", "b", "c", "d"])
    g.run(20_000, down={"d"})
    assert g.state("a", "d") in (SUSPECT, DEAD)
    assert all(g.state(o, "d") in (SUSPECT, DEAD) for o in "abc")


# --- suspicion and refutation (SWIM 4.2) --------------------------------------------


def test_a_suspect_refutes_with_a_higher_incarnation() -> None:
    c = core("c", {"a": 0, "b": 0})
    c.step(gossip(Suspect("c", 0, "a")), 10)
    assert c.incarnation == 1
    assert Alive("c", 1, addr("c"), 1.0) in _updates_sent(c, 10, 1000)
    b = core("b", {"a": 0, "c": 0})
    b.step(gossip(Suspect("c", 0, "a")), 10)
    assert b.member("c").state is SUSPECT
    b.step(gossip(Alive("c", 1, addr("c"), 1.0)), 20)
    assert b.member("c").state is ALIVE and b.member("c").incarnation == 1
    b.tick(10_000_000)  # the cancelled suspicion never fires
    assert b.member("c").state is ALIVE


def test_refutation_beats_the_accused_incarnation() -> None:
    c = core("c", {"a": 0})
    c.step(gossip(Suspect("c", 41, "a")), 0)
    assert c.incarnation == 42


def test_a_suspicion_older_than_the_known_incarnation_is_ignored() -> None:
    b = core("b", {"a": 0, "c": 3})
    b.step(gossip(Suspect("c", 2, "a")), 0)
    assert b.member("c").state is ALIVE
    b.step(gossip(Dead("c", 2, "a")), 0)
    assert b.member("c").state is ALIVE


def test_alive_at_the_same_incarnation_does_not_clear_a_suspicion() -> None:
    b = core("b", {"a": 0, "c": 0})
    b.step(gossip(Suspect("c", 0, "a")), 0)
    b.step(gossip(Alive("c", 0, addr("c"), 1.0)), 1)
    assert b.member("c").state is SUSPECT


def test_an_unrefuted_suspicion_becomes_dead_after_the_timeout() -> None:
    b = core("b", {"a": 0, "c": 0})
    b.step(gossip(Suspect("c", 0, "a")), 0)
    timeout = suspicion_timeout_ms(4, 3, 1000)  # 3 members: no confirmations expected
    b.tick(timeout - 1)
    assert b.member("c").state is SUSPECT
    b.tick(timeout)
    assert b.member("c").state is DEAD
    assert b.stats.deaths_declared == 1
    assert Dead("c", 0, "b") in _updates_sent(b, timeout, timeout + 1000)


def test_dead_is_final_for_an_incarnation_and_a_higher_alive_revives() -> None:
    b = core("b", {"a": 0, "c": 0})
    b.step(gossip(Dead("c", 0, "a")), 0)
    b.step(gossip(Alive("c", 0, addr("c"), 1.0)), 1)
    assert b.member("c").state is DEAD
    b.step(gossip(Alive("c", 1, addr("c"), 1.0)), 2)
    assert b.member("c").state is ALIVE


def test_a_members_own_leave_overrides_a_death_verdict() -> None:
    b = core("b", {"a": 0, "c": 0})
    b.step(gossip(Dead("c", 0, "a")), 0)
    b.step(gossip(Dead("c", 0, "c")), 1)
    assert b.member("c").state is LEFT
    b.step(gossip(Dead("c", 0, "a")), 2)
    assert b.member("c").state is LEFT


def test_a_member_declared_dead_refutes() -> None:
    c = core("c", {"a": 0})
    c.step(gossip(Dead("c", 5, "a")), 0)
    assert c.member("c").state is ALIVE and c.incarnation == 6


# --- Lifeguard ---------------------------------------------------------------------


def test_dynamic_suspicion_starts_long_and_shrinks_with_confirmations() -> None:
    others = {f"m{i}": 0 for i in range(9)}
    b = core("b", others)  # 10 members: expects 2 confirmations
    minimum = suspicion_timeout_ms(4, 10, 1000)
    maximum = 6 * minimum
    b.step(gossip(Suspect("m1", 0, "m2")), 0)
    b.step(gossip(Suspect("m1", 0, "m2")), 1)  # the same accuser again: no news
    b.tick(maximum - 1)
    assert b.member("m1").state is SUSPECT
    b2 = core("b", others)
    b2.step(gossip(Suspect("m1", 0, "m2")), 0)
    b2.step(gossip(Suspect("m1", 0, "m3")), 0)
    b2.step(gossip(Suspect("m1", 0, "m4")), 0)
    b2.tick(minimum - 1)
    assert b2.member("m1").state is SUSPECT
    b2.tick(minimum)
    assert b2.member("m1").state is DEAD


def test_without_lifeguard_the_suspicion_timeout_is_fixed() -> None:
    others = {f"m{i}": 0 for i in range(9)}
    b = core("b", others, SwimConfig().without_lifeguard())
    b.step(gossip(Suspect("m1", 0, "m2")), 0)
    b.tick(suspicion_timeout_ms(4, 10, 1000))
    assert b.member("m1").state is DEAD


def test_failed_probes_without_nacks_slow_an_unhealthy_member_down() -> None:
    g = Group(["a", "b", "c", "d", "e"])
    t, _ = first_probe(g, "a")
    g.in_flight.clear()
    g.tick("a", t + 500)
    g.in_flight.clear()  # a is cut off: no acks, no nacks
    g.tick("a", t + 1000)
    a = g.cores["a"]
    assert a.health_score == 3  # three helpers, none answered
    assert a.next_deadline_ms() <= t + 1000 + 4 * 500
    g.in_flight.clear()
    # Probe periods now last 4 s; successes bring the score back down.
    g.run(t + 40_000)
    assert a.health_score == 0


def test_nacks_from_every_helper_keep_the_prober_healthy() -> None:
    g = Group(["a", "b", "c", "d", "e"])
    t, target = first_probe(g, "a")
    g.run(t + 1000, down={target})
    assert g.cores["a"].stats.probes_failed == 1
    assert g.cores["a"].health_score == 0


def test_refuting_counts_against_health() -> None:
    c = core("c", {"a": 0})
    c.step(gossip(Suspect("c", 0, "a")), 0)
    assert c.health_score == 1
    assert core("c", {"a": 0}, SwimConfig(local_health_awareness=False)).health_score == 0


@pytest.mark.parametrize("buddy", [True, False])
def test_buddy_system_a_probe_of_a_suspect_carries_the_suspicion(buddy: bool) -> None:
    config = SwimConfig(buddy_system=buddy)
    g = Group(["a", "b"], config)
    g.cores["a"].step(gossip(Suspect("b", 0, "x")), 0)
    g.collect("a")
    g.in_flight.clear()
    first_probe(g, "a")
    (ping,) = g.take(of_kind(Ping))
    assert (Suspect("b", 0, "a") in ping.packet.updates) is buddy
    if buddy:
        g.cores["b"].step(ping.packet, g.now_ms)
        g.collect("b")
        (ack,) = g.take(of_kind(Ack))
        assert Alive("b", 1, addr("b"), 1.0) in ack.packet.updates  # refuted on the ack
        g.cores["a"].step(ack.packet, g.now_ms)
        assert g.state("a", "b") is ALIVE


# --- dissemination (SWIM 4.1) ------------------------------------------------------


def test_an_update_is_sent_a_bounded_number_of_times() -> None:
    names = [f"m{i}" for i in range(10)]
    g = Group(names)
    g.cores["m0"].set_weight(2.0, 0)
    g.collect("m0")
    g.run(60_000)
    news = Alive("m0", 1, addr("m0"), 2.0)
    carried = sum(1 for s, o in g.sent if s == "m0" and news in o.packet.updates)
    assert carried == retransmit_limit(4, 10)
    assert all(g.cores[n].member("m0").weight == 2.0 for n in names)


def test_every_packet_fits_the_bound_however_much_news_is_pending() -> None:
    config = SwimConfig(packet_overhead_bytes=32)
    a = core("a", {"b": 0}, config)
    long = "x" * 200
    news = [Alive(f"{long}{i}", 1, f"{long}:{i}", 1.0) for i in range(500)]
    for i in range(0, 500, 20):
        a.step(Packet(Gossip(), tuple(news[i : i + 20])), 0)
    assert a.pending_updates() == 500
    sizes = []
    for now in range(0, 30_000, 100):
        a.tick(now)
        sizes += [len(encode_packet(o.packet, 32)) for o in a.ready().packets]
    assert sizes and max(sizes) <= config.packet_bytes_max
    assert max(sizes) > config.packet_bytes_max - 250  # and packets are filled


# --- push-pull, join, leave, weights -------------------------------------------------


def test_join_through_a_seed_learns_the_whole_cluster() -> None:
    g = Group(["a", "b", "c"], formed=False)
    g.cores["b"].join([addr("a")], 0)
    g.collect("b")
    g.run(2_000)
    assert g.state("a", "b") is ALIVE and g.state("b", "a") is ALIVE
    g.cores["c"].join([addr("a")], g.now_ms)
    g.collect("c")
    g.run(10_000)
    for observer in "abc":
        assert [g.state(observer, s) for s in "abc"] == [ALIVE] * 3, observer


def test_a_join_retries_until_a_seed_answers() -> None:
    g = Group(["a", "b"], formed=False)
    g.cores["b"].join([addr("a")], 0)
    g.collect("b")
    g.run(3_500, down={"a"})
    joins = [o for s, o in g.sent if s == "b" and isinstance(o.packet.message, PushPull)]
    assert len(joins) == 4  # at 0, 1, 2 and 3 s
    g.run(5_000)
    assert g.state("a", "b") is ALIVE


def test_push_pull_sends_a_large_table_in_packets_that_each_fit() -> None:
    names = [f"member-with-a-long-name-{i:04d}" for i in range(300)]
    a = core("a", {n: 0 for n in names})
    b = core("b", {"a": 0})
    b.step(Packet(PushPull("x", addr("x"), (), reply=False)), 0)
    a.step(Packet(PushPull("b", addr("b"), (a.member("a"),), reply=True)), 0)
    chunks = [o for o in a.ready().packets if isinstance(o.packet.message, PushPull)]
    assert len(chunks) > 5
    assert all(len(encode_packet(o.packet)) <= 1400 for o in chunks)
    assert [c.packet.message.reply for c in chunks].count(True) == 0
    for chunk in chunks:
        b.step(chunk.packet, 1)
    assert all(b.member(n) is not None for n in names)


def test_a_dead_member_in_a_pushed_table_becomes_a_suspect_here() -> None:
    b = core("b", {"a": 0, "c": 0})
    b.step(Packet(PushPull("a", addr("a"), (Member("c", addr("c"), DEAD, 0, 1.0),), False)), 0)
    assert b.member("c").state is SUSPECT


def test_a_graceful_leave_is_announced_and_stops_probing() -> None:
    g = Group(["a", "b", "c"])
    g.run(3_000)
    probes = g.cores["a"].stats.probes
    g.cores["a"].leave(g.now_ms)
    g.collect("a")
    g.run(8_000)
    assert g.cores["a"].stats.probes == probes
    assert g.state("b", "a") is LEFT and g.state("c", "a") is LEFT
    assert g.state("a", "a") is LEFT


def test_a_weight_change_reaches_everyone_with_a_new_incarnation() -> None:
    g = Group(["a", "b", "c"])
    g.cores["c"].set_weight(3, 0)
    g.collect("c")
    g.run(5_000)
    assert g.cores["a"].member("c") == Member("c", addr("c"), ALIVE, 1, 3.0)
    assert g.cores["a"].view().weights() == {"a": 1.0, "b": 1.0, "c": 3.0}


def test_the_view_drops_dead_members_from_placement_weights() -> None:
    b = core("b", {"a": 0, "c": 0})
    b.step(gossip(Dead("c", 0, "a"), Suspect("a", 0, "x")), 0)
    view = b.view()
    assert view.weights() == {"a": 1.0, "b": 1.0}
    assert [m["state"] for m in view.to_json()] == ["suspect", "alive", "dead"]


# --- bounds and misuse --------------------------------------------------------------


def test_news_of_more_members_than_the_table_holds_is_dropped() -> None:
    a = core("a", {}, SwimConfig(members_max=5))
    a.step(gossip(*(Alive(f"m{i}", 0, addr(f"m{i}"), 1.0) for i in range(10))), 0)
    assert len(a.view().members) == 5
    assert a.stats.dropped_full_table == 6


def test_time_must_not_go_backwards() -> None:
    a = core("a", {})
    a.tick(100)
    with pytest.raises(SwimUsageError, match="backwards"):
        a.tick(99)


@pytest.mark.parametrize("weight", [0, -1, float("nan"), float("inf"), 2e9])
def test_a_weight_outside_the_range_is_refused(weight: float) -> None:
    with pytest.raises(SwimUsageError, match="weight"):
        core("a", {}).set_weight(weight, 0)


def test_config_rejects_a_probe_timeout_as_long_as_the_period() -> None:
    with pytest.raises(ValueError, match="probe_timeout_ms"):
        SwimConfig(probe_interval_ms=500, probe_timeout_ms=500)


def _updates_sent(core_: Swim, start_ms: int, end_ms: int) -> set:
    """Every update `core_` sends while ticked every 10 ms from start to end."""
    sent = set()
    for now in range(start_ms, end_ms, 10):
        core_.tick(now)
        sent.update(u for o in core_.ready().packets for u in o.packet.updates)
    return sent
