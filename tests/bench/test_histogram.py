"""HDR histograms: exact merges, across processes too, against known inputs."""

from __future__ import annotations

import multiprocessing
import random

import pytest

from laminar.bench.histogram import HIGHEST_US, LatencyHistogram


def _exact_percentile(sorted_values: list[int], percentile: float) -> int:
    """The value at `percentile` by HDR's rule: the smallest value with at least
    that share of the counts at or below it."""
    n = len(sorted_values)
    rank = max(1, -(-int(percentile * n * 1000) // 100_000))  # ceil(p/100 * n)
    return sorted_values[rank - 1]


def _values(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    # A long-tailed mix: mostly ~200 us, some ms, a few seconds.
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.9:
            out.append(rng.randint(100, 400))
        elif r < 0.999:
            out.append(rng.randint(1_000, 50_000))
        else:
            out.append(rng.randint(1_000_000, 3_000_000))
    return out


def test_percentiles_match_exact_values_within_hdr_precision() -> None:
    values = _values(1, 50_000)
    h = LatencyHistogram()
    for v in values:
        h.record_us(v)
    ordered = sorted(values)
    for p in (50.0, 90.0, 99.0, 99.9, 100.0):
        exact = _exact_percentile(ordered, p)
        assert h.value_at(p) == pytest.approx(exact, rel=1e-3), p
    s = h.summary()
    assert s.count == len(values)
    assert s.mean_us == pytest.approx(sum(values) / len(values))
    assert s.min_us == pytest.approx(ordered[0], rel=1e-3)
    assert s.max_us == pytest.approx(ordered[-1], rel=1e-3)


def test_merge_of_parts_equals_one_histogram_of_everything() -> None:
    parts_values = [_values(seed, 20_000) for seed in (2, 3, 4)]
    everything = LatencyHistogram()
    parts = []
    for values in parts_values:
        part = LatencyHistogram()
        for v in values:
            part.record_us(v)
            everything.record_us(v)
        # Through the wire form, as workers send them.
        parts.append(LatencyHistogram.decode(part.encode()))
    merged = LatencyHistogram.merged(parts)
    assert merged.count == everything.count == 60_000
    for p in (0.0, 25.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0):
        assert merged.value_at(p) == everything.value_at(p)
    assert merged.summary() == everything.summary()


def test_merged_percentile_is_not_an_average_of_percentiles() -> None:
    fast = LatencyHistogram()
    slow = LatencyHistogram()
    for _ in range(990):
        fast.record_us(100)
    for _ in range(10):
        slow.record_us(10_000)
    merged = LatencyHistogram.merged([fast, slow])
    # 1% of all values are slow: the merged p99 is still fast, p99.9 is slow.
    assert merged.value_at(99.0) == pytest.approx(100, rel=1e-3)
    assert merged.value_at(99.9) == pytest.approx(10_000, rel=1e-3)
    assert (fast.value_at(99.0) + slow.value_at(99.0)) / 2 > 5_000


def test_counts_nanoseconds_and_clamping() -> None:
    h = LatencyHistogram()
    h.record_ns(1_499, count=3)  # rounds to 1 us
    h.record_ns(200, count=2)  # below 1 us: counted as 1 us, not as clamped
    h.record_us(HIGHEST_US * 2)
    assert h.count == 6
    assert h.clamped == 1
    assert h.summary().min_us == 1
    again = LatencyHistogram.decode(h.encode())
    assert again.clamped == 1
    assert again.count == 6


def test_empty_histogram_round_trips() -> None:
    h = LatencyHistogram.decode(LatencyHistogram().encode())
    assert h.count == 0
    assert h.summary().p99_us == 0
    assert h.spectrum() == []


def _record_in_child(seed: int) -> str:
    h = LatencyHistogram()
    for v in _values(seed, 10_000):
        h.record_us(v)
    return h.encode()


def test_merge_across_processes_is_exact() -> None:
    seeds = [11, 12]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        encoded = pool.map(_record_in_child, seeds)
    merged = LatencyHistogram.merged([LatencyHistogram.decode(e) for e in encoded])
    local = LatencyHistogram()
    for seed in seeds:
        for v in _values(seed, 10_000):
            local.record_us(v)
    assert merged.summary() == local.summary()
