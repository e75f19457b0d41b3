"""benchmarks/move_bench.py for a few seconds with tiny data, so it cannot rot:
real nodes, a real move, both windows measured and every acknowledged record
read back from each new replica by identity."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.soak  # 40 s of real nodes for a harness `make bench` runs anyway: under `make soak`
def test_a_short_move_bench_measures_both_windows_and_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "runs.json"
    command = [
        *(sys.executable, str(ROOT / "benchmarks" / "move_bench.py"), "--runs", "1"),
        *("--rate", "200", "--fill-mib", "0.25", "--steady", "1", "--warmup", "0.5"),
        *("--settle", "0.2", "--tail", "0.2", "--json", str(out)),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "exactly once" in done.stdout
    (run,) = json.loads(out.read_text())
    assert run["windows"]["steady"]["requests"] > 0
    assert run["windows"]["move"]["requests"] > 0
    assert run["move_s"] > 0
    holders = set(run["delivery"])
    assert run["newcomer"] in holders and run["removed"] not in holders and len(holders) == 3
    for verdict in run["delivery"].values():
        assert verdict["ok"] and verdict["lost"] == 0
        assert verdict["acknowledged"] == run["acknowledged"] + run["fill_records"]
