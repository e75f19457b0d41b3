"""SIGKILL at random moments: every acknowledged record survives, byte for byte."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from laminar.log import SegmentedLog
from laminar.reactor import uring_unavailable_reason

from .crash_writer import CONFIG, check_value

ROUNDS = int(os.environ.get("LAMINAR_CRASH_ROUNDS", "8"))
REPO = Path(__file__).resolve().parents[2]


def run_writer_and_kill(
    directory: Path, round_no: int, after_s: float, kind: str
) -> list[tuple[int, int, int]]:
    """Start a writer, SIGKILL it after `after_s`, return its acknowledged batches."""
    writer = subprocess.Popen(
        [sys.executable, "-m", "tests.log.crash_writer", str(directory), str(round_no), kind],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None
    first_line = writer.stdout.readline()
    assert first_line.startswith("open "), first_line
    time.sleep(after_s)
    writer.send_signal(signal.SIGKILL)
    out, _ = writer.communicate(timeout=30)
    acks = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "ack":  # a torn last line was never an ack
            acks.append((int(parts[1]), int(parts[2]), int(parts[3])))
    return acks


async def verify(directory: Path, acked: list[tuple[int, int, int]]) -> int:
    log = await SegmentedLog.open(directory, CONFIG)
    try:
        for first, count, batch_id in acked:
            for j in range(count):
                record = await log.read(first + j)
                assert check_value(record.value) == (batch_id, j)
        # Nothing in the log is altered or duplicated, acknowledged or not.
        seen = set()
        index = log.lowest_index
        while index < log.highest_index:
            for record in await log.read_range(index, max_bytes=1 << 20):
                claim = check_value(record.value)
                assert claim not in seen, f"record {claim} appears twice"
                seen.add(claim)
                index = record.index + 1
        return log.highest_index
    finally:
        await log.close()


@pytest.mark.parametrize("kind", ["syscall", "uring"])
def test_sigkill_never_loses_an_acknowledged_record(tmp_path: Path, kind: str) -> None:
    if kind == "uring" and (reason := uring_unavailable_reason()) is not None:
        pytest.skip(f"io_uring unavailable here: {reason}")
    rng = random.Random(int(os.environ.get("LAMINAR_CRASH_SEED", "7")))
    acked: list[tuple[int, int, int]] = []
    records = 0
    for round_no in range(1, ROUNDS + 1):
        acks = run_writer_and_kill(tmp_path, round_no, rng.uniform(0.05, 0.5), kind)
        acked.extend(acks)
        records = asyncio.run(verify(tmp_path, acked))
    assert len(acked) > ROUNDS, "the writer should have acknowledged many batches"
    assert records >= sum(count for _, count, _ in acked)
