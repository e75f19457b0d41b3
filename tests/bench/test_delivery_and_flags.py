"""The harness's own checks fire when they should: the identity check of
delivery, and the generator-bound flag."""

from __future__ import annotations

from laminar.bench.compare import Comparison
from laminar.bench.config import RunConfig
from laminar.bench.delivery import (
    Ledger,
    check_delivery,
    check_identities,
    identities_of,
    identity_value,
)
from laminar.bench.records import RecordMaker
from laminar.bench.report import GENERATOR_BOUND_FLAG, goal_lines, run_rows, summary_rows
from laminar.bench.results import RunResult, fill_from_reports
from laminar.bench.tally import Tally


def _produced(producers: int = 2, batches: int = 5) -> tuple[dict[int, Ledger], list[bytes]]:
    """Records of `producers` producers, all acknowledged, as a read-back returns them."""
    ledgers: dict[int, Ledger] = {}
    records: list[bytes] = []
    for p in range(producers):
        maker = RecordMaker(32, producer=p)
        for _ in range(batches):
            first = maker.ledger.sent
            batch = maker.batch(0, 3)
            maker.ledger.ack(first, len(batch))
            records += batch
        ledgers[p] = maker.ledger
    return ledgers, records


def test_identities_of_an_answer_are_its_records_identities() -> None:
    """A consumer keeps only the identities of what it read (`identities_of`):
    the same values, in the same order, whether the answer holds bytes or views
    into one buffer, records of the run's size or of other sizes."""
    ledgers, records = _produced()
    expected = [identity_value(r) for r in records]
    joined = memoryview(b"".join(records))
    views = [joined[i * 32 : (i + 1) * 32] for i in range(len(records))]
    assert list(identities_of(records, 32)) == expected
    assert list(identities_of(views, 32)) == expected
    odd = [*records[:3], records[3] + b"longer", *records[4:]]
    assert list(identities_of(odd, 32)) == expected
    assert check_identities(ledgers, identities_of(records, 32)).ok
    lost = check_identities(ledgers, identities_of(records[1:], 32))
    assert (lost.lost, lost.read) == (1, len(records) - 1)


def test_every_acknowledged_record_once_passes() -> None:
    ledgers, records = _produced()
    verdict = check_delivery(ledgers, reversed(records))  # order does not matter
    assert verdict.ok and verdict.read == verdict.acknowledged == 30


def test_a_lost_record_is_named() -> None:
    ledgers, records = _produced()
    gone = records.pop(7)
    verdict = check_delivery(ledgers, records)
    assert not verdict.ok and verdict.lost == 1 and verdict.duplicated == 0
    assert verdict.samples == ["lost: producer 0 sequence 7"]
    assert gone[8:16] == (7).to_bytes(8, "little")


def test_a_loss_hidden_by_a_duplicate_is_still_caught() -> None:
    """Counting would pass this: one record lost, another delivered twice."""
    ledgers, records = _produced()
    records[7] = records[8]
    verdict = check_delivery(ledgers, records)
    assert verdict.read == verdict.acknowledged  # the count is right...
    assert (verdict.lost, verdict.duplicated) == (1, 1)  # ...the identities are not
    assert not verdict.ok


def test_a_record_nobody_sent_is_a_phantom() -> None:
    ledgers, records = _produced()
    stranger = RecordMaker(32, producer=9).batch(0, 1)
    beyond = RecordMaker(32, producer=0)
    beyond.ledger.send(1000)
    verdict = check_delivery(ledgers, [*records, *stranger, *beyond.batch(0, 1)])
    assert verdict.phantom == 2 and not verdict.ok


def test_a_record_sent_but_never_acknowledged_may_be_there_or_not() -> None:
    maker = RecordMaker(32, producer=0)
    acked = maker.batch(0, 2)
    maker.ledger.ack(0, 2)
    unacked = maker.batch(0, 2)  # the answer never came: outcome unknown
    assert check_delivery({0: maker.ledger}, acked).ok
    assert check_delivery({0: maker.ledger}, acked + unacked).ok
    assert not check_delivery({0: maker.ledger}, acked + unacked + unacked[:1]).ok


def test_a_failed_identity_check_makes_the_run_an_error_run() -> None:
    ledgers, records = _produced()
    result = _result()
    result.note_delivery(check_delivery(ledgers, records[1:]))
    assert result.status == "errors"
    assert result.errors == {"lost (acknowledged, not read back)": 1}
    assert "1 lost" in run_rows(_comparison([result]))[1][0][-1]


def _result(target: str = "laminar", round_no: int = 1) -> RunResult:
    return RunResult(target, round_no, "ok", "", (0.0, 0.0, 0.0), {}, {})


def _comparison(runs: list[RunResult], config: RunConfig | None = None) -> Comparison:
    config = config or RunConfig()
    targets = list(dict.fromkeys(r.target for r in runs))
    return Comparison(config, targets, max(r.round for r in runs), runs)


def _report(busy_cpu_s: float, busy_wall_s: float = 10.0, role: str = "producer") -> object:
    return Tally(0, role).report(busy_cpu_s, busy_cpu_s, busy_wall_s)


def test_a_generator_above_85_percent_of_a_core_flags_the_run() -> None:
    busy, calm = _result(), _result()
    fill_from_reports(busy, [_report(9.0), _report(2.0)], 0)  # type: ignore[list-item]
    fill_from_reports(calm, [_report(8.0), _report(2.0)], 0)  # type: ignore[list-item]
    assert busy.generator_core_share == 0.9 and busy.generator_bound
    assert calm.generator_core_share == 0.8 and not calm.generator_bound


def test_the_flag_shows_in_tables_and_goal_checks() -> None:
    base = _result("laminar")
    peer = _result("redis-streams")
    peer.durability = {"fsync_before_ack": True}
    fill_from_reports(base, [_report(5.0)], 0)  # type: ignore[list-item]
    fill_from_reports(peer, [_report(9.5)], 0)  # type: ignore[list-item]
    comparison = _comparison([base, peer])
    headers, rows = summary_rows(comparison)
    flags = {row[0]: row[headers.index("flags")] for row in rows}
    assert GENERATOR_BOUND_FLAG in flags["redis-streams"]
    assert flags["laminar"] == "-"
    cpu = {row[0]: row[headers.index("generator CPU (busiest, of a core)")] for row in rows}
    assert cpu == {"laminar": "50%", "redis-streams": "95%"}
    assert any(GENERATOR_BOUND_FLAG in line for line in goal_lines(comparison))


def test_goal_checks_throughput_in_closed_loops_and_p99_at_fixed_rates_only() -> None:
    runs = [_result("laminar"), _result("redis-streams")]
    runs[1].durability = {"fsync_before_ack": True}
    closed = _comparison(runs).goal()
    assert closed is not None and "throughput_ratio" in closed and "p99_ratio" not in closed
    opened = _comparison(runs, RunConfig(load="open", rate=2000)).goal()
    assert opened is not None and "p99_ratio" in opened and "throughput_ratio" not in opened
