"""SWIM membership with Lifeguard: who is in the cluster, as a sans-IO core.

- `core.Swim`: one member's protocol state machine. Packets in (`step`), time
  in (`tick`), packets and member changes out (`ready`); the clock and the
  random number generator are injected, so a simulator can run thousands of
  members deterministically from one seed.
- `messages`: the values members exchange; `codec`: those values as laminar
  frames in the membership op range (96-127), bounded to one packet.
- `broadcasts`: the piggyback queue with its retransmit bound; `members`: the
  member table and its shuffled round-robin probe order; `lifeguard`: health
  awareness and dynamic suspicion.
- `view.MembershipView`: the one thing the rest of laminar reads.

The I/O shell (a UDP socket, the cluster secret, the supervisor's agent) sits
outside this package's core and stays thin.
"""

from laminar.swim.config import SwimConfig
from laminar.swim.core import Ready, Swim, SwimStats
from laminar.swim.errors import MalformedPacket, SwimError, SwimUsageError, Unauthenticated
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

__all__ = [
    "Ack",
    "Alive",
    "Dead",
    "Gossip",
    "MalformedPacket",
    "Member",
    "MemberChange",
    "MemberState",
    "MembershipView",
    "Message",
    "Nack",
    "Outgoing",
    "Packet",
    "Ping",
    "PingReq",
    "PushPull",
    "Ready",
    "Suspect",
    "Swim",
    "SwimConfig",
    "SwimError",
    "SwimStats",
    "SwimUsageError",
    "Unauthenticated",
    "Update",
]
