"""The connector's options, parsed and checked before anything connects.

Spark hands a data source its options as strings in a case-insensitive map;
this module turns them into frozen dataclasses or raises `LaminarSparkError`
naming the option. Nothing here touches the network or Spark. Options named
like Spark's Kafka source are accepted too (second column); any other option
starting with `kafka.` is ignored with a logged warning, except the security
ones (`kafka.security.protocol`, `kafka.ssl.*`, `kafka.sasl.*`), which
`laminar.spark.security` honours or refuses, never ignores (its docstring
lists the TLS and login options, taken by reads and writes alike).

Read options (batch and streaming):
  bootstrap             host:port of any laminar node port or shard port, or a
                        comma-separated list (the first that answers is used)
                        (default 127.0.0.1:7070); kafka.bootstrap.servers
  topic                 one topic
  subscribe             several topics, comma-separated; adds a `topic` column
  subscribePattern      the topics whose names match a regular expression
                        (Python `re.fullmatch`), resolved when the query
                        plans; adds a `topic` column
  partitions            a subset of partitions: "0,2,5" or "[0,2,5]" (default all)
  startingIndex         "earliest", "latest", an index for every partition, or
                        JSON per partition: {"0": 42, "1": "earliest"}; partitions
                        not named start at the default (batch: earliest,
                        streaming: latest). Inclusive.
  startingOffsets       Kafka's form: "earliest", "latest", or JSON per topic and
                        partition {"t": {"0": 42, "1": -2}} (-2 earliest, -1 latest)
  endingIndex           batch only: "latest" (default), "earliest", an index, or
                        JSON per partition. Exclusive. endingOffsets: Kafka's form.
  startingTimestamp     ms since the epoch: start each partition at its first
                        record appended at or after it (instead of startingIndex)
  startingOffsetsByTimestamp
                        the same per partition: {"t": {"0": 1700000000000}};
                        partitions not named take the other starting options
  endingTimestamp       batch only: end each partition before its first record
                        appended at or after this time (ms since the epoch)
  failOnDataLoss        "true" (default): records removed by retention before the
                        query read them are an error; "false": skip them with a
                        warning (streaming: counted in the offset's "lostRecords")
  kafkaCompatibleSchema "true": Kafka's columns (key, value, topic, partition,
                        offset, timestamp, timestampType, headers as an array of
                        key/value structs) instead of laminar's
  maxRecordsPerTrigger  streaming: at most this many records per micro-batch;
                        maxOffsetsPerTrigger
  maxRecordsPerSplit    split a partition's range into Spark tasks of at most
                        this many records (default: one task per partition)

Write options (batch and streaming): bootstrap, topic, and
  maxBatchBytes         bytes of record values per request (default 1 MiB)
  guarantee             "exactly-once" (default: tasks stage, the driver commits
                        the winning attempts atomically) or "at-least-once"
                        (tasks append as they go: retries duplicate, a failed
                        job leaves what its tasks wrote)
  stagingTimeoutMs      how long a task's staged rows may wait for the commit
                        after its write's last batch reached the shard (default:
                        the node's --staging-timeout)
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final, Literal

from laminar.client import parse_address
from laminar.spark.errors import LaminarSparkError
from laminar.spark.security import (
    LAMINAR_OPTIONS,
    PLAINTEXT,
    ClientSecurity,
    bool_option,
    take_security,
)

logger = logging.getLogger("laminar.spark")

Position = Literal["earliest", "latest"]
IndexSpec = Position | int | Mapping[int, "Position | int"]
"""Where a read starts or ends: a position or index for every partition, or
per partition (partitions not named take the default)."""

DEFAULT_BOOTSTRAP: Final = "127.0.0.1:7070"
DEFAULT_MAX_BATCH_BYTES: Final = 1 << 20
MAX_BATCH_BYTES_LIMIT: Final = 4 << 20
"""A produce request must fit the node's frame (8 MiB by default) with room to spare."""

