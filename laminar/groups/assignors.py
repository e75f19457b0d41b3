"""Server-side assignors: pure functions from members and partition counts
to each member's target partitions.

`range` gives each subscriber of a topic a contiguous run of its partitions
(Kafka's RangeAssignor): predictable, co-partitioned topics line up, but it
ignores what members hold now. `uniform-sticky` balances the total count
within one among the members that could take each partition and moves as few
partitions as that needs: a member keeps what it has unless balance asks for
it (Kafka's UniformAssignor in spirit). Members are ordered by `sort_key` (a
static member's instance id, else its member id) so a restarted static
member lands where it was.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from laminar.groups.messages import TopicPartition


@dataclass(frozen=True, slots=True)
class Subscriber:
    """One member as an assignor sees it."""

    topics: frozenset[str]
    current: frozenset[TopicPartition]
    """Its current target: what stickiness keeps."""
    sort_key: str


Assignment = dict[str, frozenset[TopicPartition]]
Assignor = Callable[[Mapping[str, Subscriber], Mapping[str, int]], Assignment]


def range_assign(members: Mapping[str, Subscriber], counts: Mapping[str, int]) -> Assignment:
    """Per topic, its subscribers in key order each take a contiguous run."""
    out: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for topic in sorted({t for s in members.values() for t in s.topics}):
        subscribers = sorted((s.sort_key, m) for m, s in members.items() if topic in s.topics)
        share, extra = divmod(counts.get(topic, 0), len(subscribers))
        start = 0
        for i, (_, member) in enumerate(subscribers):
            size = share + (1 if i < extra else 0)
            out[member].update((topic, p) for p in range(start, start + size))
            start += size
    return {m: frozenset(ps) for m, ps in out.items()}


def uniform_sticky_assign(
    members: Mapping[str, Subscriber], counts: Mapping[str, int]
) -> Assignment:
    """Keep what members hold, hand out the rest to the least loaded, then move
    one partition at a time from the most loaded member to a member at least
    two below it that subscribes to its topic, until no such move is left.

    With equal subscriptions this ends balanced within one, and a member only
    loses partitions while it holds two more than the least loaded one: the
    fewest moves that reach balance.
    """
    order = sorted(members, key=lambda m: (members[m].sort_key, m))
    load: dict[str, set[TopicPartition]] = {m: set() for m in order}
    taken: set[TopicPartition] = set()
    for m in order:
        for tp in sorted(members[m].current):
            topic, partition = tp
            if topic in members[m].topics and partition < counts.get(topic, 0) and tp not in taken:
                load[m].add(tp)
                taken.add(tp)
    rank = {m: i for i, m in enumerate(order)}
    topics = sorted({t for s in members.values() for t in s.topics})
    for topic in topics:
        # the least loaded subscriber first (only this loop loads them meanwhile)
        heap = [(len(load[m]), rank[m], m) for m in order if topic in members[m].topics]
        heapq.heapify(heap)
        for partition in range(counts.get(topic, 0)):
            if (topic, partition) not in taken:
                count, r, least = heap[0]
                load[least].add((topic, partition))
                heapq.heapreplace(heap, (count + 1, r, least))
    while _move_one(members, load, rank):
        pass
    return {m: frozenset(ps) for m, ps in load.items()}


def _move_one(
    members: Mapping[str, Subscriber], load: dict[str, set[TopicPartition]], rank: dict[str, int]
) -> bool:
    by_load = sorted(load, key=lambda m: (-len(load[m]), rank[m]))
    lightest = len(load[by_load[-1]])
    for donor in by_load:
        if len(load[donor]) < lightest + 2:
            return False
        for receiver in reversed(by_load):
            if len(load[receiver]) > len(load[donor]) - 2:
                break
            movable = [tp for tp in load[donor] if tp[0] in members[receiver].topics]
            if movable:
                tp = max(movable)
                load[donor].remove(tp)
                load[receiver].add(tp)
                return True
    return False


ASSIGNORS: Final[Mapping[str, Assignor]] = {
    "range": range_assign,
    "uniform-sticky": uniform_sticky_assign,
}
DEFAULT_ASSIGNOR: Final = "uniform-sticky"
