"""Checkers over a simulated cluster: one job each, a readable complaint when broken.

The ground truth is the simulator's: a crashed member is dead, a member that
left has left, every other member is alive. Checks compare each running
member's view with the truth and with the other views.
"""

from __future__ import annotations

from collections import Counter

from laminar.swim import MemberState
from tests.swim.simcluster import SimCluster, node_id

CHECK_EVERY_MS = 1000


def truth(cluster: SimCluster, index: int) -> MemberState:
    member = cluster.members[index]
    if member.left_at_ms is not None:
        return MemberState.LEFT
    if member.crashed:
        return MemberState.DEAD
    return MemberState.ALIVE


def view_disagreements(cluster: SimCluster, limit: int = 5) -> list[str]:
    """Where running members' views differ from the truth or from each other
    (empty when every running member sees every member as it is, with the same
    incarnation and weight)."""
    problems: list[str] = []
    observers = cluster.live()
    for subject in range(len(cluster.members)):
        expected = truth(cluster, subject)
        seen: Counter[tuple[int, float] | None] = Counter()
        for observer in observers:
            member = observer.swim.member(node_id(subject))
            if member is None:
                seen[None] += 1
                problems.append(f"n{observer.index} does not know n{subject} ({expected.label})")
            elif member.state is not expected:
                problems.append(
                    f"n{observer.index} sees n{subject} {member.state.label}, "
                    f"it is {expected.label}"
                )
            else:
                seen[(member.incarnation, member.weight)] += 1
            if len(problems) >= limit:
                return problems
        if expected is MemberState.ALIVE and len(seen) > 1:
            problems.append(f"views of n{subject} disagree: {dict(seen)}")
    return problems[:limit]


def settle(cluster: SimCluster, within_ms: int) -> list[str]:
    """Run until the views agree with the truth (checked every second), at most
    `within_ms`; returns the disagreements left (empty: settled)."""
    deadline = cluster.now_ms + within_ms
    while True:
        problems = view_disagreements(cluster)
        if not problems or cluster.now_ms >= deadline:
            return problems
        cluster.run_until(min(cluster.now_ms + CHECK_EVERY_MS, deadline))


def quiesce(cluster: SimCluster, within_ms: int) -> list[str]:
    """Run `within_ms` more and name the running members still holding news to
    send: with nothing changing, every update must reach its retransmit limit
    and leave the queue (the dissemination bound of SWIM section 4.1)."""
    cluster.run_until(cluster.now_ms + within_ms)
    return [
        f"n{m.index} still has {m.swim.pending_updates()} updates to send"
        for m in cluster.live()
        if m.swim.pending_updates()
    ][:5]


def describe(cluster: SimCluster, problems: list[str], what: str) -> str:
    return (
        f"{what} after {cluster.now_ms} ms: {'; '.join(problems)} "
        f"(reproduce with seed={cluster.seed})"
    )
