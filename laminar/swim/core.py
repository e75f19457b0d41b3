"""The SWIM state machine of one member: no sockets, no clock, no global randomness.

Theory of operation
-------------------

Every protocol period (`probe_interval_ms`, stretched by the health score) the
member probes one live member chosen by shuffled round robin: a `Ping`; if no
`Ack` comes within `probe_timeout_ms`, a `PingReq` to `indirect_checks` random
members, who ping the target themselves and relay its ack (or send a `Nack`
when they heard nothing either). A period without any ack makes the target
*suspect*; the suspicion is gossiped, and unless the suspect *refutes* it (by
gossiping `Alive` with a higher incarnation number) before its suspicion timer
runs out, it is declared *dead*. Only a member raises its own incarnation:
news with a higher incarnation wins, and at equal incarnations suspect beats
alive and dead beats suspect (SWIM section 4.2).

News travels piggybacked on the protocol's own packets (`BroadcastQueue`),
each packet filled up to `packet_bytes_max`; while news is pending, also in
`Gossip` packets to a few random members every `gossip_interval_ms`
(memberlist's gossip ticker: unlike probing, health awareness does not slow
it, so an unhealthy member's refutation still spreads at full speed); and
periodically by a full state exchange (`PushPull`) with a random live member,
which heals what gossip missed, and with a random dead one, which lets the
halves of a healed partition find each other again. Joining is a push-pull
with any seed.

Lifeguard (`lifeguard.py`) adds local health awareness, dynamic suspicion
timeouts and the buddy system; each can be turned off to measure it.

Driving it
----------

The shell feeds received packets to `step(packet, now_ms)`, calls
`tick(now_ms)` at `next_deadline_ms()` (or any time earlier or later; late
calls count against this member's health), and after either drains `ready()`:
packets to send (best effort: any may be lost) and member changes. Nothing
needs to be stored before sending: a restarted member simply rejoins, learns
that it was declared dead and refutes with a higher incarnation. `now_ms`
must never go backwards.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from laminar.swim.broadcasts import BroadcastQueue
from laminar.swim.codec import (
    ARRAY_GROWTH_BYTES,
    NAME_BYTES_MAX,
    U32_MAX,
    WEIGHT_MAX,
    member_size,
    packet_size,
    update_size,
)
from laminar.swim.config import (
    SwimConfig,
    push_pull_interval_for,
    retransmit_limit,
    suspicion_timeout_ms,
)
from laminar.swim.errors import SwimUsageError
from laminar.swim.lifeguard import Awareness, Suspicion
from laminar.swim.members import MemberRecord, MemberTable
from laminar.swim.messages import (
    Ack,
    Alive,
    Dead,
    Gossip,
    Member,
    MemberState,
    Message,
    Nack,
    Outgoing,
    Packet,
    Ping,
    PingReq,
    PushPull,
    Suspect,
    Update,
)
from laminar.swim.view import MemberChange, MembershipView

RELAYS_MAX = 1024
"""Indirect probes one member runs for others at once; more requests are dropped."""
NEVER_MS = 2**62
"""The deadline of a periodic task that is turned off."""


@dataclass(frozen=True, slots=True)
class Ready:
    """Work for the shell after `step` or `tick`.

    `packets` may be sent in any order, and losing any of them is allowed
    (the protocol expects loss). `changes` are in the order they happened; a
    shell that publishes views publishes `Swim.view()` when there are any.
    """

    packets: tuple[Outgoing, ...]
    changes: tuple[MemberChange, ...]


@dataclass(slots=True)
class SwimStats:
    """Counters since this member started (for /metrics and the simulator)."""

    packets_sent: int = 0
    packets_received: int = 0
    probes: int = 0
    probes_failed: int = 0
    indirect_probes: int = 0
    suspicions_raised: int = 0
    refutations: int = 0
    deaths_declared: int = 0
    late_ticks: int = 0
    misdirected: int = 0
    dropped_full_table: int = 0
    dropped_relays: int = 0
    push_pulls: int = 0
    foreign_acks: int = 0
    """Acks and nacks ignored: from a member that was neither probed nor asked to help."""


@dataclass(slots=True)
class _Probe:
    target: str
    incarnation: int
    seq: int
    timeout_at_ms: int
    end_ms: int
    helpers: frozenset[str] = frozenset()
    """The members asked to probe indirectly: their acks and nacks count too."""
    nacked: set[str] = field(default_factory=set)
    indirect_sent: bool = False


@dataclass(slots=True)
class _Relay:
    target: str
    """The member pinged for the requester: only its ack is relayed."""
    origin_seq: int
    origin_address: str
    nack_at_ms: int
    expire_ms: int
    nack_sent: bool = False


@dataclass(slots=True)
class _Outbox:
    packets: list[Outgoing] = field(default_factory=list)
    changes: list[MemberChange] = field(default_factory=list)


class Swim:
    """One member's view of the cluster and its part in the protocol."""

    def __init__(
        self,
        node_id: str,
        address: str,
        *,
        rng: random.Random,
        now_ms: int,
        config: SwimConfig | None = None,
        weight: float = 1.0,
        incarnation: int = 0,
        members: Iterable[Member] = (),
    ) -> None:
        """`members` are members known at start (a static peer list): they are
        believed as given until news says otherwise."""
        _check_name(node_id, "node_id")
        _check_name(address, "address")
        _check_weight(weight)
        self.config = config if config is not None else SwimConfig()
        self._rng = rng
        self._now_ms = now_ms
        self._me = MemberRecord(
            node_id, address, MemberState.ALIVE, incarnation, float(weight), now_ms
        )
        self._table = MemberTable(self._me, rng)
        for member in members:
            if member.node_id != node_id and self._table.get(member.node_id) is None:
                self._table.add(
                    MemberRecord(
                        member.node_id,
                        member.address,
                        member.state,
                        member.incarnation,
                        member.weight,
                        now_ms,
                    )
                )
        self._broadcasts = BroadcastQueue(update_size)
        self._awareness = Awareness(
            self.config.awareness_max_multiplier, self.config.local_health_awareness
        )
        self._suspicions: dict[str, Suspicion] = {}
        self._relays: dict[int, _Relay] = {}
        self._probe: _Probe | None = None
        self._seq = rng.randrange(U32_MAX + 1)
        self._left = False
        self._seeds: tuple[str, ...] = ()
        self._next_join_ms: int | None = None
        cfg = self.config
        self._next_probe_ms = now_ms + rng.randrange(cfg.probe_interval_ms)
        self._next_gossip_ms = _stagger(rng, now_ms, cfg.gossip_interval_ms)
        self._next_push_pull_ms = _stagger(rng, now_ms, cfg.push_pull_interval_ms)
        self._next_reconnect_ms = _stagger(rng, now_ms, cfg.reconnect_interval_ms)
        self._out = _Outbox()
        self._version = 0
        self.stats = SwimStats()

    # --- what the shell reads ----------------------------------------------------

    @property
    def node_id(self) -> str:
        return self._me.node_id

    @property
    def address(self) -> str:
        return self._me.address

    @property
    def incarnation(self) -> int:
        return self._me.incarnation

    @property
    def weight(self) -> float:
        return self._me.weight

    @property
    def health_score(self) -> int:
        """Lifeguard's awareness score: 0 is healthy."""
        return self._awareness.score

    @property
    def has_left(self) -> bool:
        return self._left

    def member(self, node_id: str) -> Member | None:
        record = self._table.get(node_id)
        return record.snapshot() if record is not None else None

    def view(self) -> MembershipView:
        members = sorted((r.snapshot() for r in self._table), key=lambda m: m.node_id)
        return MembershipView(self._me.node_id, self._version, tuple(members))

    def pending_updates(self) -> int:
        """Updates still waiting to be piggybacked."""
        return len(self._broadcasts)

    def ready(self) -> Ready:
        """Take the packets to send and the changes seen since the last call."""
        out, self._out = self._out, _Outbox()
        return Ready(tuple(out.packets), tuple(out.changes))

    def next_deadline_ms(self) -> int:
        """When `tick` next has something to do."""
        deadlines = [self._next_push_pull_ms, self._next_reconnect_ms]
        if len(self._broadcasts):
            deadlines.append(self._next_gossip_ms)
        if not self._left:
            deadlines.append(self._next_probe_ms)
        probe = self._probe
        if probe is not None:
            deadlines.append(probe.end_ms if probe.indirect_sent else probe.timeout_at_ms)
        for relay in self._relays.values():
            deadlines.append(relay.expire_ms if relay.nack_sent else relay.nack_at_ms)
        for suspicion in self._suspicions.values():
            deadlines.append(suspicion.deadline_ms)
        if self._next_join_ms is not None:
            deadlines.append(self._next_join_ms)
        return min(deadlines)

    # --- what the shell asks -------------------------------------------------------

    def join(self, seeds: Sequence[str], now_ms: int) -> None:
        """Join through any of `seeds` (addresses): a push-pull with each, repeated
        every `join_retry_ms` until some other member is known to be live."""
        self._advance(now_ms)
        self._seeds = tuple(s for s in seeds if s != self._me.address)
        for seed in self._seeds:
            _check_name(seed, "seed address")
        if self._seeds:
            self._send_join(now_ms)

    def leave(self, now_ms: int) -> None:
        """Stop on purpose: announce it by gossip (shown as `left`) and stop
        probing. Keep calling `tick` and sending for a second or so
        (`pending_updates()` falls as the news goes out); pings are still
        answered meanwhile. What a leave means for the member's place is the
        user's business (laminar's placement keeps it for a grace period: a
        leave is a restart until the cluster decides otherwise)."""
        self._advance(now_ms)
        if self._left:
            return
        self._left = True
        self._probe = None
        me = self._me
        self._table.set_state(me, MemberState.LEFT, now_ms)
        self._changed(me, MemberState.ALIVE)
        self._broadcasts.queue(Dead(me.node_id, me.incarnation, me.node_id))

    def set_weight(self, weight: float, now_ms: int) -> None:
        """Announce a new weight (a new incarnation, so it beats the old news)."""
        self._advance(now_ms)
        _check_weight(weight)
        me = self._me
        if weight == me.weight:
            return
        me.weight = float(weight)
        me.incarnation += 1
        self._broadcasts.queue(Alive(me.node_id, me.incarnation, me.address, me.weight))
        self._changed(me, me.state)

    # --- input -----------------------------------------------------------------

    def step(self, packet: Packet, now_ms: int) -> None:
        """Apply one received packet: its updates first, then its message (so a ping
        carrying our own suspicion is answered with the refutation on the ack)."""
        self._advance(now_ms)
        self.stats.packets_received += 1
        for update in packet.updates:
            self._apply(update, now_ms)
        message = packet.message
        if isinstance(message, Ping):
            self._on_ping(message)
        elif isinstance(message, Ack):
            self._on_ack(message)
        elif isinstance(message, PingReq):
            self._on_ping_req(message, now_ms)
        elif isinstance(message, Nack):
            probe = self._probe
            if probe is not None and message.seq == probe.seq:
                if message.source in probe.helpers:
                    probe.nacked.add(message.source)
                else:
                    self.stats.foreign_acks += 1
        elif isinstance(message, PushPull):
            self._on_push_pull(message, now_ms)

    def tick(self, now_ms: int) -> None:
        """Run every timer that is due at `now_ms`."""
        self._advance(now_ms)
        self._run_relays(now_ms)
        probe = self._probe
        if probe is not None and not probe.indirect_sent and now_ms >= probe.timeout_at_ms:
            self._probe_indirectly(probe)
        if probe is not None and now_ms >= probe.end_ms:
            self._probe_failed(probe, now_ms)
        if not self._left and now_ms >= self._next_probe_ms:
            if now_ms - self._next_probe_ms > self.config.probe_timeout_ms:
                # Our own timer is late by more than a probe timeout: this member
                # is the slow one (Lifeguard counts it against our health).
                self.stats.late_ticks += 1
                self._awareness.apply(1)
            self._start_probe(now_ms)
        for node_id, suspicion in list(self._suspicions.items()):
            if now_ms >= suspicion.deadline_ms:
                self._suspicion_expired(node_id, now_ms)
        if now_ms >= self._next_gossip_ms:
            self._gossip(now_ms)
        if now_ms >= self._next_push_pull_ms:
            self._periodic_push_pull(now_ms)
        if now_ms >= self._next_reconnect_ms:
            self._reconnect(now_ms)
        if self._next_join_ms is not None and now_ms >= self._next_join_ms:
            if self._table.live_count > 1 or self._left:
                self._next_join_ms = None
            else:
                self._send_join(now_ms)

    # --- probing -------------------------------------------------------------------

    def _start_probe(self, now_ms: int) -> None:
        cfg = self.config
        interval = self._awareness.scale(cfg.probe_interval_ms)
        self._next_probe_ms = now_ms + interval
        self._probe = None
        target = self._table.next_probe_target(now_ms, cfg.dead_retention_ms)
        if target is None:
            return
        seq = self._next_seq()
        self._probe = _Probe(
            target.node_id,
            target.incarnation,
            seq,
            timeout_at_ms=now_ms + self._awareness.scale(cfg.probe_timeout_ms),
            end_ms=now_ms + interval,
        )
        self.stats.probes += 1
        first: tuple[Update, ...] = ()
        if cfg.buddy_system and target.state is MemberState.SUSPECT:
            first = (Suspect(target.node_id, target.incarnation, self._me.node_id),)
        ping = Ping(seq, target.node_id, self._me.node_id, self._me.address)
        self._send(target.address, ping, first)

    def _probe_indirectly(self, probe: _Probe) -> None:
        probe.indirect_sent = True
        target = self._table.get(probe.target)
        if target is None:
            return
        helpers = self._table.random_members(
            self.config.indirect_checks,
            lambda r: self._is_other_alive(r) and r.node_id != probe.target,
        )
        probe.helpers = frozenset(h.node_id for h in helpers)
        self.stats.indirect_probes += 1
        request = PingReq(
            probe.seq, target.node_id, target.address, self._me.node_id, self._me.address
        )
        for helper in helpers:
            self._send(helper.address, request)

    def _on_ack(self, ack: Ack) -> None:
        """An ack ends the probe it answers only if it comes from the member
        probed, or relayed by a helper asked to probe it; a relay forwards only
        its target's ack. Anything else is ignored and counted: a member must
        not vouch for another it was not asked about."""
        probe = self._probe
        if probe is not None and ack.seq == probe.seq:
            if ack.source != probe.target and ack.source not in probe.helpers:
                self.stats.foreign_acks += 1
                return
            self._probe = None
            self._awareness.apply(-1)
            return
        relay = self._relays.get(ack.seq)
        if relay is None:
            return
        if ack.source != relay.target:
            self.stats.foreign_acks += 1
            return
        del self._relays[ack.seq]
        self._send(relay.origin_address, Ack(relay.origin_seq, self._me.node_id))

    def _probe_failed(self, probe: _Probe, now_ms: int) -> None:
        self._probe = None
        self.stats.probes_failed += 1
        # Lifeguard: helpers that did not nack are a sign that we, not the target,
        # are in trouble; without helpers any failure counts against us.
        missed = len(probe.helpers) - len(probe.nacked) if probe.helpers else 1
        self._awareness.apply(max(missed, 0))
        record = self._table.get(probe.target)
        if record is not None and record.state.is_live:
            self.stats.suspicions_raised += 1
            self._on_suspect(Suspect(probe.target, probe.incarnation, self.node_id), now_ms)

    def _on_ping(self, ping: Ping) -> None:
        if ping.target != self._me.node_id:
            self.stats.misdirected += 1
            return
        self._send(ping.source_address, Ack(ping.seq, self._me.node_id))

    def _on_ping_req(self, request: PingReq, now_ms: int) -> None:
        if len(self._relays) >= RELAYS_MAX:
            self.stats.dropped_relays += 1
            return
        seq = self._next_seq()
        cfg = self.config
        self._relays[seq] = _Relay(
            request.target,
            request.seq,
            request.source_address,
            nack_at_ms=now_ms + cfg.nack_timeout_ms,
            expire_ms=now_ms + cfg.probe_timeout_ms,
        )
        ping = Ping(seq, request.target, self._me.node_id, self._me.address)
        self._send(request.target_address, ping)

    def _run_relays(self, now_ms: int) -> None:
        for seq, relay in list(self._relays.items()):
            if not relay.nack_sent and now_ms >= relay.nack_at_ms:
                relay.nack_sent = True
                self._send(relay.origin_address, Nack(relay.origin_seq, self._me.node_id))
            if now_ms >= relay.expire_ms:
                del self._relays[seq]

    # --- news ------------------------------------------------------------------

    def _apply(self, update: Update, now_ms: int) -> None:
        if isinstance(update, Alive):
            self._on_alive(update, now_ms)
        elif isinstance(update, Suspect):
            self._on_suspect(update, now_ms)
        else:
            self._on_dead(update, now_ms)

    def _on_alive(self, alive: Alive, now_ms: int) -> None:
        record = self._table.get(alive.node_id)
        if record is None:
            if len(self._table) >= self.config.members_max:
                self.stats.dropped_full_table += 1
                return
            record = MemberRecord(
                alive.node_id,
                alive.address,
                MemberState.ALIVE,
                alive.incarnation,
                alive.weight,
                now_ms,
            )
            self._table.add(record)
            self._broadcasts.queue(alive)
            self._changed(record, None)
            return
        if record is self._me:
            if self._left or alive.incarnation < record.incarnation:
                return
            if (
                alive.incarnation == record.incarnation
                and alive.address == record.address
                and alive.weight == record.weight
            ):
                return
            self._refute(alive.incarnation)  # someone spreads a false picture of us
            return
        if alive.incarnation <= record.incarnation:
            return
        self._suspicions.pop(alive.node_id, None)
        self._broadcasts.queue(alive)
        previous = record.state
        record.incarnation = alive.incarnation
        record.address = alive.address
        record.weight = alive.weight
        if previous is not MemberState.ALIVE:
            self._table.set_state(record, MemberState.ALIVE, now_ms)
        self._changed(record, previous)

    def _on_suspect(self, suspect: Suspect, now_ms: int) -> None:
        record = self._table.get(suspect.node_id)
        if record is None or suspect.incarnation < record.incarnation:
            return
        suspicion = self._suspicions.get(suspect.node_id)
        if suspicion is not None:
            if suspicion.confirm(suspect.accuser):
                self._broadcasts.queue(suspect)  # an independent confirmation: pass it on
            return
        if record.state is not MemberState.ALIVE:
            return
        if record is self._me:
            if not self._left:
                self._refute(suspect.incarnation)
            return
        self._broadcasts.queue(suspect)
        record.incarnation = suspect.incarnation
        self._table.set_state(record, MemberState.SUSPECT, now_ms)
        self._changed(record, MemberState.ALIVE)
        cfg = self.config
        members = self._table.live_count
        expected = cfg.suspicion_mult - 2
        if members - 2 < expected:
            expected = 0
        min_ms = suspicion_timeout_ms(cfg.suspicion_mult, members, cfg.probe_interval_ms)
        max_ms = cfg.suspicion_max_timeout_mult * min_ms
        self._suspicions[suspect.node_id] = Suspicion(
            suspect.accuser, expected, min_ms, max_ms, now_ms, cfg.dynamic_suspicion
        )

    def _on_dead(self, dead: Dead, now_ms: int) -> None:
        record = self._table.get(dead.node_id)
        if record is None or dead.incarnation < record.incarnation:
            return
        self._suspicions.pop(dead.node_id, None)
        if record.state is MemberState.LEFT:
            return
        if record.state is MemberState.DEAD and not dead.is_leave:
            return  # a member's own word that it left beats our verdict that it died
        if record is self._me:
            if not self._left:
                self._refute(dead.incarnation)
            return
        self._broadcasts.queue(dead)
        previous = record.state
        record.incarnation = dead.incarnation
        self._table.set_state(
            record, MemberState.LEFT if dead.is_leave else MemberState.DEAD, now_ms
        )
        self._changed(record, previous)

    def _suspicion_expired(self, node_id: str, now_ms: int) -> None:
        del self._suspicions[node_id]
        record = self._table.get(node_id)
        if record is None or record.state is not MemberState.SUSPECT:
            return
        self.stats.deaths_declared += 1
        self._on_dead(Dead(node_id, record.incarnation, self._me.node_id), now_ms)

    def _refute(self, accused_incarnation: int) -> None:
        """Beat the accusation with a higher incarnation and gossip that we are alive."""
        me = self._me
        me.incarnation = min(max(me.incarnation, accused_incarnation) + 1, U32_MAX)
        self.stats.refutations += 1
        self._awareness.apply(1)  # Lifeguard: being suspected hints at our own trouble
        self._broadcasts.queue(Alive(me.node_id, me.incarnation, me.address, me.weight))
        self._changed(me, me.state)

    # --- full state exchange ------------------------------------------------------

    def _on_push_pull(self, push: PushPull, now_ms: int) -> None:
        for member in push.members:
            self._merge(member, now_ms)
        if push.reply and not self._left:
            self._send_state(push.source_address, reply=False)

    def _merge(self, member: Member, now_ms: int) -> None:
        """One record of another member's table, as memberlist's mergeState: its
        dead become our suspects (the accused gets its chance to refute). Unlike
        memberlist, a merged suspicion never confirms one we already hold: a
        table does not say who the accuser was, so it is no independent witness."""
        state = member.state
        if state is MemberState.ALIVE:
            self._on_alive(
                Alive(member.node_id, member.incarnation, member.address, member.weight), now_ms
            )
        elif state is MemberState.LEFT:
            self._on_dead(Dead(member.node_id, member.incarnation, member.node_id), now_ms)
        elif member.node_id not in self._suspicions:
            self._on_suspect(Suspect(member.node_id, member.incarnation, self.node_id), now_ms)

    def _send_state(self, address: str, *, reply: bool) -> None:
        """Our whole table to `address`, in as many packets as it takes; our own
        record first, so the receiver learns of us even if later chunks are lost."""
        self.stats.push_pulls += 1
        me = self._me
        records = [me.snapshot()]
        records.extend(r.snapshot() for r in self._table if r is not me)
        room = self._room(PushPull(me.node_id, me.address, (), reply)) - ARRAY_GROWTH_BYTES
        chunk: list[Member] = []
        used = 0
        for member in records:
            size = member_size(member)
            if chunk and used + size > room:
                self._send_now(address, PushPull(me.node_id, me.address, tuple(chunk), reply))
                reply, chunk, used = False, [], 0
            chunk.append(member)
            used += size
        self._send_now(address, PushPull(me.node_id, me.address, tuple(chunk), reply))

    def _send_join(self, now_ms: int) -> None:
        for seed in self._seeds:
            self._send_state(seed, reply=True)
        self._next_join_ms = now_ms + self.config.join_retry_ms

    def _periodic_push_pull(self, now_ms: int) -> None:
        cfg = self.config
        live = self._table.live_count
        self._next_push_pull_ms = now_ms + push_pull_interval_for(cfg.push_pull_interval_ms, live)
        if self._left:
            return
        partners = self._table.random_members(1, self._is_other_alive)
        if partners:
            self._send_state(partners[0].address, reply=True)
        elif self._seeds:
            self._send_state(self._rng.choice(self._seeds), reply=True)

    def _gossip(self, now_ms: int) -> None:
        cfg = self.config
        self._next_gossip_ms = now_ms + cfg.gossip_interval_ms
        if not len(self._broadcasts) or not cfg.gossip_nodes:
            return

        def gossip_target(record: MemberRecord) -> bool:
            if record is self._me or record.state is MemberState.LEFT:
                return False
            if record.state is MemberState.DEAD:
                return now_ms - record.state_change_ms <= cfg.gossip_to_the_dead_ms
            return True

        for record in self._table.random_members(cfg.gossip_nodes, gossip_target):
            if not len(self._broadcasts):
                break
            self._send(record.address, Gossip())

    def _reconnect(self, now_ms: int) -> None:
        self._next_reconnect_ms = now_ms + self.config.reconnect_interval_ms
        if self._left:
            return
        dead = self._table.random_members(1, lambda r: r.state is MemberState.DEAD)
        if dead:
            self._send_state(dead[0].address, reply=True)

    # --- sending ---------------------------------------------------------------

    def _room(self, message: Message, first: tuple[Update, ...] = ()) -> int:
        """Bytes left in one packet after `message`, `first` and the transport's share."""
        cfg = self.config
        used = packet_size(Packet(message, first)) + cfg.packet_overhead_bytes
        return cfg.packet_bytes_max - used

    def _send(self, address: str, message: Message, first: tuple[Update, ...] = ()) -> None:
        """Send `message`, filling the rest of the packet with pending updates."""
        budget = self._room(message, first) - ARRAY_GROWTH_BYTES
        limit = retransmit_limit(self.config.retransmit_mult, self._table.live_count)
        taken = self._broadcasts.take(budget, limit)
        updates = first + tuple(update for update, _ in taken)
        self._out.packets.append(Outgoing(address, Packet(message, updates)))
        self.stats.packets_sent += 1

    def _send_now(self, address: str, message: Message) -> None:
        """Send `message` alone (a push-pull chunk fills its packet by itself)."""
        self._out.packets.append(Outgoing(address, Packet(message)))
        self.stats.packets_sent += 1

    # --- small things ------------------------------------------------------------

    def _advance(self, now_ms: int) -> None:
        if now_ms < self._now_ms:
            raise SwimUsageError(f"time went backwards: {now_ms} ms after {self._now_ms} ms")
        self._now_ms = now_ms

    def _changed(self, record: MemberRecord, previous: MemberState | None) -> None:
        self._version += 1
        self._out.changes.append(MemberChange(record.snapshot(), previous))

    def _next_seq(self) -> int:
        self._seq = (self._seq + 1) & U32_MAX
        return self._seq

    def _is_other_alive(self, record: MemberRecord) -> bool:
        return record.state is MemberState.ALIVE and record is not self._me


def _stagger(rng: random.Random, now_ms: int, interval_ms: int) -> int:
    """The first run of a periodic task, at a random point of its first interval
    (so members started together do not act in step); never when interval is 0."""
    if interval_ms <= 0:
        return NEVER_MS
    return now_ms + rng.randrange(interval_ms)


def _check_name(value: str, what: str) -> None:
    if not isinstance(value, str) or not value or len(value.encode()) > NAME_BYTES_MAX:
        raise SwimUsageError(f"{what} must be 1-{NAME_BYTES_MAX} bytes of text, got {value!r}")


def _check_weight(weight: float) -> None:
    if not isinstance(weight, (int, float)) or not 0 < weight <= WEIGHT_MAX:
        raise SwimUsageError(f"weight must be a number in (0, {WEIGHT_MAX:g}], got {weight!r}")
