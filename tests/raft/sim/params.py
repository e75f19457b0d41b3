"""The plan a seed draws: cluster shape, fault rates, workload, run length."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Params:
    nodes: int
    election_ticks: int
    heartbeat_ticks: int
    pre_vote: bool
    check_quorum: bool
    drop: float  # probability a message is lost
    duplicate: float  # probability a message is delivered twice
    delay_steps_max: int  # messages take 1..delay_steps_max steps (reordering)
    partition_rate: float  # per step: start a partition (or cut one link one way)
    heal_rate: float  # per step: heal the network
    crash_rate: float  # per step: crash a live node
    crash_in_ready: float  # per Ready: crash part-way through handling it
    crash_after_vote: float  # per Ready that changes the vote: crash right after sending it
    leader_crash_rate: float  # per step: crash whoever leads
    restart_rate: float  # per step: restart a crashed node
    compact_rate: float  # per step: compact one node's storage up to what it applied
    membership_rate: float  # per step: the controller proposes a membership change
    propose_rate: float  # per step: a client proposes
    read_rate: float  # per step: a client starts a linearizable read
    tick_rates: tuple[float, ...]  # ticks per step for each node: clock skew
    max_inflight: int
    max_append_bytes: int
    safety_steps: int
    liveness_steps: int
    term_jump_max: int  # how far a term may jump at once (small: the refusal runs often)

    @classmethod
    def draw(cls, rng: random.Random, safety_steps: int = 500) -> Params:
        nodes = rng.choice((3, 3, 5))
        delay = rng.choice((1, 2, 4))
        # Raft's timing requirement: a round trip well inside the election timeout.
        election = rng.randint(max(8, 4 * delay), 20)
        calm = rng.random() < 0.2  # some seeds run nearly fault-free
        harsh = not calm and rng.random() < 0.3  # leaders crash often (Figure 8, unreliable)
        tiny_messages = rng.random() < 0.5
        return cls(
            nodes=nodes,
            election_ticks=election,
            heartbeat_ticks=rng.randint(1, 3),
            pre_vote=rng.random() < 0.75,
            check_quorum=rng.random() < 0.75,
            drop=0.0 if calm else rng.choice((0.0, 0.02, 0.1, 0.25)),
            duplicate=0.0 if calm else rng.choice((0.0, 0.02, 0.1)),
            delay_steps_max=delay,
            partition_rate=0.0 if calm else rng.choice((0.0, 0.005, 0.02)),
            heal_rate=rng.choice((0.02, 0.05, 0.1)),
            crash_rate=0.0 if calm else rng.choice((0.0, 0.003, 0.01, 0.02)),
            crash_in_ready=0.0 if calm else rng.choice((0.0, 0.001, 0.005)),
            crash_after_vote=0.0 if calm else rng.choice((0.0, 0.1, 0.5)),
            leader_crash_rate=rng.choice((0.02, 0.05)) if harsh else 0.0,
            restart_rate=rng.choice((0.05, 0.2, 0.5) if harsh else (0.02, 0.05, 0.2)),
            compact_rate=rng.choice((0.0, 0.0, 0.01, 0.05)),
            membership_rate=rng.choice((0.0, 0.0, 0.01, 0.03)),
            propose_rate=rng.choice((0.1, 0.3, 0.8)),
            read_rate=rng.choice((0.0, 0.05, 0.2)),
            tick_rates=tuple(rng.uniform(0.6, 1.4) for _ in range(nodes + 8)),
            # One entry per message with one in flight cannot keep up with the
            # workload at all; small messages get a deep pipeline.
            max_inflight=rng.choice((4, 256)) if tiny_messages else rng.choice((1, 4, 256)),
            max_append_bytes=rng.choice((2, 16)) if tiny_messages else 1 << 20,
            safety_steps=safety_steps,
            liveness_steps=60 * election,
            term_jump_max=rng.choice((1, 2, 100)),
        )
