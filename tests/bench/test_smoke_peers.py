"""Short runs against the peers when their servers are installed (`make bench`
installs them; `make test` may not have them), and against laminar's Kafka
door through confluent-kafka (a node the harness starts)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from laminar.bench.config import RunConfig
from laminar.bench.progress import SilentProgress
from laminar.bench.runner import RunPlan, run_once
from laminar.bench.servers.process import live_pids
from laminar.bench.targets import make_system

SERVERS = {"nats-jetstream": "nats-server", "redis-streams": "redis-server"}


def _need(target: str) -> None:
    if target.startswith("laminar-kafka"):
        pytest.importorskip("confluent_kafka")
        return
    binary = SERVERS[target.split(":")[0]]
    if shutil.which(binary) is None:
        pytest.skip(f"{binary} is not installed (scripts/setup --bench installs it)")


@pytest.mark.parametrize("target", ["nats-jetstream", "redis-streams", "laminar-kafka"])
def test_end_to_end_open_loop(target: str, tmp_path: Path) -> None:
    _need(target)
    config = RunConfig(
        workload="e2e",
        load="open",
        rate=400.0,
        batch=2,
        partitions=2,
        consumers=2,
        duration_s=1.0,
        warmup_s=0.2,
        drain_s=5.0,
    )
    result = run_once(make_system(target), RunPlan(config, tmp_path), 1, 1, SilentProgress())
    assert result.status == "ok", (result.error, result.errors, result.error_samples)
    assert result.consumed_total == result.produced_total > 0
    assert result.latency("e2e").count > 0
    assert result.latency("produce").count > 0
    assert live_pids() == []


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("target", ["nats-jetstream", "redis-streams:everysec"])
def test_consume_backlog(target: str, prefetch: int, tmp_path: Path) -> None:
    _need(target)
    config = RunConfig(
        workload="consume",
        prefill=2_000,
        partitions=2,
        consumers=2,
        duration_s=30.0,
        prefetch=prefetch,
    )
    result = run_once(make_system(target), RunPlan(config, tmp_path), 1, 1, SilentProgress())
    assert result.status == "ok", (result.error, result.errors, result.error_samples)
    assert result.consume is not None and result.consume.records == 2_000


def test_nats_sync_always_is_refused_or_runs(tmp_path: Path) -> None:
    """On nats-server < 2.10 the fsync-before-ack variant cannot exist: the run
    must fail with that reason instead of silently running the default."""
    _need("nats-jetstream")
    from laminar.bench.servers.nats_server import nats_version, supports_sync_always

    version = nats_version()
    assert version is not None
    config = RunConfig(duration_s=0.5, warmup_s=0.0)
    system = make_system("nats-jetstream:sync-always")
    result = run_once(system, RunPlan(config, tmp_path), 1, 1, SilentProgress())
    if supports_sync_always(version):
        assert result.status == "ok"
        assert result.durability["fsync_before_ack"] is True
    else:
        assert result.status == "failed"
        assert "sync_interval" in (result.error or "")
