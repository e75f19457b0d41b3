"""The participant's rules (`laminar.writes.area`), driven directly."""

from __future__ import annotations

import pytest

from laminar.wire.writes import StagedPart, WriteState
from laminar.writes.area import (
    Ask,
    Drop,
    MissingStagedData,
    StagedBatch,
    StagingArea,
    Verdict,
)
from laminar.writes.frames import AttemptKey

PID = 77
A = AttemptKey(1, 0, 0xA)
B = AttemptKey(1, 1, 0xB)


def _stage(
    area: StagingArea, key: AttemptKey, seq: int, records: int, size: int, now: float = 0
) -> None:
    decision = area.decide_stage(PID, key, seq, records, size)
    assert decision.verdict is Verdict.STAGE
    area.staged(PID, key, StagedBatch(seq, records, seq * size, size), size, 0, now)


def _part(key: AttemptKey, batches: int, records: int) -> StagedPart:
    return StagedPart(PID, key.write_id, key.task, key.attempt, batches, records)


def test_a_batch_must_continue_its_attempts_sequence() -> None:
    area = StagingArea(bytes_max=10_000, default_timeout_s=60)
    assert area.decide_stage(PID, A, 1, 5, 100).verdict is Verdict.OUT_OF_ORDER
    _stage(area, A, 0, 5, 100)
    dup = area.decide_stage(PID, A, 0, 5, 100)
    assert dup.verdict is Verdict.DUPLICATE
    changed = area.decide_stage(PID, A, 0, 6, 100)
    assert changed.verdict is Verdict.OUT_OF_ORDER and "staged with 5 records" in changed.reason
    assert area.decide_stage(PID, A, 2, 5, 100).verdict is Verdict.OUT_OF_ORDER
    assert area.bytes == 100  # refusals reserve nothing


def test_staged_bytes_are_bounded_and_reserved_before_the_write() -> None:
    area = StagingArea(bytes_max=1000, default_timeout_s=60)
    first = area.decide_stage(PID, A, 0, 1, 600)
    assert first.verdict is Verdict.STAGE and first.new_file
    # A second batch asked while the first is still being written does not fit.
    full = area.decide_stage(PID, B, 0, 1, 600)
    assert full.verdict is Verdict.FULL and "--staging-bytes-max" in full.reason
    area.stage_failed(600)
    assert area.bytes == 0
    assert area.decide_stage(PID, B, 0, 1, 600).verdict is Verdict.STAGE


def test_a_claim_needs_every_part_staged_in_full() -> None:
    area = StagingArea(bytes_max=10_000, default_timeout_s=60)
    _stage(area, A, 0, 5, 100)
    _stage(area, A, 1, 3, 100)
    assert area.check(PID, [_part(A, 2, 8)]) == 8
    with pytest.raises(MissingStagedData, match="2 batches of 8 records staged"):
        area.check(PID, [_part(A, 1, 5)])
    with pytest.raises(MissingStagedData, match="nothing staged"):
        area.check(PID, [_part(B, 1, 1)])


def test_expiry_drops_unclaimed_attempts_and_asks_about_claimed_ones() -> None:
    area = StagingArea(bytes_max=10_000, default_timeout_s=10)
    _stage(area, A, 0, 5, 100, now=0)
    _stage(area, B, 0, 5, 100, now=0)
    area.claimed(PID, 99, [_part(B, 1, 5)], now=0)
    assert area.due(now=5) == ([], [])
    drops, asks = area.due(now=10)
    assert drops == [Drop(PID, A)]
    assert asks == [Ask(PID, 99, 1)]
    assert area.due(now=11)[1] == []  # asked once at a time
    # The coordinator says the commit is pending: keep, ask again a timeout later.
    assert area.answered(asks[0], WriteState.COMMITTED, now=11) is None
    assert area.due(now=20)[1] == []
    (ask,) = area.due(now=21)[1]
    # Not pending any more, but a new claim came while asking: keep.
    area.claimed(PID, 99, [_part(B, 1, 5)], now=21)
    assert area.answered(ask, WriteState.UNKNOWN, now=22) is None
    (ask,) = area.due(now=40)[1]
    assert area.answered(ask, WriteState.DONE, now=40) == [B]


