"""Options, ranges, splits, offsets and read limits: pure functions, no Spark."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install 'pyspark[sql]==4.3.0'")

from hypothesis import given
from hypothesis import strategies as st

from laminar.spark.errors import LaminarSparkError
from laminar.spark.options import read_options, write_options
from laminar.spark.plan import (
    LOST_KEY,
    Range,
    from_offset,
    interleave,
    limit_records,
    lost_of,
    resolve_index,
    split,
    to_offset,
    topics_from_offset,
    topics_to_offset,
)
from laminar.spark.security import ClientSecurity


def test_read_options_parse_and_default() -> None:
    opts = read_options(
        {
            "Topic": "t",
            "PARTITIONS": "[2, 0,2]",
            "startingIndex": '{"0": 5, "2": "latest"}',
            "maxRecordsPerSplit": "10",
        }
    )
    assert opts.topic == "t" and opts.bootstrap == "127.0.0.1:7070"
    assert opts.partitions == (0, 2)
    assert opts.starting == {0: 5, 2: "latest"}
    assert opts.ending == "latest" and opts.max_records_per_split == 10
    assert read_options({"topic": "t", "startingIndex": "7"}).starting == 7


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({}, '"topic" option is required'),
        ({"topic": "t", "bootstrap": "host:x"}, "not host:port"),
        ({"topic": "t", "startingIndex": "soon"}, "not an integer"),
        ({"topic": "t", "startingIndex": '{"0": -1}'}, "not an index"),
        ({"topic": "t", "startingIndex": "{"}, "not valid JSON"),
        ({"topic": "t", "startingIndex": "0", "startingTimestamp": "1"}, "not both"),
        ({"topic": "t", "maxRecordsPerSplit": "0"}, "at least 1"),
        ({"topic": "t", "subscribe": "t"}, "one of topic, subscribe and subscribePattern"),
        ({"topic": "t", "assign": '{"t": [0]}'}, "laminar calls it 'topic and partitions'"),
        ({"subscribePattern": "("}, "not a regex"),
        ({"topic": "t", "startingOffsets": '{"t": {"0": -3}}'}, "-2 \\(earliest\\)"),
        ({"topic": "t", "startingIndex": "0", "startingOffsets": "earliest"}, "not both"),
        ({"topic": "t", "endingIndex": "5", "endingTimestamp": "9"}, "one of endingIndex"),
        ({"topic": "t", "failOnDataLoss": "maybe"}, '"true" or "false"'),
        ({"bootstrap": "a:1", "kafka.bootstrap.servers": "b:2", "topic": "t"}, "not both"),
        ({"topic": "t", "partitions": ","}, "names no partition"),
    ],
)
def test_bad_read_options(options: dict[str, str], match: str) -> None:
    with pytest.raises(LaminarSparkError, match=match):
        read_options(options)


def test_kafka_named_read_options(caplog: pytest.LogCaptureFixture) -> None:
    opts = read_options(
        {
            "kafka.bootstrap.servers": "h1:1, h2:2",
            "subscribe": "a, b,a",
            "startingOffsets": '{"a": {"0": 5, "1": -2}, "b": {"0": -1}}',
            "endingOffsets": '{"a": {"0": 9}}',
            "maxOffsetsPerTrigger": "30",
            "failOnDataLoss": "false",
            "kafkaCompatibleSchema": "TRUE",
            "kafka.security.protocol": "PLAINTEXT",
            "kafka.group.id": "g",
        }
    )
    assert opts.bootstrap == "h1:1,h2:2"
    assert opts.topics == ("a", "b") and opts.several_topics and opts.topic_column
    assert opts.for_topic("a").starting == {0: 5, 1: "earliest"}
    assert opts.for_topic("b").starting == {0: "latest"}
    assert opts.for_topic("a").ending == {0: 9} and opts.for_topic("b").ending == "latest"
    assert opts.max_records_per_trigger == 30
    assert not opts.fail_on_data_loss and opts.kafka_schema
    assert "kafka.group.id" in caplog.text and "ignores it" in caplog.text
    timed = read_options(
        {"subscribePattern": "ev.*", "startingOffsetsByTimestamp": '{"ev1": {"2": 1000}}'}
    )
    assert timed.pattern == "ev.*" and timed.timestamps_for("ev1") == {2: 1000}
    assert timed.timestamps_for("other") == {}
    assert read_options({"topic": "t", "endingTimestamp": "77"}).ending_timestamp_ms == 77
    assert read_options({"topic": "t", "startingOffsets": "earliest"}).starting == "earliest"


JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="alice" password="p:w d";'
)


@pytest.mark.parametrize("parse", [read_options, write_options])
def test_kafka_security_options_become_tls_and_a_login(
    parse: Callable[[dict[str, str]], Any], tmp_path: Path
) -> None:
    """The Kafka source's SASL_SSL options and laminar's own give the same settings."""
    kafka = parse(
        {
            "topic": "t",
            "kafka.security.protocol": "sasl_ssl",
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": "/etc/ca.pem",
            "kafka.ssl.endpoint.identification.algorithm": "",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": JAAS,
        }
    ).security
    (tmp_path / "pw").write_text("p:w d\n")
    ours = parse(
        {
            "topic": "t",
            "tls": "true",
            "caFile": "/etc/ca.pem",
            "checkHostname": "false",
            "user": "alice",
            "passwordFile": str(tmp_path / "pw"),
            "saslMechanism": "scram-sha-512",
        }
    ).security
    expected = ClientSecurity(
        tls=True,
        ca_file="/etc/ca.pem",
        check_hostname=False,
        user="alice",
        password="p:w d",
        mechanism="SCRAM-SHA-512",
    )
    assert kafka == ours == expected
    assert "p:w d" not in repr(kafka)  # Spark logs plans: never the password
    assert parse({"topic": "t", "kafka.security.protocol": "SSL"}).security.tls
    assert parse({"topic": "t"}).security == ClientSecurity()


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/t.jks"}, "PEM"),
        ({"kafka.security.protocol": "SASL_SSL"}, "go together"),
        ({"kafka.sasl.jaas.config": JAAS}, "go together"),
        (
            {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.jaas.config": "x required;"},
            "SCRAM only",
        ),
        ({"kafka.sasl.mechanism": "PLAIN", "user": "a", "password": "b"}, "SCRAM-SHA-256 or"),
        ({"kafka.ssl.cipher.suites": "X"}, "not supported by laminar"),
        ({"kafka.security.protocol": "KERBEROS"}, "use one of"),
        ({"caFile": "/ca.pem"}, "need tls=true"),
        ({"tls": "true", "certFile": "/c.pem"}, "go together"),
        ({"user": "alice"}, "go together"),
        ({"tls": "true", "kafka.security.protocol": "SSL"}, "not both"),
    ],
)
@pytest.mark.parametrize("parse", [read_options, write_options])
def test_security_options_laminar_cannot_honour_are_refused_not_ignored(
    options: dict[str, str], match: str, parse: Callable[[dict[str, str]], object]
) -> None:
    """A query asking for protection laminar cannot give fails, naming the
    option, rather than running with less than was asked."""
    with pytest.raises(LaminarSparkError, match=match):
        parse({"topic": "t", **options})


def test_write_options() -> None:
    assert write_options({"topic": "t"}).max_batch_bytes == 1 << 20
    with pytest.raises(LaminarSparkError, match="over the limit"):
        write_options({"topic": "t", "maxBatchBytes": str(64 << 20)})
    with pytest.raises(LaminarSparkError, match="unknown option 'startingindex'"):
        write_options({"topic": "t", "startingIndex": "0"})


def test_resolve_index() -> None:
    assert resolve_index("earliest", "latest", 0, 3, 9, "x") == 3
    assert resolve_index(None, "latest", 0, 3, 9, "x") == 9
    assert resolve_index({1: 4}, "earliest", 0, 3, 9, "x") == 3
    assert resolve_index({0: 9}, "earliest", 0, 3, 9, "x") == 9
    with pytest.raises(LaminarSparkError, match=r"x=2 for partition 0 is out of range"):
        resolve_index(2, "earliest", 0, 3, 9, "x")


@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 300)), max_size=5),
    st.none() | st.integers(1, 70),
)
def test_splits_cover_each_range_once_in_order(
    spans: list[tuple[int, int]], max_records: int | None
) -> None:
    ranges = [Range(p, start, start + size) for p, (start, size) in enumerate(spans)]
    pieces = split(ranges, max_records)
    for r in ranges:
        mine = [q for q in pieces if q.partition == r.partition]
        covered = [i for q in mine for i in range(q.start, q.end)]
        assert covered == list(range(r.start, r.end))
        assert all(q.records >= 1 for q in mine)
        if max_records is not None:
            assert all(q.records <= max_records for q in mine)


@given(st.dictionaries(st.integers(0, 200), st.integers(0, 2**40), max_size=12))
def test_offsets_serialize_with_sorted_keys_and_round_trip(indexes: dict[int, int]) -> None:
    offset = to_offset(indexes)
    assert json.dumps(offset) == json.dumps(offset, sort_keys=True)
    assert from_offset(json.loads(json.dumps(offset))) == indexes


def test_a_foreign_offset_is_refused() -> None:
    with pytest.raises(LaminarSparkError, match="another source"):
        from_offset({"topic-0": 3})
    with pytest.raises(LaminarSparkError, match="read of one topic"):
        topics_from_offset({"0": 3})


def test_offsets_of_several_topics_and_the_lost_count_round_trip() -> None:
    positions = {"b": {1: 4, 0: 2}, "a": {0: 9}}
    offset = topics_to_offset(positions, lost=7)
    text = json.dumps(offset)
    assert text == json.dumps(offset, sort_keys=True)
    back = json.loads(text)
    assert topics_from_offset(back) == positions and lost_of(back) == 7
    single = to_offset({0: 5}, lost=3)
    assert from_offset(single) == {0: 5} and lost_of(single) == 3
    assert lost_of(to_offset({0: 5})) == 0 and LOST_KEY not in to_offset({0: 5})


@given(
    st.dictionaries(st.integers(0, 8), st.tuples(st.integers(0, 100), st.integers(0, 100))),
    st.integers(1, 150),
)
def test_read_limits_are_exact_and_fair(
    spans: dict[int, tuple[int, int]], max_records: int
) -> None:
    start = {p: s for p, (s, _) in spans.items()}
    latest = {p: s + n for p, (s, n) in spans.items()}
    end = limit_records(start, latest, max_records)
    backlog = sum(latest[p] - start[p] for p in start)
    assert sum(end[p] - start[p] for p in start) == min(max_records, backlog)
    assert all(start[p] <= end[p] <= latest[p] for p in start)
    assert end == limit_records(start, latest, max_records)  # deterministic


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2)), max_size=20))
def test_interleave_alternates_shards_and_keeps_each_shards_order(
    owned: list[tuple[int, int]],
) -> None:
    shard_of = {partition: shard for partition, shard in owned}
    pieces = [Range(p, i, i + 1) for i, (p, _) in enumerate(owned)]
    out = interleave(pieces, lambda r: shard_of[r.partition])
    assert sorted(out, key=lambda r: r.start) == pieces
    for shard in set(shard_of.values()):
        mine = [r for r in pieces if shard_of[r.partition] == shard]
        assert [r for r in out if shard_of[r.partition] == shard] == mine
    counts = {s: sum(shard_of[r.partition] == s for r in pieces) for s in set(shard_of.values())}
    if not counts:
        return
    rounds = min(counts.values(), default=0)
    head = out[: rounds * len(counts)]  # while every shard has pieces left, they alternate
    for i in range(0, len(head), len(counts)):
        assert len({shard_of[r.partition] for r in head[i : i + len(counts)]}) == len(counts)
