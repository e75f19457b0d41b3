"""The history checker's workload, short: clients produce and read while nodes are
killed, paused and (with namespaces) cut off; nothing the checker looks for may
happen. `make soak` runs it for minutes (`python -m tests.cluster.workload`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.workload import Settings, run

SHORT = Settings(
    duration_s=14, clients=3, partitions=2, fault_s=(2.5, 4.0), calm_s=(0.5, 1.5), seed=15
)


@pytest.mark.soak  # a fault schedule (suite time): `make soak` runs it
def test_a_history_under_faults_is_valid(tmp_path: Path) -> None:
    outcome = run(tmp_path, SHORT)
    print(outcome.summary())
    assert outcome.report.valid, outcome.summary()
    # Not a vacuous pass: writes were acknowledged, reads saw records, faults happened.
    assert outcome.report.acknowledged >= 20, outcome.summary()
    assert outcome.records_read > 0, outcome.summary()
    assert outcome.faults, outcome.summary()
