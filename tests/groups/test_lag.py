"""`LagWatch`: which series a shard reports for /metrics, and its bound. The
metadata and the partition leaders are stand-ins here (what they answer is
tested where they live); the counting itself is tested on real nodes
(tests/matrix/test_groups.py, tests/system/test_node_groups.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from laminar.groups.lag import LagWatch
from laminar.groups.messages import GroupView, MemberView, Position
from laminar.wire import Frame, ListOffsetsRequest, ListOffsetsResponse, TopicInfo

END = 100


class Leaders:
    """Partition leaders that each hold END records from index 0, without gaps."""

    def __init__(self) -> None:
        self.asked: list[ListOffsetsRequest] = []

    async def to_leader(self, request: ListOffsetsRequest) -> Frame:
        self.asked.append(request)
        start = request.count_from or 0
        answer = ListOffsetsResponse(request.partition_id, 0, END, END, records=END - start)
        return answer.to_frame(1)


def _metadata(*topics: TopicInfo) -> Any:
    by_name = {t.name: t for t in topics}
    return SimpleNamespace(state=SimpleNamespace(by_name=by_name.get))


def _group(name: str, topic: str, positions: dict[int, int]) -> GroupView:
    member = MemberView("m", None, 1, (topic,), frozenset(), frozenset(), frozenset(), False)
    held = {(topic, p): Position(i, "m", 1, 0) for p, i in positions.items()}
    return GroupView(name, 1, "uniform", (member,), held)


def test_every_partition_of_a_group_s_topics_is_reported_up_to_the_bound() -> None:
    views = [_group("b", "orders", {0: 40}), _group("a", "orders", {1: 10, 2: 100})]

    async def groups() -> list[GroupView]:
        return views

    leaders = Leaders()
    watch = LagWatch(groups, _metadata(TopicInfo("orders", 7, 3)), leaders, series_max=5)  # type: ignore[arg-type]
    asyncio.run(watch.refresh())
    assert watch.snapshot() == {
        "series": [
            ["a", "orders", 0, 100],  # never committed: from the start
            ["a", "orders", 1, 90],
            ["a", "orders", 2, 0],
            ["b", "orders", 0, 60],
            ["b", "orders", 1, 100],
        ],
        "dropped": 1,  # b's partition 2: past the bound, not even asked
    }
    assert len(leaders.asked) == 5
