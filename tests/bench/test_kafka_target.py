"""The Kafka door as a benchmark target (issue 27): its names and its goals,
on synthetic results (its real run is in `test_smoke_peers.py`)."""

from __future__ import annotations

import asyncio

import pytest

from laminar.bench.compare import Comparison
from laminar.bench.config import RunConfig
from laminar.bench.kafka_goal import kafka_checks
from laminar.bench.report import markdown
from laminar.bench.targets import make_system, parse_target, server_of
from laminar.bench.targets.base import SystemUnavailable
from tests.bench.test_config_and_report import _result


def test_kafka_door_names_and_variants() -> None:
    assert parse_target("laminar-kafka") == ("laminar-kafka", None, None)
    assert parse_target("laminar-kafka:linger5") == ("laminar-kafka", "linger5", None)
    assert server_of("laminar-kafka:linger5") == server_of("laminar") == "laminar"
    system = make_system("laminar-kafka:linger5")
    assert system.name == "laminar-kafka:linger5"
    durability = system.durability()
    assert durability.fsync_before_ack
    assert durability.settings["linger.ms"] == "5" and durability.settings["flush"] == "always"
    assert "linger.ms" not in make_system("laminar-kafka").durability().settings
    with pytest.raises(SystemUnavailable, match="variants"):
        make_system("laminar-kafka:linger0")
    with pytest.raises(ValueError, match="no replicated variant"):
        parse_target("laminar-kafka-r3")


def _comparison(config: RunConfig, rates: dict[str, float], cpu: dict[str, float]) -> Comparison:
    c = Comparison(config, list(rates), 1)
    for target, rate in rates.items():
        r = _result(target, 1, rate, 1000, fsync=target != "nats-jetstream")
        if config.consumes_backlog:
            r.consume, r.produce = r.produce, None
            r.histograms["fetch"] = r.histograms.pop("produce")
        r.server_cpu_cores = cpu[target]
        c.runs.append(r)
    return c


def test_kafka_goals_of_a_closed_loop_produce() -> None:
    c = _comparison(
        RunConfig(),
        {"laminar-kafka": 100_000, "laminar": 80_000, "redis-streams": 40_000},
        {"laminar-kafka": 0.5, "laminar": 0.5, "redis-streams": 0.2},
    )
    redis, cpu = kafka_checks(c.config, c.summaries())
    assert (redis.other, redis.ratio, redis.met) == ("redis-streams", pytest.approx(2.5), True)
    assert (cpu.other, cpu.metric) == ("laminar", "server CPU per record")
    assert cpu.ratio == pytest.approx(5.0 / 6.25) and cpu.met
    text = markdown(c, "laminar-bench --compare laminar-kafka,laminar,redis-streams", [])
    assert "laminar-kafka throughput 2.50x of redis-streams (goal >= 2x: met)" in text
    assert "laminar-kafka server CPU per record 0.80x of laminar (goal <= 1x: met)" in text
    # laminar's own peer goal never takes its Kafka door for another server.
    c.targets = ["laminar", "laminar-kafka", "redis-streams"]
    assert c.goal() == {
        "baseline": "laminar",
        "best_throughput_peer": "redis-streams",
        "throughput_ratio": pytest.approx(2.0),
        "throughput_met": True,
        "generator_bound": [],
    }
    assert kafka_checks(c.config, c.summaries()) == []


def test_kafka_goals_of_a_backlog_consume_include_the_absolute_rate() -> None:
    c = _comparison(
        RunConfig(workload="consume"),
        {"laminar-kafka": 450_000, "laminar": 400_000, "redis-streams": 200_000},
        {"laminar-kafka": 1.0, "laminar": 0.8, "redis-streams": 0.5},
    )
    redis, rate, cpu = kafka_checks(c.config, c.summaries())
    assert redis.met and redis.ratio == pytest.approx(2.25)
    assert rate.other == "500,000 records/s" and not rate.met
    assert rate.ratio == pytest.approx(0.9)
    assert not cpu.met and cpu.ratio == pytest.approx((1.0 / 450) / (0.8 / 400))


def test_a_missed_redis_goal_is_missed() -> None:
    c = _comparison(
        RunConfig(),
        {"laminar-kafka": 70_000, "redis-streams": 40_000},
        {"laminar-kafka": 0.5, "redis-streams": 0.2},
    )
    [redis] = kafka_checks(c.config, c.summaries())
    assert not redis.met and "(goal >= 2x: missed)" in redis.line()


def test_a_produce_is_settled_only_by_its_last_delivery_report_and_fails_with_any() -> None:
    """The delivery callbacks of a batch (run in the delivery thread) settle its
    future once every record is reported, with the first error if any."""
    kafka = pytest.importorskip("confluent_kafka")
    from laminar.bench.targets.laminar_kafka import _Batch, _settle

    class Reports:
        done: list[_Batch] = []

    async def produce(errors: list[object]) -> BaseException | None:
        future = asyncio.get_running_loop().create_future()
        batch = _Batch(future, len(errors), Reports)  # type: ignore[arg-type]
        for error in errors[:-1]:
            batch(error, None)
            assert Reports.done == []  # not settled before the last report
        batch(errors[-1], None)
        finished, Reports.done = Reports.done, []
        assert finished == [batch]
        _settle(finished)
        return future.exception()

    assert asyncio.run(produce([None, None, None])) is None
    failure = kafka.KafkaError(kafka.KafkaError.REQUEST_TIMED_OUT)
    error = asyncio.run(produce([None, failure, None]))
    assert isinstance(error, kafka.KafkaException) and error.args[0] == failure