def test_a_new_claim_frees_the_attempts_the_old_one_named() -> None:
    area = StagingArea(bytes_max=10_000, default_timeout_s=10)
    _stage(area, A, 0, 1, 10)
    _stage(area, B, 0, 1, 10)
    area.claimed(PID, 5, [_part(A, 1, 1)], now=0)
    area.claimed(PID, 5, [_part(B, 1, 1)], now=3)
    assert area.attempt(PID, A).claimed_by is None  # type: ignore[union-attr]
    assert area.attempt(PID, B).claimed_by == 5  # type: ignore[union-attr]
    drops, _ = area.due(now=13)
    assert drops == [Drop(PID, A)]


def test_a_publish_plan_is_cut_by_bytes_and_kept_once_recorded() -> None:
    area = StagingArea(bytes_max=10_000, default_timeout_s=10)
    for seq in range(3):
        _stage(area, A, seq, 2, 100)
    _stage(area, B, 0, 4, 250)
    parts = [_part(B, 1, 4), _part(A, 3, 6)]  # the order named is the order published
    plan = area.plan_publish(PID, 9, parts, chunk_bytes=300)
    assert plan.fresh
    assert [[(k, b.sequence) for k, b in c.batches] for c in plan.chunks] == [
        [(B, 0)],
        [(A, 0), (A, 1), (A, 2)],
    ]
    assert [c.records for c in plan.chunks] == [4, 6]
    area.intent_recorded(PID, 9, plan.intent._replace(start_index=50), now=0)
    again = area.plan_publish(PID, 9, parts, chunk_bytes=1)  # another chunk size now
    assert not again.fresh and again.intent.start_index == 50
    assert again.chunks == plan.chunks
    with pytest.raises(MissingStagedData):
        area.plan_publish(PID, 10, [_part(A, 4, 8)], chunk_bytes=300)


def test_an_attempt_being_published_takes_no_more_batches_and_does_not_expire() -> None:
    area = StagingArea(bytes_max=10_000, default_timeout_s=10)
    _stage(area, A, 0, 1, 10)
    area.publishing(PID, [_part(A, 1, 1)], True)
    assert area.decide_stage(PID, A, 1, 1, 10).verdict is Verdict.OUT_OF_ORDER
    assert area.due(now=100) == ([], [])


def test_a_part_that_is_gone_is_refused_with_why_it_went() -> None:
    """STAGED_DATA_MISSING names the real cause: an expiry (then, and only then,
    the staging timeout is the advice), a drop, or nothing ever staged here."""
    area = StagingArea(bytes_max=10_000, default_timeout_s=5)
    _stage(area, A, 0, 5, 100, now=0)
    _stage(area, B, 0, 5, 100, now=0)
    drops, _ = area.due(now=7)
    assert {d.key for d in drops} == {A, B}
    expired = area.attempt(PID, A)
    assert expired is not None
    area.drop_attempt(PID, A, area.expired_because(expired, now=7))
    area.drop_attempt(PID, B, "dropped by an abort")
    never = AttemptKey(1, 2, 0xC)
    with pytest.raises(MissingStagedData) as refused:
        area.check(PID, [_part(A, 1, 5), _part(B, 1, 5), _part(never, 1, 1)])
    message = str(refused.value)
    assert "expired: no batch of its write reached this node for 7.0 s" in message
    assert "its staging timeout of 5.0 s (raise the node's --staging-timeout" in message
    assert "dropped by an abort" in message
    assert "task 2 attempt 0xc of write 0x1: nothing staged here: never staged" in message
    assert message.count("--staging-timeout") == 1
