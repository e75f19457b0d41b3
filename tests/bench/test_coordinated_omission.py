"""Open-loop latency is measured from intended send times (coordinated omission
corrected), checked on virtual time against a reference computed by hand."""

from __future__ import annotations

import asyncio

import pytest

from laminar.bench.histogram import LatencyHistogram
from laminar.bench.loadmodels import Outcome, closed_loop, open_loop
from laminar.bench.pacing import LoopClock, LoopPacer, Schedule
from tests.bench.virtual_time import run_virtual

INTERVAL_NS = 1_000_000  # 1,000 operations per second
SERVICE_NS = 100_000  # each answer takes 100 us ...
STALL_AT = 500
STALL_NS = 500_000_000  # ... except operation 500, which takes 500 ms
OPS = 2_000


def service_ns(k: int) -> int:
    return STALL_NS if k == STALL_AT else SERVICE_NS


async def fake_send(k: int) -> None:
    await asyncio.sleep(service_ns(k) / 1e9)


def reference_latencies() -> tuple[list[int], list[int]]:
    """One operation in flight: operation k leaves at max(intended_k, done_{k-1})
    and is done `service_ns(k)` later. Corrected latency counts from intended_k;
    the uncorrected one from when it left."""
    corrected, uncorrected = [], []
    done = 0
    for k in range(OPS):
        intended = k * INTERVAL_NS
        sent = max(intended, done)
        done = sent + service_ns(k)
        corrected.append(done - intended)
        uncorrected.append(done - sent)
    return corrected, uncorrected


def _hist(values_ns: list[int]) -> LatencyHistogram:
    h = LatencyHistogram()
    for v in values_ns:
        h.record_ns(v)
    return h


def run_open(window: int) -> list[Outcome]:
    outcomes: list[Outcome] = []

    async def main() -> int:
        return await open_loop(
            fake_send,
            Schedule(0, INTERVAL_NS),
            window,
            lambda k, _at: k < OPS,
            LoopClock(),
            LoopPacer(),
            outcomes.append,
        )

    assert run_virtual(main()) == OPS
    return outcomes


def test_open_loop_charges_a_stall_to_every_operation_it_delayed() -> None:
    outcomes = run_open(window=1)
    assert len(outcomes) == OPS
    assert all(o.error is None for o in outcomes)
    corrected = _hist([o.done_ns - o.intended_ns for o in outcomes])
    uncorrected = _hist([o.done_ns - o.sent_ns for o in outcomes])
    want_corrected, want_uncorrected = reference_latencies()
    reference_c, reference_u = _hist(want_corrected), _hist(want_uncorrected)
    for p in (50.0, 75.0, 90.0, 99.0, 99.9, 100.0):
        assert corrected.value_at(p) == pytest.approx(reference_c.value_at(p), rel=2e-3), p
        assert uncorrected.value_at(p) == pytest.approx(reference_u.value_at(p), rel=2e-3), p
    # By hand: after the stall the backlog shrinks by 0.9 ms per operation (1 ms
    # interval less 0.1 ms service), so the i-th operation behind the stall
    # waits about 500 - 0.9 i ms. p90 is the 200th slowest of 2,000 (~320 ms),
    # p99 the 20th (~482 ms): far from any service time.
    assert corrected.value_at(90.0) == pytest.approx(320_000, rel=0.01)
    assert corrected.value_at(99.0) == pytest.approx(482_000, rel=0.01)
    # Measured from the actual send, the same run looks fine up to its max.
    assert uncorrected.value_at(99.9) == pytest.approx(SERVICE_NS / 1000, rel=2e-3)
    assert uncorrected.summary().max_us == pytest.approx(STALL_NS / 1000, rel=2e-3)


def test_open_loop_sends_on_schedule_when_the_window_allows() -> None:
    outcomes = run_open(window=4)
    for o in outcomes:
        if o.k == STALL_AT:
            continue
        # Sent on time; only the stalled operation itself is slow, and the ones
        # after it go out on schedule in the other slots of the window.
        assert o.sent_ns - o.intended_ns < 1_000
        assert o.done_ns - o.intended_ns == pytest.approx(SERVICE_NS, abs=1_000)


def test_closed_loop_hides_the_stall_that_the_open_loop_reports() -> None:
    outcomes: list[Outcome] = []
    end_ns = OPS * INTERVAL_NS

    async def main() -> int:
        return await closed_loop(
            fake_send, 1, lambda k, at: at < end_ns, LoopClock(), outcomes.append
        )

    issued = run_virtual(main())
    assert issued == len(outcomes)
    slow = [o for o in outcomes if o.done_ns - o.sent_ns > 1_000_000]
    assert len(slow) == 1  # one sample of 500 ms, whatever else waited behind it


def test_errors_are_outcomes_and_the_window_is_released() -> None:
    outcomes: list[Outcome] = []

    async def flaky(k: int) -> None:
        await asyncio.sleep(1e-4)
        if k % 3 == 0:
            raise ConnectionError(f"no {k}")

    async def main() -> int:
        return await open_loop(
            flaky,
            Schedule(0, INTERVAL_NS),
            1,
            lambda k, _at: k < 30,
            LoopClock(),
            LoopPacer(),
            outcomes.append,
        )

    assert run_virtual(main()) == 30
    assert sum(1 for o in outcomes if o.error is not None) == 10
    assert all(isinstance(o.error, ConnectionError) for o in outcomes if o.error)


def test_schedule_for_rate() -> None:
    s = Schedule.for_rate(1_000, 2_000.0)
    assert s.interval_ns == 500_000
    assert s.intended_ns(4) == 1_000 + 2_000_000
    with pytest.raises(ValueError):
        Schedule.for_rate(0, 0.0)
