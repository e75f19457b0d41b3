"""`ProducerSequences`: the numbering behind `Client(idempotent=True)`."""

from __future__ import annotations

from laminar.client.producer import ProducerSequences


def test_each_partition_numbers_its_records_under_its_own_producer() -> None:
    seqs = ProducerSequences()
    a0 = seqs.assign("t", 0, 3)
    a1 = seqs.assign("t", 0, 2)
    b0 = seqs.assign("t", 1, 1)
    assert a0[1] == 0 and a1 == (a0[0], 3)
    assert b0[1] == 0 and b0[0] != a0[0]


def test_a_failure_starts_a_new_producer_once() -> None:
    seqs = ProducerSequences()
    old, _ = seqs.assign("t", 0, 5)
    seqs.failed("t", 0, old)
    new, sequence = seqs.assign("t", 0, 1)
    assert new != old and sequence == 0
    seqs.failed("t", 0, old)  # a later failure of the old producer changes nothing
    assert seqs.assign("t", 0, 1) == (new, 1)
