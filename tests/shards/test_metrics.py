"""Latency summaries and the Prometheus text (`metrics`, `prometheus`)."""

from __future__ import annotations

import random

from laminar.cli.status import moving_partitions, parse_prometheus
from laminar.node.prometheus import ShardSample, render
from laminar.shards.metrics import LatencySummary, ShardMetrics


def test_quantiles_are_within_a_bucket_of_the_truth() -> None:
    rng = random.Random(7)
    samples = [rng.lognormvariate(-8, 1.5) for _ in range(20000)]
    summary = LatencySummary()
    for s in samples:
        summary.record(s)
    samples.sort()
    for q in (0.5, 0.9, 0.99):
        true = samples[int(q * len(samples)) - 1]
        assert true <= summary.quantile(q) <= true * 1.2 + 1e-6
    assert summary.count == len(samples)
    assert abs(summary.sum_s - sum(samples)) < 1e-6
    assert summary.quantile(1.0) == max(samples)
    assert LatencySummary().quantile(0.5) == 0.0


def test_tiny_and_huge_durations_land_in_the_end_buckets() -> None:
    summary = LatencySummary()
    summary.record(0.0)
    summary.record(1e9)
    assert summary.quantile(0.1) <= 1e-6
    assert summary.quantile(0.99) == 1e9


def test_render_is_valid_exposition_text() -> None:
    metrics = ShardMetrics()
    metrics.request_done("produce", 0.001)
    metrics.request_done("produce", 0.002)
    metrics.error("unknown_topic")
    metrics.fsync.record(0.0002)
    stats = {**metrics.snapshot(), "partitions_owned": 3, "core": 1, "task_queues": {
        "requests": {"runtime_s": 1.5}}}  # fmt: skip
    text = render(
        {"node_id": 'n"1', "runtime": "uring", "routing_mode": "userspace"},
        [ShardSample(0, True, 0, stats), ShardSample(1, False, 2, None)],
        extra=["# TYPE laminar_xdp_packets_total counter\nlaminar_xdp_packets_total 5"],
    )
    families: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name = line.split()[2]
            assert name not in families, f"family {name} declared twice"
            families.add(name)
            continue
        if line.startswith("#"):
            continue
        name_labels, value = line.rsplit(" ", 1)
        float(value)
        assert name_labels.split("{")[0].startswith("laminar_")
    assert 'laminar_node_info{node_id="n\\"1"' in text
    assert 'laminar_requests_total{shard="0",op="produce"} 2' in text
    assert 'laminar_request_errors_total{shard="0",code="unknown_topic"} 1' in text
    assert 'laminar_request_latency_seconds_count{shard="0",op="produce"} 2' in text
    assert 'laminar_fsync_latency_seconds_count{shard="0"} 1' in text
    assert 'laminar_shard_up{shard="1"} 0' in text
    assert 'laminar_shard_restarts_total{shard="1"} 2' in text
    assert 'laminar_partitions_owned{shard="0"} 3' in text
    assert 'laminar_task_queue_runtime_seconds_total{shard="0",queue="requests"} 1.5' in text
    assert text.endswith("laminar_xdp_packets_total 5\n")


def test_moves_are_in_the_metrics_and_in_laminar_status() -> None:
    moves = {
        "moving": [{"pid": (5 << 32) | 2, "learner": "n4", "records_to_go": 120}],
        "bytes_sent": 4096,
        "sends_deferred": 3,
        "steps_started": 7,
        "steps_refused": 1,
        "retired": 0,
    }
    stats = {**ShardMetrics().snapshot(), "moves": moves}
    text = render({"node_id": "n1"}, [ShardSample(0, True, 0, stats)])
    assert 'laminar_move_bytes_total{shard="0"} 4096' in text
    assert 'laminar_move_steps_total{shard="0",outcome="started"} 7' in text
    assert moving_partitions(parse_prometheus(text)) == [
        {"shard": 0, "topic_id": 5, "partition": 2, "to": "n4", "records_to_go": 120}
    ]
