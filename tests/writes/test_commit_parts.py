"""How a coordinator groups a commit's parts: by where they are staged, publish order."""

from __future__ import annotations

import pytest

from laminar.wire.writes import StagedPart, WriteStamp
from laminar.writes.coordinator import CommitPartsError, check_parts, slots


def _part(pid: int, task: int, node: str) -> StagedPart:
    return StagedPart(pid, 1, task, task, 1, 1, node)


def test_parts_are_checked_where_they_are_staged_and_published_node_after_node() -> None:
    """Tasks of one partition staged before and after a leader change: each
    node checks its own, and the partition publishes them node by node in the
    order the commit first names each, each node with its own stamp slot."""
    parts = [_part(7, 0, "n1"), _part(8, 1, "n2"), _part(7, 2, "n3"), _part(7, 3, "n1")]
    by_holding = check_parts(parts)
    assert by_holding == {
        ("n1", 7): (parts[0], parts[3]),
        ("n2", 8): (parts[1],),
        ("n3", 7): (parts[2],),
    }
    assert slots(by_holding) == {
        7: [("n1", (parts[0], parts[3])), ("n3", (parts[2],))],
        8: [("n2", (parts[1],))],
    }


def test_a_commit_names_each_attempt_once_and_wherever_it_is_staged() -> None:
    with pytest.raises(CommitPartsError, match="twice"):
        check_parts([_part(7, 0, "n1"), _part(7, 0, "n2")])


def test_slots_keep_stamps_of_one_commit_apart_and_old_stamps_read_as_slot_0() -> None:
    stamp = WriteStamp(0xABC, 5, 9, slot=2)
    assert WriteStamp.decode(stamp.encode()) == stamp
    assert stamp.encode() != WriteStamp(0xABC, 5, 9, slot=0).encode()
    before_slots = (0xABC).to_bytes(8, "big") + (5).to_bytes(4, "big") + (9).to_bytes(4, "big")
    assert WriteStamp.decode(before_slots) == WriteStamp(0xABC, 5, 9, 0)
