"""A hand-driven group of SWIM cores for spec tests: packets are held until a
test delivers, drops or inspects them, and time moves only when told."""

from __future__ import annotations

import random
from collections.abc import Callable

from laminar.swim import Member, MemberChange, MemberState, Outgoing, Swim, SwimConfig
from laminar.swim.messages import Message


def addr(name: str) -> str:
    return f"{name}:7946"


class Group:
    """Cores named `names`, each knowing all the others, and the packets in flight."""

    def __init__(
        self, names: list[str], config: SwimConfig | None = None, seed: int = 0, *, formed=True
    ) -> None:
        self.now_ms = 0
        self.config = config if config is not None else SwimConfig()
        everyone = [Member(n, addr(n), MemberState.ALIVE, 0, 1.0) for n in names]
        self.cores = {
            name: Swim(
                name,
                addr(name),
                rng=random.Random(f"{seed}/{name}"),
                now_ms=0,
                config=self.config,
                members=everyone if formed else (),
            )
            for name in names
        }
        self.by_address = {addr(n): n for n in names}
        self.in_flight: list[tuple[str, Outgoing]] = []
        self.sent: list[tuple[str, Outgoing]] = []
        """Every packet any core produced, in order (delivered or not)."""
        self.changes: dict[str, list[MemberChange]] = {n: [] for n in names}

    def collect(self, name: str) -> None:
        ready = self.cores[name].ready()
        self.in_flight.extend((name, out) for out in ready.packets)
        self.sent.extend((name, out) for out in ready.packets)
        self.changes[name].extend(ready.changes)

    def tick(self, name: str, now_ms: int | None = None) -> None:
        if now_ms is not None:
            self.now_ms = now_ms
        self.cores[name].tick(self.now_ms)
        self.collect(name)

    def take(self, match: Callable[[str, Outgoing], bool] = lambda s, o: True) -> list[Outgoing]:
        """Remove and return the in-flight packets `match` accepts."""
        taken = [out for sender, out in self.in_flight if match(sender, out)]
        self.in_flight = [(s, o) for s, o in self.in_flight if not match(s, o)]
        return taken

    def deliver(
        self, match: Callable[[str, Outgoing], bool] = lambda s, o: True, *, drop_to=()
    ) -> int:
        """Deliver matching packets (dropping those addressed to `drop_to`); returns
        how many were delivered. Replies are collected, not delivered."""
        count = 0
        for out in self.take(match):
            receiver = self.by_address.get(out.address)
            if receiver is None or receiver in drop_to:
                continue
            self.cores[receiver].step(out.packet, self.now_ms)
            self.collect(receiver)
            count += 1
        return count

    def settle(self, *, drop_to=(), rounds: int = 50) -> None:
        """Deliver until nothing is in flight."""
        for _ in range(rounds):
            if not self.deliver(drop_to=drop_to) and not self.in_flight:
                return

    def run(self, until_ms: int, *, down=(), step_ms: int = 10) -> None:
        """Advance time to `until_ms`, ticking every live core and delivering all
        traffic at each step; members in `down` neither run nor receive."""
        while self.now_ms < until_ms:
            self.now_ms = min(self.now_ms + step_ms, until_ms)
            for name, core in self.cores.items():
                if name not in down and core.next_deadline_ms() <= self.now_ms:
                    self.tick(name)
            self.settle(drop_to=down)

    def state(self, observer: str, subject: str) -> MemberState | None:
        member = self.cores[observer].member(subject)
        return member.state if member is not None else None


def of_kind(kind: type[Message], to: str | None = None) -> Callable[[str, Outgoing], bool]:
    def match(sender: str, out: Outgoing) -> bool:
        return isinstance(out.packet.message, kind) and (to is None or out.address == addr(to))

    return match
