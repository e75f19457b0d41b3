"""Configuration checks, the comparison's medians and ratios, the reports, and
the RESULTS.md splice, on synthetic results (no servers)."""

from __future__ import annotations

import pytest

from laminar.bench.compare import Comparison
from laminar.bench.config import BenchConfigError, RunConfig
from laminar.bench.histogram import LatencyHistogram
from laminar.bench.machine import ProcessTreeCpu
from laminar.bench.records import RecordMaker, intended_ns_of, sequence_of
from laminar.bench.report import markdown, ratio_rows, summary_rows
from laminar.bench.results import RoleFigures, RunResult
from laminar.bench.results_md import BEGIN, END, MarkerError, splice
from laminar.bench.runner import backlog_split, consumer_partitions, server_cpu_over
from laminar.bench.targets import parse_target


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"load": "open"}, "--rate"),
        ({"rate": 10.0}, "only applies"),
        ({"record_bytes": 8}, "at least 16"),
        ({"duration_s": None}, "--duration or --count"),
        ({"workload": "e2e", "consumers": 0}, "--consumers"),
        ({"window": 0}, "--window"),
        ({"workload": "consume", "prefetch": -1}, "--prefetch"),
    ],
)
def test_bad_settings_say_what_is_wrong(settings: dict[str, object], message: str) -> None:
    with pytest.raises(BenchConfigError, match=message):
        RunConfig(**settings)  # type: ignore[arg-type]


def test_prefetch_is_named_in_a_consume_title() -> None:
    assert "prefetch 2" in RunConfig(workload="consume", prefetch=2).describe()
    assert "prefetch" not in RunConfig(workload="consume").describe()


def test_a_backlog_consume_reportsserver_cpu_over_its_own_duration() -> None:
    """The consume is shorter than the sampling window around it: the server's
    CPU seconds count over the consume's duration, not the window."""
    cpu = ProcessTreeCpu({"server": 1})
    cpu.cpu_s = {"server": 0.05}  # used during a window of, say, 0.4 s
    r = RunResult("laminar", 1, "ok", "", (0.0, 0.0, 0.0), {}, {})
    server_cpu_over(r, cpu, 0.1)
    assert r.server_cpu_cores == pytest.approx(0.5)
    assert r.server_cpu_by_process == {"server": pytest.approx(0.5)}


def test_roles_per_workload() -> None:
    backlog = RunConfig(workload="consume", start_from="beginning")
    assert backlog.producer_count == 0 and backlog.consumer_count == 1
    assert backlog.primary_metric == "fetch"
    tail = RunConfig(workload="consume", start_from="tail", producers=2)
    assert tail.producer_count == 2
    assert RunConfig(workload="e2e").primary_metric == "e2e"
    assert RunConfig().consumer_count == 0
    assert RunConfig(load="open", rate=3000.0, producers=3).rate_per_producer == 1000.0


def test_records_carry_their_intended_time_and_sequence() -> None:
    maker = RecordMaker(100)
    batch = maker.batch(123_456_789, 3)
    assert [len(r) for r in batch] == [100, 100, 100]
    assert [intended_ns_of(r) for r in batch] == [123_456_789] * 3
    assert [sequence_of(r) for r in batch] == [0, 1, 2]
    assert sequence_of(maker.batch(1, 1)[0]) == 3


def test_partition_assignment() -> None:
    assert backlog_split(10, 3) == [4, 3, 3]
    assert sum(backlog_split(1001, 7)) == 1001
    assert consumer_partitions(1, 2, 5) == (1, 3)
    assert parse_target("redis-streams:everysec") == ("redis-streams", "everysec", None)
    with pytest.raises(ValueError, match="unknown target"):
        parse_target("kafka")


