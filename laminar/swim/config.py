"""Membership settings and the formulas that scale them with the cluster size.

Defaults follow hashicorp/memberlist's LAN profile (`DefaultLANConfig`): probe
every 1 s, direct probe timeout 500 ms, 3 indirect probes, suspicion multiplier
4 (and a maximum of 6 times the minimum under Lifeguard), retransmit
multiplier 4, health awareness up to 8 times, gossip to 3 members every 200 ms,
push-pull every 30 s, 1400-byte packets. All times are integer milliseconds of the injected clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

# Above this many members, push-pull slows down (memberlist's pushPullScaleThreshold).
PUSH_PULL_SCALE_THRESHOLD = 32


@dataclass(frozen=True, slots=True)
class SwimConfig:
    """How one member runs the protocol. Every member of a cluster should agree."""

    probe_interval_ms: int = 1000
    """One probe per protocol period; the period is this, times the health multiplier."""
    probe_timeout_ms: int = 500
    """Wait this long for a direct ack before asking `indirect_checks` members to probe."""
    indirect_checks: int = 3
    """k: members asked to probe a target that missed its direct ack."""
    suspicion_mult: int = 4
    """Suspicion lasts `suspicion_mult * max(1, log10(n)) * probe_interval` (the minimum)."""
    suspicion_max_timeout_mult: int = 6
    """Lifeguard: a suspicion nobody else confirms lasts this many times the minimum."""
    retransmit_mult: int = 4
    """Each update is piggybacked `retransmit_mult * ceil(log10(n + 1))` times."""
    awareness_max_multiplier: int = 8
    """Lifeguard: an unhealthy member stretches its probe period up to this factor."""
    gossip_interval_ms: int = 200
    """Pending updates also go out this often to `gossip_nodes` random members, at a
    pace health awareness does not slow (0 leaves only piggybacking on probes)."""
    gossip_nodes: int = 3
    """Members each gossip round sends to."""
    gossip_to_the_dead_ms: int = 30_000
    """Members declared dead this recently still receive gossip, so a member wrongly
    declared dead hears of it and refutes."""
    push_pull_interval_ms: int = 30_000
    """Full state exchange with one random live member (0 turns it off)."""
    reconnect_interval_ms: int = 30_000
    """Full state exchange with one random dead member, so split halves find each
    other again after a partition heals (Serf's reconnect; 0 turns it off)."""
    join_retry_ms: int = 1000
    """While a joining member knows nobody, it re-sends its join this often."""
    packet_bytes_max: int = 1400
    """One datagram, headers of the transport excluded: every packet fits in it."""
    packet_overhead_bytes: int = 0
    """Bytes the transport adds to each packet (an authentication tag): reserved."""
    members_max: int = 10_000
    """Members one table holds; news of more is dropped (bounded memory)."""
    dead_retention_ms: int = 3_600_000
    """Dead and left members stay listed this long, then are forgotten."""
    local_health_awareness: bool = True
    """Lifeguard LHA: failed probes and refutations stretch this member's timeouts."""
    dynamic_suspicion: bool = True
    """Lifeguard LHA-Suspicion: start long, shrink with independent confirmations."""
    buddy_system: bool = True
    """Lifeguard: a probe of a suspect member carries the suspicion, so it refutes at once."""

    def __post_init__(self) -> None:
        positive = {
            "probe_interval_ms": self.probe_interval_ms,
            "probe_timeout_ms": self.probe_timeout_ms,
            "suspicion_mult": self.suspicion_mult,
            "suspicion_max_timeout_mult": self.suspicion_max_timeout_mult,
            "retransmit_mult": self.retransmit_mult,
            "awareness_max_multiplier": self.awareness_max_multiplier,
            "join_retry_ms": self.join_retry_ms,
            "members_max": self.members_max,
            "dead_retention_ms": self.dead_retention_ms,
        }
        for name, value in positive.items():
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name, value in {
            "indirect_checks": self.indirect_checks,
            "gossip_interval_ms": self.gossip_interval_ms,
            "gossip_nodes": self.gossip_nodes,
            "gossip_to_the_dead_ms": self.gossip_to_the_dead_ms,
            "push_pull_interval_ms": self.push_pull_interval_ms,
            "reconnect_interval_ms": self.reconnect_interval_ms,
            "packet_overhead_bytes": self.packet_overhead_bytes,
        }.items():
            if type(value) is not int or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        if self.probe_timeout_ms >= self.probe_interval_ms:
            raise ValueError(
                f"probe_timeout_ms ({self.probe_timeout_ms}) must be shorter than "
                f"probe_interval_ms ({self.probe_interval_ms}): indirect probes need the rest"
            )
        if self.packet_bytes_max - self.packet_overhead_bytes < 512:
            raise ValueError(
                "packet_bytes_max minus packet_overhead_bytes must leave at least 512 bytes "
                f"(got {self.packet_bytes_max} - {self.packet_overhead_bytes})"
            )

    @property
    def nack_timeout_ms(self) -> int:
        """A helper that asked the target and heard nothing says so (nack) after this:
        80% of the probe timeout, as in the Lifeguard paper, so the nack reaches the
        prober before its period ends."""
        return max(1, self.probe_timeout_ms * 4 // 5)

    @property
    def lifeguard(self) -> bool:
        """True when all three Lifeguard extensions are on."""
        return self.local_health_awareness and self.dynamic_suspicion and self.buddy_system

    def without_lifeguard(self) -> SwimConfig:
        """The same settings with Lifeguard's three extensions off: plain SWIM with
        memberlist's pre-Lifeguard fixed suspicion timeout."""
        return replace(
            self, local_health_awareness=False, dynamic_suspicion=False, buddy_system=False
        )


def suspicion_timeout_ms(suspicion_mult: int, members: int, probe_interval_ms: int) -> int:
    """The minimum suspicion timeout: `mult * max(1, log10(n)) * interval` (memberlist)."""
    node_scale = max(1.0, math.log10(max(1, members)))
    return int(suspicion_mult * node_scale * probe_interval_ms)


def retransmit_limit(retransmit_mult: int, members: int) -> int:
    """How many packets carry one update: `mult * ceil(log10(n + 1))` (memberlist)."""
    return retransmit_mult * math.ceil(math.log10(members + 1))


def push_pull_interval_for(interval_ms: int, members: int) -> int:
    """Push-pull slows down past 32 members so the full-state traffic stays bounded:
    one more interval per doubling (memberlist's pushPullScale)."""
    if members <= PUSH_PULL_SCALE_THRESHOLD:
        return interval_ms
    multiplier = math.ceil(math.log2(members) - math.log2(PUSH_PULL_SCALE_THRESHOLD)) + 1
    return multiplier * interval_ms
