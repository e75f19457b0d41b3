"""A deterministic cluster of SWIM cores on a simulated clock and network.

Discrete events on one heap: packet deliveries and member timers, in time
order (ties by insertion order). One seed drives everything: each member's
`random.Random` is derived from it, the network has its own, and the fault
plan has its own, so a failing run replays exactly from its seed.

Faults: crash (a member stops for good), slow (a member handles every event
late, by a random delay: a starved CPU), leave, network loss/delay profiles
and partitions (`SimNetwork`). With `check_codec` every packet is encoded,
checked against the packet bound and decoded before delivery, so the bytes
path is exercised exactly as the real transport would.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass

from laminar.swim import Member, MemberChange, MemberState, Packet, Swim, SwimConfig
from laminar.swim.codec import decode_packet, encode_packet
from tests.swim.simnet import NetworkProfile, SimNetwork

_DELIVER = 0
_TIMER = 1


@dataclass(slots=True)
class SimMember:
    index: int
    swim: Swim
    crashed: bool = False
    slow_max_ms: int = 0
    timer_at_ms: int = -1
    """When its pending timer event fires; -1 when none is pending."""
    deadline_ms: int = -1
    """The core's deadline that pending timer stands for."""
    left_at_ms: int | None = None


def node_id(index: int) -> str:
    return f"n{index}"


def address(index: int) -> str:
    return f"10.0.{index // 250}.{index % 250 + 1}:7946"


class SimCluster:
    """`size` members that all know each other at start (a static member list)
    or, with `formed=False`, know nobody and must join through member 0."""

    def __init__(
        self,
        size: int,
        seed: int,
        config: SwimConfig | None = None,
        *,
        profile: NetworkProfile | None = None,
        formed: bool = True,
        check_codec: bool = False,
        on_change: Callable[[int, int, MemberChange], None] | None = None,
    ) -> None:
        """`on_change(time_ms, observer, change)` sees every member change as it happens."""
        self.seed = seed
        self.config = config if config is not None else SwimConfig()
        self.now_ms = 0
        self.network = SimNetwork(random.Random(f"{seed}/network"), profile)
        self._slow_rng = random.Random(f"{seed}/slow")
        self._events: list[tuple[int, int, int, int, Packet | None]] = []
        self._seq = 0
        self.check_codec = check_codec
        self.largest_packet_bytes = 0
        self._on_change = on_change
        self._by_address: dict[str, int] = {}
        self.members: list[SimMember] = []
        everyone = [Member(node_id(i), address(i), MemberState.ALIVE, 0, 1.0) for i in range(size)]
        for i in range(size):
            swim = Swim(
                node_id(i),
                address(i),
                rng=random.Random(f"{seed}/member/{i}"),
                now_ms=0,
                config=self.config,
                members=everyone if formed else (),
            )
            self._by_address[address(i)] = i
            self.members.append(SimMember(i, swim))
        for member in self.members:
            self._after(member)

    # --- faults and actions -------------------------------------------------------

    def crash(self, index: int) -> None:
        self.members[index].crashed = True

    def slow(self, index: int, slow_max_ms: int) -> None:
        """Member `index` handles each event up to `slow_max_ms` late (0: normal again)."""
        self.members[index].slow_max_ms = slow_max_ms

    def leave(self, index: int) -> None:
        member = self.members[index]
        member.swim.leave(self.now_ms)
        member.left_at_ms = self.now_ms
        self._after(member)

    def set_weight(self, index: int, weight: float) -> None:
        member = self.members[index]
        member.swim.set_weight(weight, self.now_ms)
        self._after(member)

    def join(self, index: int, seeds: list[int]) -> None:
        member = self.members[index]
        member.swim.join([address(s) for s in seeds], self.now_ms)
        self._after(member)

    def set_profile(self, profile: NetworkProfile) -> None:
        self.network.set_profile(profile)

    # --- running -------------------------------------------------------------------

    def run_until(self, end_ms: int, stop: Callable[[], bool] | None = None) -> bool:
        """Process events up to `end_ms` (or until `stop()` holds, checked after each
        event that changed some view). Returns True when stopped by `stop`."""
        events = self._events
        members = self.members
        while events and events[0][0] <= end_ms:
            time_ms, _, kind, index, packet = heapq.heappop(events)
            member = members[index]
            if member.crashed:
                continue
            if kind == _TIMER:
                if time_ms != member.timer_at_ms:
                    continue  # superseded by a later schedule
                member.timer_at_ms = -1
            self.now_ms = time_ms
            changed = self._handle(member, kind, packet)
            if changed and stop is not None and stop():
                return True
        self.now_ms = max(self.now_ms, end_ms)
        return False

    def _handle(self, member: SimMember, kind: int, packet: Packet | None) -> bool:
        swim = member.swim
        if kind == _DELIVER:
            assert packet is not None
            swim.step(packet, self.now_ms)
        else:
            swim.tick(self.now_ms)
        return self._after(member)

    def _after(self, member: SimMember) -> bool:
        """Ship what the member produced and schedule its next timer."""
        swim = member.swim
        ready = swim.ready()
        now = self.now_ms
        for outgoing in ready.packets:
            destination = self._by_address.get(outgoing.address)
            if destination is None:
                continue
            delay = self.network.delay_ms(member.index, destination)
            if delay is None:
                continue
            packet = outgoing.packet
            if self.check_codec:
                packet = self._through_codec(packet)
            target = self.members[destination]
            if target.slow_max_ms:
                delay += self._slow_rng.randint(0, target.slow_max_ms)
            self._push(now + delay, _DELIVER, destination, packet)
        if self._on_change is not None:
            for change in ready.changes:
                self._on_change(now, member.index, change)
        deadline = swim.next_deadline_ms()
        if deadline != member.deadline_ms or member.timer_at_ms < 0:
            member.deadline_ms = deadline
            if member.slow_max_ms:
                deadline += self._slow_rng.randint(0, member.slow_max_ms)
            member.timer_at_ms = max(deadline, now)
            self._push(member.timer_at_ms, _TIMER, member.index, None)
        return bool(ready.changes)

    def _push(self, time_ms: int, kind: int, index: int, packet: Packet | None) -> None:
        self._seq += 1
        heapq.heappush(self._events, (time_ms, self._seq, kind, index, packet))

    def _through_codec(self, packet: Packet) -> Packet:
        data = encode_packet(packet, self.config.packet_overhead_bytes)
        size = len(data)
        if size > self.config.packet_bytes_max:
            raise AssertionError(
                f"a packet of {size} bytes exceeds packet_bytes_max "
                f"{self.config.packet_bytes_max} (reproduce with seed={self.seed})"
            )
        self.largest_packet_bytes = max(self.largest_packet_bytes, size)
        decoded = decode_packet(data, self.config.packet_overhead_bytes)
        if decoded != packet:
            raise AssertionError(f"codec round trip changed {packet} into {decoded}")
        return decoded

    # --- looking -------------------------------------------------------------------

    def live(self) -> list[SimMember]:
        """Members running and not left: the ones whose views must agree."""
        return [m for m in self.members if not m.crashed and m.left_at_ms is None]

    def state_of(self, observer: int, subject: int) -> MemberState | None:
        member = self.members[observer].swim.member(node_id(subject))
        return member.state if member is not None else None
