"""The simulation driver: one seed, one run, every checker watching.

A run has a fault phase (joins, graceful leaves, crashes, static restarts,
pauses past the session, app stalls past the poll deadline, subscription
changes, new partitions, coordinator failovers and failed appends, replayed
old commits, message drops and delays) and then a liveness phase (no faults,
paused processes resumed, drops off) in which the group must converge: every
live member joined and at the group epoch, every subscribed partition owned
by one of them, and each member delivering exactly what the coordinator says.

Time moves in steps of `STEP_S`. Each step: faults, deliver the messages due,
the coordinator's tick, the positions log commits (maybe) and releases the
answers that waited for it, then every member process runs; then the lease
checker and, if the coordinator calls the group stable, the ownership one.
Commits are checked as the coordinator applies them, positions as the log
commits them.

    python -m tests.groups.sim.simulation --seed 17        # replay one seed
    python -m tests.groups.sim.simulation --seeds 2000     # soak
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
from dataclasses import dataclass
from typing import Any

from laminar.groups.errors import GroupError
from laminar.groups.messages import TopicPartition

from .checkers import (
    commits_only_from_holders,
    converged,
    one_lease_per_partition,
    stable_means_owned,
)
from .coordinator_node import COORDINATOR, SimCoordinatorNode
from .history import History, Violation
from .member_process import ALIVE, CRASHED, GONE, PAUSED, SimMember
from .network import SimNetwork

STEP_S = 0.05
GROUP = "g"
TOPICS = ("a", "b")
PROCESSES_MAX = 24


class SimClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def wall_ms(self) -> int:
        return 1_800_000_000_000 + round(self.now * 1000)


@dataclass(frozen=True)
class Params:
    """The plan a seed draws."""

    members_initial: int
    members_max: int
    counts: tuple[tuple[str, int], ...]
    session_timeout_s: float
    poll_timeout_s: float
    drop: float
    delay_max_s: float
    commit_probability: float
    checkpoint_floor: int
    schedule_s: float
    liveness_s: float
    fault_rate: float
    """Faults per simulated second, all kinds together."""
    faults: tuple[tuple[str, float], ...] = ()
    """(kind, weight) of the faults drawn; empty: `FAULTS`."""

    @classmethod
    def draw(cls, rng: random.Random) -> Params:
        return cls(
            members_initial=rng.randint(1, 4),
            members_max=rng.randint(2, 6),
            counts=(("a", rng.randint(1, 8)), ("b", rng.randint(1, 4))),
            session_timeout_s=rng.choice([1.0, 1.5, 2.0, 3.0]),
            poll_timeout_s=rng.uniform(3.0, 6.0),
            drop=rng.choice([0.0, 0.02, 0.1]),
            delay_max_s=rng.choice([0.01, 0.1, 0.4]),
            commit_probability=rng.choice([0.3, 0.7, 1.0]),
            checkpoint_floor=rng.choice([5, 50, 1000]),
            schedule_s=20.0,
            liveness_s=30.0,
            fault_rate=rng.uniform(0.5, 2.0),
        )


FAULTS = (
    ("join", 3),
    ("leave", 1),
    ("crash", 1),
    ("restart_static", 1),
    ("pause", 1),
    ("stall", 1),
    ("subscribe", 1),
    ("failover", 1),
    ("append_failure", 1),
    ("replay_old_commit", 3),
    ("add_partitions", 0.2),
    ("slow_network", 1),
)
SLOW_DELAY_MAX_S = 1.5


PLANS: dict[str, dict[str, Any]] = {
    "mixed": {},
    "pauses": {
        "faults": (("pause", 2), ("join", 1)),
        "fault_rate": 2.0,
        "delay_max_s": 0.4,
        "commit_probability": 0.3,
    },
}
"""Fault plans: every fault, or members paused while answers are slow (the
window in which a lease longer than the session would overlap the new owner)."""


def plan_params(seed: int, plan: str) -> Params:
    return dataclasses.replace(Params.draw(random.Random(seed)), **PLANS[plan])


class Simulation:
    def __init__(self, seed: int, params: Params | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.params = params or Params.draw(self.rng)
        p = self.params
        self.clock = SimClock()
        self.history = History()
        self.network = SimNetwork(random.Random(self.rng.random()), p.drop, p.delay_max_s)
        self.counts = dict(p.counts)
        self.node = SimCoordinatorNode(
            self.clock,
            random.Random(self.rng.random()),
            dict(self.counts),
            self.history,
            p.checkpoint_floor,
        )
        self.ends: dict[TopicPartition, int] = {}
        self.members: list[SimMember] = []
        self._spawned = 0
        self._slow_until = 0.0
        for _ in range(p.members_initial):
            self._spawn()

    # -- the run ----------------------------------------------------------

    def run(self) -> None:
        p = self.params
        for _ in range(round(p.schedule_s / STEP_S)):
            if self.rng.random() < p.fault_rate * STEP_S:
                self._fault()
            self._step()
        self._slow_until = 0.0
        self.network.calm()
        for m in self.members:
            m.wake_at = min(m.wake_at, self.clock.now)
        deadline = self.clock.now + p.liveness_s
        while True:
            self._step()
            why = converged(self._view(), self.members, self.counts)
            if why is None:
                return
            if self.clock.now > deadline:
                raise Violation("convergence", f"not converged after {p.liveness_s} s: {why}")

    def _step(self) -> None:
        now = self.clock.now = self.clock.now + STEP_S
        if self._slow_until and now >= self._slow_until:
            self.network.delay_max_s, self._slow_until = self.params.delay_max_s, 0.0
        for tp in self._partitions():
            self.ends[tp] = self.ends.get(tp, 0) + self.rng.randint(0, 2)
        for destination, message in self.network.due(now):
            self._deliver(destination, message)
        self.node.tick()
        for destination, message in self.node.progress(self.params.commit_probability):
            self.network.send(destination, message, now)
        committed = self.node.durable_positions(GROUP)
        for m in self.members:
            if m.state == PAUSED and now >= m.wake_at:
                m.state = ALIVE
            m.step(self._sender(m), committed, self.ends)
        one_lease_per_partition(self.members, self._partitions())
        stable_means_owned(self._view(), self.counts)

    def _sender(self, m: SimMember) -> Any:
        def send(message: Any) -> None:
            self.network.send(COORDINATOR, (m.name, self.node.generation, message), self.clock.now)

        return send

    def _deliver(self, destination: str, message: Any) -> None:
        if destination != COORDINATOR:
            self._member(destination).deliver(message)
            return
        sender, generation, (kind, request) = message
        if generation != self.node.generation:
            return  # sent to a coordinator that has failed over since
        if kind == "hb":
            self.node.heartbeat(sender, request)
            return
        before = self._view()
        ends = {tp: self.ends.get(tp, 0) for tp in request.positions}
        answer = self.node.commit(sender, request, ends)
        commits_only_from_holders(before, request, answer, self.members)
        for error in answer.results.values():
            if error is GroupError.NONE:
                self.history.commits_accepted += 1
            elif error in (GroupError.FENCED, GroupError.STALE_EPOCH):
                self.history.commits_fenced += 1

    def _view(self) -> Any:
        return self.node.core.describe(GROUP).answer.group

    def _partitions(self) -> list[TopicPartition]:
        return [(t, n) for t, count in sorted(self.counts.items()) for n in range(count)]

    def _member(self, name: str) -> SimMember:
        return next(m for m in self.members if m.name == name)

    # -- faults -----------------------------------------------------------

    def _spawn(self, instance_id: str | None = None) -> None:
        if self._spawned >= PROCESSES_MAX:
            return
        self._spawned += 1
        topics = self.rng.sample(TOPICS, self.rng.randint(1, len(TOPICS)))
        if instance_id is None and self.rng.random() < 0.3:
            # one process per instance id: a second is refused for as long as
            # the first lives (INSTANCE_IN_USE), which is right but never converges
            taken = {m.core.instance_id for m in self.members if m.running}
            free = [f"host-{i}" for i in range(1, 4) if f"host-{i}" not in taken]
            instance_id = self.rng.choice(free) if free else None
        self.members.append(
            SimMember(
                f"p{self._spawned}",
                self.clock,
                random.Random(self.rng.random()),
                GROUP,
                topics,
                instance_id,
                self.params.session_timeout_s,
                self.params.poll_timeout_s,
            )
        )

    def _close(self, m: SimMember) -> None:
        leave = m.core.close()
        if leave is not None:
            self._sender(m)(("hb", leave))
        m.state = GONE

    def _fault(self) -> None:
        rng = self.rng
        kinds, weights = zip(*(self.params.faults or FAULTS), strict=True)
        kind = rng.choices(kinds, weights)[0]
        alive = [m for m in self.members if m.state == ALIVE]
        victim = rng.choice(alive) if alive else None
        now = self.clock.now
        if kind == "join" and len(alive) < self.params.members_max:
            self._spawn()
        elif victim is None:
            return
        elif kind == "leave":
            self._close(victim)
        elif kind == "crash":
            victim.state = CRASHED
        elif kind == "restart_static" and victim.core.instance_id is not None:
            # a rolling restart (the old process leaves with -2: the new one
            # takes its partitions over) or a crash (the new one waits out
            # the old one's session: INSTANCE_IN_USE)
            if rng.random() < 0.5:
                self._close(victim)
            else:
                victim.state = CRASHED
            self._spawn(victim.core.instance_id)
        elif kind == "pause":
            victim.state = PAUSED
            victim.wake_at = now + rng.uniform(0.3, 3.0) * self.params.session_timeout_s
        elif kind == "stall":
            victim.stalled = True
            victim.wake_at = now + rng.uniform(0.5, 2.0) * self.params.poll_timeout_s
        elif kind == "subscribe":
            victim.core.subscribe(rng.sample(TOPICS, rng.randint(1, len(TOPICS))))
        elif kind in ("failover", "append_failure"):
            self.node.fail_over(new_node=kind == "failover")
        elif kind == "replay_old_commit" and victim.sent_commits:
            old = rng.choice(victim.sent_commits)
            self._sender(victim)(("commit", old))
        elif kind == "slow_network":
            self.network.delay_max_s = SLOW_DELAY_MAX_S  # reorders a member's heartbeats
            self._slow_until = now + rng.uniform(1.0, 4.0)
        elif kind == "add_partitions":
            self.counts["b"] += 1
            self.node.set_partitions("b", self.counts["b"])


def run_seed(seed: int, params: Params | None = None, plan: str = "mixed") -> Simulation:
    """Run one seed; raises Violation naming the seed on failure."""
    sim = Simulation(seed, params or plan_params(seed, plan))
    try:
        sim.run()
    except Violation as violation:
        raise Violation(
            violation.checker,
            f"{violation.message} (seed {seed}, t={sim.clock.now - 1000:.2f} s)\n"
            "reproduce with: .venv/bin/python -m tests.groups.sim.simulation "
            f"--seed {seed} --plan {plan}",
        ) from None
    return sim


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int)
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--plan", choices=sorted(PLANS), default="mixed")
    args = parser.parse_args()
    seeds = [args.seed] if args.seed is not None else range(args.seeds)
    failed = 0
    for seed in seeds:
        try:
            run_seed(seed, plan=args.plan)
        except Violation as violation:
            failed += 1
            print(violation, file=sys.stderr)
    print(f"{len(seeds) - failed} of {len(seeds)} seeds passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