_READ_OPTIONS: Final = frozenset(
    {
        "bootstrap",
        "topic",
        "subscribe",
        "subscribepattern",
        "partitions",
        "startingindex",
        "startingoffsets",
        "endingindex",
        "endingoffsets",
        "startingtimestamp",
        "startingoffsetsbytimestamp",
        "endingtimestamp",
        "failondataloss",
        "kafkacompatibleschema",
        "maxrecordspertrigger",
        "maxoffsetspertrigger",
        "maxrecordspersplit",
    }
)
_WRITE_OPTIONS: Final = frozenset(
    {"bootstrap", "topic", "maxbatchbytes", "guarantee", "stagingtimeoutms"}
)
GUARANTEES: Final = ("exactly-once", "at-least-once")
# Options Spark itself may pass to a source or sink.
_SPARK_OPTIONS: Final = frozenset({"path", "checkpointlocation", "queryname"})
_KAFKA_BOOTSTRAP: Final = "kafka.bootstrap.servers"
_KAFKA_HINTS: Final = {"assign": "topic and partitions"}


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """What to read (see the module docstring for each option). With `topic` set
    the read is of one topic (laminar's columns and offsets); with `topics` or
    `pattern` it is of several, and rows carry a `topic` column.
    `for_topic(name)` gives the options of one of them, per-topic specs resolved."""

    bootstrap: str
    topic: str
    partitions: tuple[int, ...] | None
    starting: IndexSpec | None
    ending: IndexSpec
    starting_timestamp_ms: int | None
    max_records_per_trigger: int | None
    max_records_per_split: int | None
    topics: tuple[str, ...] | None = None
    pattern: str | None = None
    starting_by_topic: Mapping[str, IndexSpec] | None = None
    ending_by_topic: Mapping[str, IndexSpec] | None = None
    starting_timestamps: Mapping[str, Mapping[int, int]] | None = None
    ending_timestamp_ms: int | None = None
    fail_on_data_loss: bool = True
    kafka_schema: bool = False
    security: ClientSecurity = PLAINTEXT

    @property
    def several_topics(self) -> bool:
        """`subscribe` or `subscribePattern`: rows have a `topic` column."""
        return self.topics is not None or self.pattern is not None

    @property
    def topic_column(self) -> bool:
        return self.several_topics or self.kafka_schema

    def for_topic(self, name: str) -> ReadOptions:
        """These options for topic `name` alone (Kafka-style per-topic specs resolved)."""
        starting = self.starting
        if self.starting_by_topic is not None:
            starting = self.starting_by_topic.get(name)
        ending = self.ending
        if self.ending_by_topic is not None:
            ending = self.ending_by_topic.get(name, "latest")
        return replace(self, topic=name, starting=starting, ending=ending)

    def timestamps_for(self, name: str) -> Mapping[int, int]:
        """Per-partition starting timestamps of topic `name` (may be empty)."""
        if self.starting_timestamps is None:
            return {}
        return self.starting_timestamps.get(name, {})


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Where to write, how to batch, and with which guarantee."""

    bootstrap: str
    topic: str
    max_batch_bytes: int
    guarantee: str = "exactly-once"
    staging_timeout_s: float | None = None
    security: ClientSecurity = PLAINTEXT


def read_options(options: Mapping[str, str]) -> ReadOptions:
    """Parse and check the options of `spark.read` / `spark.readStream`."""
    opts, security = _lowered(options, _READ_OPTIONS)
    topic, topics, pattern = _subscription(opts)
    starting = opts.get("startingindex")
    kafka_starting = opts.get("startingoffsets")
    timestamp = opts.get("startingtimestamp")
    by_timestamp = opts.get("startingoffsetsbytimestamp")
    if starting is not None and kafka_starting is not None:
        raise LaminarSparkError("give startingIndex or startingOffsets, not both")
    if (starting or kafka_starting) is not None and (timestamp or by_timestamp) is not None:
        raise LaminarSparkError(
            "give a starting index (startingIndex, startingOffsets) or a starting time "
            "(startingTimestamp, startingOffsetsByTimestamp), not both"
        )
    if timestamp is not None and by_timestamp is not None:
        raise LaminarSparkError("give startingTimestamp or startingOffsetsByTimestamp, not both")
    ending = opts.get("endingindex")
    kafka_ending = opts.get("endingoffsets")
    ending_ts = opts.get("endingtimestamp")
    if sum(x is not None for x in (ending, kafka_ending, ending_ts)) > 1:
        raise LaminarSparkError("give one of endingIndex, endingOffsets and endingTimestamp")
    starting_spec, starting_by_topic = _kafka_or_index("startingOffsets", kafka_starting)
    ending_spec, ending_by_topic = _kafka_or_index("endingOffsets", kafka_ending)
    trigger = _positive(opts, "maxrecordspertrigger", "maxRecordsPerTrigger")
    trigger = trigger or _positive(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    return ReadOptions(
        bootstrap=_bootstrap(opts),
        topic=topic,
        partitions=_partitions(opts.get("partitions")),
        starting=_index_spec("startingIndex", starting) if starting is not None else starting_spec,
        ending=_index_spec("endingIndex", ending)
        if ending is not None
        else ending_spec or "latest",
        starting_timestamp_ms=None if timestamp is None else _count("startingTimestamp", timestamp),
        max_records_per_trigger=trigger,
        max_records_per_split=_positive(opts, "maxrecordspersplit", "maxRecordsPerSplit"),
        topics=topics,
        pattern=pattern,
        starting_by_topic=starting_by_topic,
        ending_by_topic=ending_by_topic,
        starting_timestamps=None if by_timestamp is None else _timestamps(by_timestamp),
        ending_timestamp_ms=None if ending_ts is None else _count("endingTimestamp", ending_ts),
        fail_on_data_loss=bool_option(opts, "failondataloss", "failOnDataLoss", True),
        kafka_schema=bool_option(opts, "kafkacompatibleschema", "kafkaCompatibleSchema", False),
        security=security,
    )


def _subscription(opts: dict[str, str]) -> tuple[str, tuple[str, ...] | None, str | None]:
    """`(topic, topics, pattern)`: exactly one of topic, subscribe, subscribePattern."""
    given = [name for name in ("topic", "subscribe", "subscribepattern") if opts.get(name)]
    if not given:
        raise LaminarSparkError(
            'the "topic" option is required: .option("topic", "events") '
            '(or "subscribe" for several topics, "subscribePattern" for a regex)'
        )
    if len(given) > 1:
        raise LaminarSparkError("give one of topic, subscribe and subscribePattern")
    if "subscribe" in given:
        topics = tuple(dict.fromkeys(t.strip() for t in opts["subscribe"].split(",") if t.strip()))
        if not topics:
            raise LaminarSparkError(f"subscribe={opts['subscribe']!r} names no topic")
        return topics[0], topics, None
    if "subscribepattern" in given:
        pattern = opts["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise LaminarSparkError(f"subscribePattern={pattern!r} is not a regex: {exc}") from None
        return "", None, pattern
    return _topic(opts), None, None


def _kafka_or_index(
    name: str, text: str | None
) -> tuple[IndexSpec | None, dict[str, IndexSpec] | None]:
    """Kafka's startingOffsets/endingOffsets: "earliest", "latest", or JSON
    {"topic": {"partition": offset}} with -2 for earliest and -1 for latest."""
    if text is None:
        return None, None
    text = text.strip()
    if text in ("earliest", "latest"):
        return text, None  # type: ignore[return-value]
    raw = _json(name, text)
    by_topic: dict[str, IndexSpec] = {}
    for topic, partitions in raw.items():
        if type(partitions) is not dict:
            raise LaminarSparkError(f'{name} maps topics to {{"partition": offset}}')
        spec: dict[int, Position | int] = {}
        for key, value in partitions.items():
            partition = _count(f"{name} partition", str(key))
            if value == -2 or value == -1:
                spec[partition] = "earliest" if value == -2 else "latest"
            elif type(value) is int and value >= 0:
                spec[partition] = value
            else:
                raise LaminarSparkError(
                    f"{name} for {topic}/{key}: {value!r} is not an offset, -2 (earliest) "
                    "or -1 (latest)"
                )
        by_topic[str(topic)] = spec
    return None, by_topic


def _timestamps(text: str) -> dict[str, dict[int, int]]:
    raw = _json("startingOffsetsByTimestamp", text)
    out: dict[str, dict[int, int]] = {}
    for topic, partitions in raw.items():
        if type(partitions) is not dict:
            raise LaminarSparkError('startingOffsetsByTimestamp maps topics to {"partition": ms}')
        out[str(topic)] = {
            _count("startingOffsetsByTimestamp partition", str(p)): _count(
                "startingOffsetsByTimestamp", str(ms)
            )
            for p, ms in partitions.items()
        }
    return out


def _json(name: str, text: str) -> dict[str, object]:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LaminarSparkError(f"{name} is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise LaminarSparkError(f"{name} must be a JSON object")
    return raw


def write_options(options: Mapping[str, str]) -> WriteOptions:
    """Parse and check the options of `df.write` / `df.writeStream`."""
    opts, security = _lowered(options, _WRITE_OPTIONS)
    batch_bytes = _positive(opts, "maxbatchbytes", "maxBatchBytes") or DEFAULT_MAX_BATCH_BYTES
    if batch_bytes > MAX_BATCH_BYTES_LIMIT:
        raise LaminarSparkError(
            f"maxBatchBytes={batch_bytes} is over the limit of {MAX_BATCH_BYTES_LIMIT}"
        )
    guarantee = opts.get("guarantee", "exactly-once").strip().lower()
    if guarantee not in GUARANTEES:
        raise LaminarSparkError(f"guarantee={guarantee!r}: use one of {', '.join(GUARANTEES)}")
    timeout_ms = _positive(opts, "stagingtimeoutms", "stagingTimeoutMs")
    return WriteOptions(
        _bootstrap(opts),
        _topic(opts),
        batch_bytes,
        guarantee,
        None if timeout_ms is None else timeout_ms / 1000,
        security,
    )


def _lowered(
    options: Mapping[str, str], known: frozenset[str]
) -> tuple[dict[str, str], ClientSecurity]:
    """The options with lower-cased names, security ones taken out (and
    parsed); `LaminarSparkError` for an unknown one."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    security = take_security(opts)
    if _KAFKA_BOOTSTRAP in opts:
        if "bootstrap" in opts:
            raise LaminarSparkError(f"give bootstrap or {_KAFKA_BOOTSTRAP}, not both")
        opts["bootstrap"] = opts.pop(_KAFKA_BOOTSTRAP)
    for name in list(opts):
        if name in known or name in _SPARK_OPTIONS:
            continue
        if name.startswith("kafka."):
            logger.warning("option %r is a Kafka client setting; laminar ignores it", name)
            del opts[name]
            continue
        hint = _KAFKA_HINTS.get(name)
        advice = f"; laminar calls it {hint!r}" if hint else ""
        raise LaminarSparkError(
            f"unknown option {name!r}{advice} (laminar options here: "
            f"{', '.join(sorted(known | LAMINAR_OPTIONS))})"
        )
    return opts, security


