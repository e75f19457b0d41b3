"""The history checker finds each anomaly it names, and passes a clean history."""

from __future__ import annotations

import pytest

from tests.cluster.history import Produce, Read, check

A, B, C, D = b"a", b"b", b"c", b"d"


def _clean() -> tuple[list[Produce | Read], dict[str, dict[int, list[tuple[int, bytes]]]]]:
    history: list[Produce | Read] = [
        Produce(0, A, "ok", 0),
        Produce(0, B, "ok", 1),
        Produce(0, C, "info"),
        Produce(0, D, "fail"),
        Read(0, ((0, A), (1, B))),
    ]
    log = [(0, A), (1, B), (2, C)]
    return history, {"n1": {0: log}, "n2": {0: list(log)}}


def test_a_clean_history_is_valid() -> None:
    history, final = _clean()
    report = check(history, final)
    assert report.valid, report.summary()
    assert (report.acknowledged, report.unknown_present, report.unknown_absent) == (2, 1, 0)


def test_an_acknowledged_value_missing_on_one_replica_is_lost() -> None:
    history, final = _clean()
    final["n2"][0] = [(0, A)]
    report = check(history, final)
    assert len(report.lost) == 1 and "n2" in report.lost[0]


def test_a_replica_without_the_partition_at_all_lost_everything() -> None:
    history, final = _clean()
    del final["n2"][0]
    assert len(check(history, final).lost) == 2


def test_a_value_stored_twice_is_duplicated() -> None:
    history, final = _clean()
    final["n1"][0] = [(0, A), (1, B), (2, A)]
    report = check(history, final)
    assert report.duplicated


def test_an_acknowledged_offset_must_hold_its_value() -> None:
    history, final = _clean()
    history[0] = Produce(0, A, "ok", 5)
    assert check(history, final).wrong_offset


def test_replicas_disagreeing_at_an_offset_are_inconsistent() -> None:
    history, final = _clean()
    final["n2"][0] = [(0, A), (1, B), (2, D)]
    report = check(history, final)
    assert report.inconsistent_offsets
    assert report.aborted_read  # D was refused, yet n2 stores it


def test_a_refused_value_that_was_read_is_an_aborted_read() -> None:
    history, final = _clean()
    history.append(Read(0, ((3, D),)))
    report = check(history, final)
    assert report.aborted_read and report.uncommitted_read


def test_a_value_nobody_produced_is_a_phantom() -> None:
    history, final = _clean()
    final["n1"][0] = [*final["n1"][0], (3, b"zz")]
    assert check(history, final).phantom


def test_reading_a_value_the_final_log_lacks_is_an_uncommitted_read() -> None:
    history, final = _clean()
    final = {name: {0: [(0, A), (1, B)]} for name in final}
    history.append(Read(0, ((2, C),)))
    report = check(history, final)
    assert report.uncommitted_read and not report.lost


def test_a_read_with_a_gap_is_nonmonotonic() -> None:
    history, final = _clean()
    history.append(Read(0, ((0, A), (2, C))))
    assert check(history, final).nonmonotonic_read


def test_values_must_be_unique_per_attempt() -> None:
    with pytest.raises(ValueError, match="unique"):
        check([Produce(0, A, "ok", 0), Produce(0, A, "ok", 1)], {})
