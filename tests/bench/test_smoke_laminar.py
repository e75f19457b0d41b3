"""Short runs of every workload and load model against a real laminar node.

Nothing here asserts a timing (the machines are shared): the runs must finish,
count what they sent, see every record they should, and report no errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from laminar.bench.cli import main
from laminar.bench.config import RunConfig
from laminar.bench.progress import SilentProgress
from laminar.bench.results import RunResult
from laminar.bench.runner import RunPlan, run_once
from laminar.bench.targets import SystemOptions, make_system

nodes = pytest.importorskip(
    "tests.system.nodes", reason="tests/system/nodes.py (the node fixture) is not there yet"
)


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with nodes.start_node(tmp_path_factory.mktemp("node"), cores=2) as node:
        yield node.bootstrap


SHORT = {"duration_s": 1.0, "warmup_s": 0.2, "drain_s": 5.0}


def _run(bootstrap: str, tmp_path: Path, **settings: object) -> RunResult:
    config = RunConfig(**{**SHORT, **settings})  # type: ignore[arg-type]
    system = make_system("laminar", SystemOptions(laminar_bootstrap=bootstrap))
    result = run_once(system, RunPlan(config, tmp_path), 1, 1, SilentProgress())
    assert result.status == "ok", (result.error, result.errors, result.error_samples)
    # Delivery by identity: every acknowledged record was read back exactly once.
    d = result.delivery
    assert d is not None and d["ok"] and d["acknowledged"] > 0, d
    assert d["read"] >= d["acknowledged"] and not (d["lost"] or d["duplicated"] or d["phantom"])
    shares = result.generator_core_shares
    assert shares and all(0.0 < s < 2.0 for s in shares), shares
    return result


def test_produce_closed_loop(bootstrap: str, tmp_path: Path) -> None:
    r = _run(bootstrap, tmp_path, window=4, batch=5, partitions=2, producers=2)
    assert r.produce is not None and r.produce.records > 0
    assert r.produce.records % 5 == 0
    assert r.latency("produce").count == r.produce.records
    assert r.latency("produce_service").count == r.produce.records
    assert r.consume is None


def test_produce_open_loop(bootstrap: str, tmp_path: Path) -> None:
    r = _run(bootstrap, tmp_path, load="open", rate=400.0, batch=2, window=16)
    assert r.produce is not None
    # 400 rec/s in batches of 2 for 1 s: the schedule called for 200 requests.
    assert r.due_ops == 200
    assert r.issued_ops == r.due_ops
    assert r.unfinished_ops == 0
    assert r.latency("produce").count == 400


def test_produce_count_mode(bootstrap: str, tmp_path: Path) -> None:
    r = _run(bootstrap, tmp_path, duration_s=None, count=300, batch=3, warmup_s=0.0)
    assert r.produce is not None and r.produce.records == 300


@pytest.mark.parametrize("prefetch", [0, 3])
def test_consume_from_beginning(bootstrap: str, tmp_path: Path, prefetch: int) -> None:
    r = _run(
        bootstrap,
        tmp_path,
        workload="consume",
        start_from="beginning",
        prefill=3_001,
        partitions=3,
        consumers=2,
        duration_s=30.0,
        fetch_max_records=200,
        prefetch=prefetch,
    )
    assert r.consume is not None and r.consume.records == 3_001
    assert r.latency("fetch").count == r.consume.ops > 0
    assert r.produce is None


def test_consume_from_tail_while_producing(bootstrap: str, tmp_path: Path) -> None:
    r = _run(
        bootstrap,
        tmp_path,
        workload="consume",
        start_from="tail",
        load="open",
        rate=300.0,
        partitions=2,
        consumers=2,
    )
    assert r.produced_total > 0
    assert r.consumed_total == r.produced_total
    assert r.latency("fetch").count > 0


@pytest.mark.parametrize("load", ["closed", "open"])
def test_end_to_end(bootstrap: str, tmp_path: Path, load: str) -> None:
    settings: dict[str, object] = {"workload": "e2e", "load": load, "partitions": 2}
    if load == "open":
        settings["rate"] = 500.0
    else:
        settings["window"] = 2
    r = _run(bootstrap, tmp_path, **settings)
    assert r.consumed_total == r.produced_total > 0
    assert r.consume is not None and r.consume.records > 0
    assert r.latency("e2e").count == r.consume.records


def test_cli_starts_its_own_node_and_writes_every_output(tmp_path: Path) -> None:
    out = tmp_path / "out"
    md = tmp_path / "part.md"
    code = main(
        [
            "--target",
            "laminar",
            "--duration",
            "1",
            "--warmup",
            "0.2",
            "--laminar-cores",
            "1",
            "--progress",
            "none",
            "--workdir",
            str(tmp_path / "work"),
            "--out",
            str(out),
            "--markdown",
            str(md),
        ]
    )
    assert code == 0
    doc = json.loads((out / "results.json").read_text())
    assert doc["runs"][0]["status"] == "ok", doc["runs"][0]
    assert doc["runs"][0]["durability"]["fsync_before_ack"] is True
    assert doc["config"]["record_bytes"] == 1024
    assert doc["machine"]["cores"] >= 1
    assert "loadavg_at_start" in doc["machine"]
    assert doc["summary"][0]["records_per_s_median"] > 0
    assert (out / "latency.png").stat().st_size > 0
    assert (out / "throughput.png").stat().st_size > 0
    assert "| laminar |" in md.read_text()
    # The harness's node and its data are gone.
    assert not any((tmp_path / "work").glob("*/*"))
