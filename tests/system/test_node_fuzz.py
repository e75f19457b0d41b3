"""The structure-aware fuzzer (`tests/system/fuzz.py`) against a real node,
briefly: nothing crashes, memory stays within the budget, the guard's pings
are answered and every acknowledged record is intact. `make soak` runs it for
minutes with a fresh seed."""

from __future__ import annotations

from pathlib import Path

from tests.system import fuzz
from tests.system.nodes import start_node

SECONDS = 12.0
PING_MAX_S = 2.0
"""Generous: the machine is shared with the rest of the suite."""


def test_fuzzed_frames_break_nothing_and_lose_nothing(tmp_path: Path) -> None:
    with start_node(tmp_path, **fuzz.NODE_FLAGS) as node:
        guard, tally = fuzz.run(node, seed=24, seconds=SECONDS, ping_max_s=PING_MAX_S)
        assert node.alive(), node.log_text()[-2000:]
        problems = guard.verdict()
    print(tally, guard.summary())
    assert tally.frames > 1000 and tally.datagrams > 100
    assert not problems, problems
