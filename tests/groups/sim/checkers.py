"""The properties the simulation checks, one function each."""

from __future__ import annotations

from collections.abc import Iterable

from laminar.groups.errors import GroupError
from laminar.groups.messages import CommitAnswer, CommitRequest, GroupView, TopicPartition

from .history import Violation
from .member_process import ALIVE, SimMember


def one_lease_per_partition(
    members: Iterable[SimMember], partitions: Iterable[TopicPartition]
) -> None:
    """At no time do two member processes hold a valid lease on one partition."""
    running = [m for m in members if m.running]
    for tp in partitions:
        holders = [m.name for m in running if m.core.holds(tp)]
        if len(holders) > 1:
            raise Violation("one lease per partition", f"{tp} leased by {holders} at once")


def commits_only_from_holders(
    before: GroupView | None,
    request: CommitRequest,
    answer: CommitAnswer,
    members: Iterable[SimMember],
) -> None:
    """A commit is applied only from the partition's holder at its current
    epoch, while no other process holds a lease on it."""
    view = {m.member_id: m for m in before.members} if before is not None else {}
    holder = view.get(request.member_id)
    for tp, error in answer.results.items():
        if error is not GroupError.NONE:
            continue
        if holder is None or holder.epoch != request.member_epoch:
            raise Violation("fencing", f"{request} applied to {tp} from a stale member: {holder}")
        if tp not in holder.assignment | holder.revoking:
            raise Violation("fencing", f"{request} applied to {tp} it does not hold")
        others = [
            m.name
            for m in members
            if m.running and m.core.member_id != request.member_id and m.core.holds(tp)
        ]
        if others:
            raise Violation("fencing", f"{request} applied to {tp} while {others} lease it")


def stable_means_owned(view: GroupView | None, counts: dict[str, int]) -> None:
    """Whenever the coordinator calls the group stable, every partition of a
    topic its members subscribe to is owned by one of them."""
    if view is None or view.state != "stable":
        return
    wanted = {(t, p) for m in view.members for t in m.topics for p in range(counts.get(t, 0))}
    owned = {tp for m in view.members for tp in m.assignment}
    if owned != wanted:
        raise Violation("stable means owned", f"unowned {sorted(wanted - owned)} in {view}")


def converged(
    view: GroupView | None, members: Iterable[SimMember], counts: dict[str, int]
) -> str | None:
    """None once the group is stable and every subscribed partition is owned
    by a live member that knows it; else why not."""
    alive = [m for m in members if m.state == ALIVE]
    if not all(m.core.joined for m in alive):
        return "a live member has not joined"
    if view is None:
        return None if not alive else "no group"
    ids = {m.core.member_id for m in alive}
    if {m.member_id for m in view.members} != ids:
        return f"members {[m.member_id for m in view.members]} are not the live ones {ids}"
    if view.state != "stable" and alive:
        return f"group {view.state}: {view.members}"
    topics = {t for m in alive for t in m.core.topics}
    wanted = {(t, p) for t in topics for p in range(counts.get(t, 0))}
    owned = [tp for m in view.members for tp in m.assignment]
    if sorted(owned) != sorted(wanted):
        return f"owned {sorted(owned)} != subscribed {sorted(wanted)}"
    by_id = {m.member_id: m for m in view.members}
    for m in alive:
        if m.core.assignment != by_id[m.core.member_id].assignment:
            return f"{m.name} delivers {sorted(m.core.assignment)}, holds {by_id[m.core.member_id]}"
    return None
