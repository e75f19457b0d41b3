"""The harness's delivery check works by identity, not by counting."""

from __future__ import annotations

from array import array

from laminar.bench.delivery import check_delivery


def test_a_loss_hidden_by_a_duplicate_is_caught() -> None:
    """28 records missing and 28 others twice: the count is right, delivery is not."""
    sent = list(range(100))
    got = [i for i in sent if i >= 28] + list(range(28, 56))
    assert len(got) == len(sent)
    check = check_delivery([array("Q", got)], [(0, 100)], [])
    assert (check.missing, check.duplicated, check.unexpected) == (28, 28, 0)
    assert not check.ok and "records delivered more than once" in check.errors()


def test_unsure_records_may_appear_once_and_unknown_ones_never() -> None:
    consumers = [array("Q", [0, 1, 2]), array("Q", [10, 11, 99])]
    check = check_delivery(consumers, [(0, 3), (10, 1)], [(11, 5)])
    assert (check.missing, check.duplicated, check.unexpected) == (0, 0, 1)
    assert check.examples == ("unexpected id 0x63",)
    exact = check_delivery([array("Q", [0, 1, 2, 10])], [(0, 3), (10, 1)], [(11, 5)])
    assert exact.ok and exact.errors() == {}


def test_a_backlog_run_may_stop_early_but_never_repeats() -> None:
    check = check_delivery([array("Q", [5, 6])], [(5, 10)], [], require_all=False)
    assert check.ok
    assert not check_delivery([array("Q", [5, 5])], [(5, 10)], [], require_all=False).ok
