"""What members say to each other: values only, no bytes (the codec does bytes).

A `Packet` is one datagram: one `Message` (the request or reply it exists for)
plus the `Update`s piggybacked on it, infection style. Updates are the news
about one member each: `Alive`, `Suspect`, `Dead` (a `Dead` whose accuser is
the member itself means it left). Incarnation numbers order the news about a
member: only the member raises its own, to refute a suspicion or to announce a
new weight.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class MemberState(IntEnum):
    """A member's state as one member sees it (the values are sent on the wire)."""

    ALIVE = 0
    SUSPECT = 1
    DEAD = 2
    LEFT = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @property
    def is_live(self) -> bool:
        """Alive or suspect: still probed, still counted, still holding its place."""
        return self is MemberState.ALIVE or self is MemberState.SUSPECT


@dataclass(frozen=True, slots=True)
class Member:
    """One member as seen by one member at one moment (views and push-pull carry these)."""

    node_id: str
    address: str
    state: MemberState
    incarnation: int
    weight: float


# --- updates: the gossip ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Alive:
    """`node_id` is alive at `incarnation`, reachable at `address`, with `weight`."""

    node_id: str
    incarnation: int
    address: str
    weight: float


@dataclass(frozen=True, slots=True)
class Suspect:
    """`accuser` could not reach `node_id` at `incarnation`."""

    node_id: str
    incarnation: int
    accuser: str


@dataclass(frozen=True, slots=True)
class Dead:
    """`node_id` is dead at `incarnation` (left, when `accuser == node_id`)."""

    node_id: str
    incarnation: int
    accuser: str

    @property
    def is_leave(self) -> bool:
        return self.accuser == self.node_id


Update = Alive | Suspect | Dead


# --- messages ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ping:
    """Are you `target`? Answer `Ack(seq)` to `source_address`."""

    seq: int
    target: str
    source: str
    source_address: str


@dataclass(frozen=True, slots=True)
class Ack:
    """`source` answers the ping (or relays the answer to the ping request) `seq`."""

    seq: int
    source: str


@dataclass(frozen=True, slots=True)
class PingReq:
    """Please ping `target` at `target_address` for me and relay its ack (indirect probe)."""

    seq: int
    target: str
    target_address: str
    source: str
    source_address: str


@dataclass(frozen=True, slots=True)
class Nack:
    """`source` asked the target of ping request `seq` and heard nothing in time
    (Lifeguard: the prober learns its helpers are alive, so it was not itself at fault)."""

    seq: int
    source: str


@dataclass(frozen=True, slots=True)
class PushPull:
    """Part of a full state exchange. `members` is one chunk of the sender's table,
    small enough for one packet; each record merges on its own, so a lost chunk
    loses only its records. `reply` asks the receiver for its own table in return."""

    source: str
    source_address: str
    members: tuple[Member, ...]
    reply: bool


@dataclass(frozen=True, slots=True)
class Gossip:
    """A packet that exists only for its updates (a leave announcement)."""


Message = Ping | Ack | PingReq | Nack | PushPull | Gossip


@dataclass(frozen=True, slots=True)
class Packet:
    """One datagram: a message plus piggybacked updates, applied before the message."""

    message: Message
    updates: tuple[Update, ...] = ()


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A packet the shell must send to `address` (best effort: loss is expected)."""

    address: str
    packet: Packet
