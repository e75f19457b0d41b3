"""The producer table (`laminar.shards.idempotence`): rules by example, then
properties over random programs of batches, retries, gaps and restarts."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar.shards.idempotence import AppendedBatch, ProducerTable, Verdict
from laminar.wire import ProducerStamp

# --- the rules, one example each ------------------------------------------------------


def _appended(table: ProducerTable, producer: int, first: int, count: int, index: int) -> None:
    assert table.decide(producer, first, count).verdict is Verdict.APPEND
    table.appended(producer, AppendedBatch(first, count, index, 1000 + index))


def test_an_unknown_producer_starts_at_zero_and_an_overtaking_batch_is_refused() -> None:
    """Rule 6: a pipelined producer's batch 55 reaching a new leader before
    its batches 0-54 (resent after NOT_LEADER) must not be appended, or those
    would then be answered "appended before" without ever being appended."""
    table = ProducerTable()
    assert table.decide(7, 0, 3).verdict is Verdict.APPEND
    overtaking = table.decide(7, 55, 1)
    assert overtaking.verdict is Verdict.OUT_OF_ORDER and "start at sequence 0" in overtaking.reason
    assert table.next_sequence(7) is None
    for sequence in range(56):
        _appended(table, 7, sequence, 1, index=sequence)
    assert table.decide(7, 54, 1).verdict is Verdict.DUPLICATE


def test_the_next_batch_continues_the_sequence() -> None:
    table = ProducerTable()
    _appended(table, 7, 0, 3, index=10)
    assert table.next_sequence(7) == 3
    decision = table.decide(7, 3, 2)
    assert decision.verdict is Verdict.APPEND and decision.expected_sequence == 3


def test_a_resent_batch_gets_its_original_index_and_time() -> None:
    table = ProducerTable()
    _appended(table, 7, 0, 3, index=10)
    _appended(table, 7, 3, 4, index=20)
    decision = table.decide(7, 0, 3)
    assert decision.verdict is Verdict.DUPLICATE
    assert (decision.first_index, decision.timestamp_ms) == (10, 1010)
    # A sub-range of one batch is in the log contiguously: its index is known too.
    assert table.decide(7, 4, 2).first_index == 21


def test_a_duplicate_spanning_batches_or_forgotten_has_no_index() -> None:
    table = ProducerTable(batches_max=2)
    for i in range(4):
        _appended(table, 7, 2 * i, 2, index=100 * i)
    assert table.decide(7, 0, 2).verdict is Verdict.DUPLICATE_INDEX_UNKNOWN  # forgotten batch
    spanning = table.decide(7, 5, 2)  # half of batch 2, half of batch 3
    assert spanning.verdict is Verdict.DUPLICATE_INDEX_UNKNOWN
    assert "appended before" in spanning.reason


def test_a_gap_is_refused_and_says_what_is_missing() -> None:
    table = ProducerTable()
    _appended(table, 7, 0, 3, index=0)
    decision = table.decide(7, 5, 1)
    assert decision.verdict is Verdict.OUT_OF_ORDER
    assert "3..4 were never appended" in decision.reason


def test_an_overlap_is_refused() -> None:
    table = ProducerTable()
    _appended(table, 7, 0, 3, index=0)
    assert table.decide(7, 2, 3).verdict is Verdict.OUT_OF_ORDER


def test_recording_a_batch_that_was_not_decided_is_a_bug() -> None:
    table = ProducerTable()
    _appended(table, 7, 0, 3, index=0)
    with pytest.raises(ValueError, match="decide"):
        table.appended(7, AppendedBatch(9, 1, 5, 0))


def test_the_least_recently_active_producer_is_forgotten_first() -> None:
    table = ProducerTable(producers_max=2)
    _appended(table, 1, 0, 1, index=0)
    _appended(table, 2, 0, 1, index=1)
    table.decide(1, 0, 1)  # producer 1 is active again
    _appended(table, 3, 0, 1, index=2)
    assert 2 not in table and 1 in table and 3 in table
    assert table.evicted == 1


def _owned(table: ProducerTable, owner: int, producer: int, index: int) -> None:
    assert table.decide(producer, 0, 1).verdict is Verdict.APPEND
    table.appended(producer, AppendedBatch(0, 1, index, 1000 + index), owner)


def test_a_client_churning_producer_ids_evicts_only_its_own() -> None:
    """4,200 one-record produces with random ids from one connection evicted a
    real producer of another connection, whose next batch was then refused."""
    table = ProducerTable(producers_max=64, per_owner_max=8)
    _owned(table, owner=1, producer=7, index=0)  # the real producer, idle from now on
    for n in range(4200):
        _owned(table, owner=2, producer=1000 + n, index=1 + n)
    assert 7 in table and table.decide(7, 1, 1).verdict is Verdict.APPEND
    assert len(table) == 1 + 8  # the churner holds its bound, its newest ids
    assert 1000 + 4199 in table and 1000 + 4191 not in table


def test_a_full_table_forgets_the_owner_with_the_most_first() -> None:
    table = ProducerTable(producers_max=6, per_owner_max=4)
    _owned(table, owner=1, producer=1, index=0)  # the least recently active of all
    for n, owner in enumerate((2, 2, 2, 3, 3)):
        _owned(table, owner=owner, producer=10 + n, index=1 + n)
    _owned(table, owner=4, producer=99, index=9)
    assert 1 in table and 10 not in table  # owner 2's oldest went, not owner 1's only
    assert table.evicted == 1


def test_a_producer_rebuilt_from_the_log_is_owned_by_the_connection_that_continues_it() -> None:
    table = ProducerTable.restored([(ProducerStamp(5, 0, 1), 0, 0)], per_owner_max=1)
    table.appended(5, AppendedBatch(1, 1, 1, 1), owner=3)
    _owned(table, owner=3, producer=6, index=2)  # owner 3 is at its bound: its own goes
    assert 5 not in table and 6 in table


def test_restored_takes_the_newest_stamp_of_each_producer() -> None:
    newest_first = [
        (ProducerStamp(1, 6, 2), 40, 4),
        (ProducerStamp(2, 0, 5), 30, 3),
        (ProducerStamp(1, 3, 3), 20, 2),
        (ProducerStamp(1, 0, 3), 10, 1),
    ]
    table = ProducerTable.restored(newest_first)
    assert table.next_sequence(1) == 8 and table.next_sequence(2) == 5
    assert [b.first_index for b in table.batches(1)] == [10, 20, 40]
    assert table.decide(1, 3, 3).first_index == 20


# --- properties over random programs --------------------------------------------------


@dataclass(frozen=True)
class Send:
    """Producer `producer` sends a batch `shift` away from where it should start
    (0: the next batch; negative: a resend of an earlier one; positive: a gap)."""

    producer: int
    shift: int
    count: int


sends = st.lists(
    st.builds(
        Send,
        st.integers(0, 3),
        st.one_of(st.just(0), st.just(0), st.integers(-12, 4)),
        st.integers(1, 4),
    ),
    max_size=60,
)


class Partition:
    """A log of (producer, sequence) records with its table: the system under test."""

    def __init__(self, table: ProducerTable) -> None:
        self.table = table
        self.log: list[tuple[int, int]] = []
        self.stamps: list[tuple[ProducerStamp, int, int]] = []  # oldest first
        self.sent: dict[int, int] = {}  # what each producer believes it has written

    def send(self, s: Send) -> Verdict:
        believed = self.sent.get(s.producer, 0)
        first = max(0, believed + s.shift)
        decision = self.table.decide(s.producer, first, s.count)
        if decision.verdict is Verdict.APPEND:
            index = len(self.log)
            self.log += [(s.producer, q) for q in range(first, first + s.count)]
            self.stamps.append((ProducerStamp(s.producer, first, s.count), index, index))
            self.table.appended(s.producer, AppendedBatch(first, s.count, index, index))
            self.sent[s.producer] = max(believed, first + s.count)
        elif decision.verdict is Verdict.DUPLICATE:
            assert decision.first_index is not None
            records = self.log[decision.first_index : decision.first_index + s.count]
            assert records == [(s.producer, q) for q in range(first, first + s.count)]
        return decision.verdict


@given(sends)
def test_no_sequence_is_appended_twice_and_none_is_skipped(program: list[Send]) -> None:
    part = Partition(ProducerTable())
    for s in program:
        believed = part.sent.get(s.producer)
        first = max(0, (believed or 0) + s.shift)
        verdict = part.send(s)
        if believed is None:
            assert verdict is (Verdict.APPEND if first == 0 else Verdict.OUT_OF_ORDER)  # rule 6
        elif first > believed or first < believed < first + s.count:
            assert verdict is Verdict.OUT_OF_ORDER
        elif first + s.count <= believed:
            assert verdict in (Verdict.DUPLICATE, Verdict.DUPLICATE_INDEX_UNKNOWN)
    for producer, written in part.sent.items():
        mine = [q for p, q in part.log if p == producer]
        assert mine == list(range(written)), "each sequence exactly once, in order, from 0"


@given(sends, st.lists(st.builds(Send, st.integers(0, 4), st.integers(-12, 4), st.integers(1, 4))))
def test_a_restored_table_decides_as_the_live_one(program: list[Send], after: list[Send]) -> None:
    part = Partition(ProducerTable())
    for s in program:
        part.send(s)
    restored = ProducerTable.restored(reversed(part.stamps))
    for producer in range(5):
        assert restored.next_sequence(producer) == part.table.next_sequence(producer)
        assert restored.batches(producer) == part.table.batches(producer)
    for s in after:  # the same questions get the same answers
        first = max(0, part.sent.get(s.producer, 0) + s.shift)
        assert restored.decide(s.producer, first, s.count) == part.table.decide(
            s.producer, first, s.count
        )


@given(sends, st.integers(1, 3))
def test_eviction_keeps_the_most_recently_active(program: list[Send], cap: int) -> None:
    part = Partition(ProducerTable(producers_max=cap))
    recent: list[int] = []
    for s in program:
        part.send(s)
        if s.producer in recent:
            recent.remove(s.producer)
        if part.table.next_sequence(s.producer) is not None:
            recent.append(s.producer)
        recent = recent[-cap:]
        assert len(part.table) <= cap
    for producer in recent:
        assert producer in part.table
    restored = ProducerTable.restored(reversed(part.stamps), producers_max=cap)
    assert len(restored) <= cap
