"""The failover probe's measurement and summary (no cluster: the probe itself
runs in `python -m laminar.bench.failover`)."""

from __future__ import annotations

from laminar.bench.failover import Attempt, ProbeRun, failover_ns, summary


def test_failover_counts_only_produces_sent_after_the_kill() -> None:
    kill = 1_000
    attempts = [
        Attempt(900, 1_005),  # sent before the kill, answered just after: the old leader
        Attempt(1_001, None),  # failed while there was no leader
        Attempt(1_200, 2_500),
        Attempt(1_300, 2_400),  # answered first although sent later
    ]
    assert failover_ns(kill, attempts) == 1_400
    assert failover_ns(kill, attempts[:2]) is None


def _run(n: int, seconds: float | None, *, ok: bool = True) -> ProbeRun:
    run = ProbeRun(n, failover_s=seconds)
    run.delivery = {"ok": ok, "read": 1, "acknowledged": 1, "lost": 0, "duplicated": 0}
    return run


def test_summary_is_the_median_of_good_runs_and_says_whether_the_goal_is_met() -> None:
    runs = [_run(1, 1.0), _run(2, 3.0), _run(3, 1.5), _run(4, 0.1, ok=False), _run(5, None)]
    s = summary(runs)
    assert s["failover_s"] == [1.0, 3.0, 1.5]  # a run that lost records does not count
    assert s["median_s"] == 1.5 and s["met"]
    assert (s["ok"], s["runs"]) == (3, 5)
    assert not summary([_run(1, 2.5)])["met"]
    assert summary([])["median_s"] is None