def _bootstrap(opts: dict[str, str]) -> str:
    """One `host:port`, or several separated by commas (tried in order)."""
    text = opts.get("bootstrap", DEFAULT_BOOTSTRAP)
    addresses = [a.strip() for a in text.split(",") if a.strip()]
    if not addresses:
        raise LaminarSparkError(f"bootstrap={text!r} names no host:port")
    for address in addresses:
        try:
            parse_address(address)
        except ValueError as exc:
            raise LaminarSparkError(f"bootstrap={address!r} is not host:port: {exc}") from None
    return ",".join(addresses)


def _topic(opts: dict[str, str]) -> str:
    topic = opts.get("topic", "").strip()
    if not topic:
        raise LaminarSparkError('the "topic" option is required: .option("topic", "events")')
    return topic


def _count(name: str, text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise LaminarSparkError(f"{name}={text!r} is not an integer") from None
    if value < 0:
        raise LaminarSparkError(f"{name}={text!r} must not be negative")
    return value


def _positive(opts: dict[str, str], key: str, name: str) -> int | None:
    text = opts.get(key)
    if text is None:
        return None
    value = _count(name, text)
    if value == 0:
        raise LaminarSparkError(f"{name} must be at least 1")
    return value


def _partitions(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    body = text.strip().removeprefix("[").removesuffix("]")
    parts = [p.strip() for p in body.split(",") if p.strip()]
    if not parts:
        raise LaminarSparkError(f"partitions={text!r} names no partition")
    found = tuple(sorted({_count("partitions", p) for p in parts}))
    return found


def _index_spec(name: str, text: str) -> IndexSpec:
    """ "earliest" | "latest" | an index | JSON {"partition": index or position}."""
    text = text.strip()
    if text in ("earliest", "latest"):
        return text  # type: ignore[return-value]
    if not text.startswith("{"):
        return _count(name, text)
    raw = _json(name, text)
    spec: dict[int, Position | int] = {}
    for key, value in raw.items():
        partition = _count(f"{name} partition", str(key))
        if value in ("earliest", "latest") or (type(value) is int and value >= 0):
            spec[partition] = value
        else:
            raise LaminarSparkError(
                f'{name} for partition {key}: {value!r} is not an index, "earliest" or "latest"'
            )
    return spec