def _result(target: str, round_no: int, rate: float, p99_us: int, *, fsync: bool) -> RunResult:
    h = LatencyHistogram()
    h.record_us(p99_us // 4, 99)
    h.record_us(p99_us, 1)
    r = RunResult(
        target=target,
        round=round_no,
        status="ok",
        started_at="",
        loadavg_at_start=(0.0, 0.0, 0.0),
        durability={"fsync_before_ack": fsync, "summary": "x", "detail": "d"},
        versions={},
    )
    r.produce = RoleFigures(records=int(rate), bytes=int(rate) * 1024, ops=1, elapsed_s=1.0)
    r.histograms["produce"] = h
    return r


def test_medians_ratios_and_goal() -> None:
    c = Comparison(RunConfig(), ["laminar", "nats-jetstream", "redis-streams"], 3)
    rates = {
        "laminar": [900, 1000, 5000],
        "nats-jetstream": [3000, 2000, 100],
        "redis-streams": [400, 500, 600],
    }
    for round_no in range(3):
        for target, values in rates.items():
            c.runs.append(
                _result(
                    target, round_no + 1, values[round_no], 4000, fsync=target != "nats-jetstream"
                )
            )
    failed = _result("redis-streams", 4, 10**9, 1, fsync=True)
    failed.status = "failed"
    failed.error = "boom"
    c.runs.append(failed)
    s = {x.target: x for x in c.summaries()}
    assert s["laminar"].records_per_s == 1000  # the median, not the mean (2300)
    assert s["nats-jetstream"].records_per_s == 2000
    assert s["redis-streams"].records_per_s == 500  # the failed run is not counted ...
    assert s["redis-streams"].failed == 1  # ... but it is reported
    assert s["redis-streams"].failures == ["round 4: boom"]
    ratios = c.ratios()
    assert ratios["nats-jetstream"]["records_per_s"] == pytest.approx(0.5)
    assert ratios["redis-streams"]["records_per_s"] == pytest.approx(2.0)
    goal = c.goal()
    assert goal is not None
    # nats does not fsync before acknowledging: the goal compares with redis only.
    assert goal["best_throughput_peer"] == "redis-streams"
    assert goal["throughput_ratio"] == pytest.approx(2.0)
    headers, rows = summary_rows(c)
    assert headers[0] == "target" and [r[0] for r in rows] == c.targets
    assert rows[2][2] == "3/4"
    assert ratio_rows(c)[1][0][0] == "nats-jetstream"
    text = markdown(c, "laminar-bench --compare laminar,nats-jetstream,redis-streams", ["a.png"])
    assert "`laminar-bench --compare" in text
    assert "boom" in text
    assert "![a.png](a.png)" in text


@pytest.mark.parametrize(("laminar_rate", "judged"), [(1960, True), (1500, False)])
def test_a_fixed_rate_p99_goal_is_judged_only_when_the_rate_was_held(
    laminar_rate: int, judged: bool
) -> None:
    """A run that fell behind its schedule reports the backlog's age as latency:
    comparing those p99s says nothing about service times."""
    c = Comparison(RunConfig(load="open", rate=2000.0), ["laminar", "redis-streams"], 1)
    c.runs.append(_result("laminar", 1, laminar_rate, 3000, fsync=True))
    c.runs.append(_result("redis-streams", 1, 2000, 4000, fsync=True))
    goal = c.goal()
    assert goal is not None
    assert goal["p99_ratio"] == pytest.approx(0.75)
    assert goal["p99_met"] is (True if judged else None)
    assert goal["rate_not_held"] == ([] if judged else ["laminar"])
    line = markdown(c, "laminar-bench").split("Goal check: ")[1].split("\n")[0]
    assert ("met" in line) is judged and ("not judged" in line) is not judged


def test_splice_keeps_everything_outside_the_markers() -> None:
    document = "# Results\n\nsomeone else's table\n"
    once = splice(document, "first")
    assert once.startswith(document)
    assert f"{BEGIN}\nfirst\n{END}" in once
    twice = splice(once + "\ntrailing text by others\n", "second")
    assert "first" not in twice
    assert twice.startswith(document)
    assert twice.endswith("\ntrailing text by others\n")
    with pytest.raises(MarkerError):
        splice(f"{END}\n{BEGIN}\n", "x")


def test_saved_results_render_the_same_comparison() -> None:
    from laminar.bench.output import comparison_from_document, results_document

    c = Comparison(RunConfig(), ["laminar", "redis-streams"], 2)
    for round_no in (1, 2):
        c.runs.append(_result("laminar", round_no, 1000 * round_no, 3000, fsync=True))
        c.runs.append(_result("redis-streams", round_no, 700, 2000, fsync=True))
    c.runs[-1].errors = {"TimeoutError": 2}
    c.runs[-1].status = "errors"
    document = results_document(c, ["laminar-bench"], {"cores": 2}, {})
    again = comparison_from_document(document)
    assert [s.to_dict() for s in again.summaries()] == [s.to_dict() for s in c.summaries()]
    assert again.goal() == c.goal()
    assert results_document(again, ["laminar-bench"], {"cores": 2}, {}) == document
