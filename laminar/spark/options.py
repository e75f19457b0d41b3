"""The connector's options, parsed and checked before anything connects.

Spark hands a data source its options as strings in a case-insensitive map;
this module turns them into frozen dataclasses or raises `LaminarSparkError`
naming the option. Nothing here touches the network or Spark.

Read options (batch and streaming):
  bootstrap             host:port of any laminar node port or shard port
                        (default 127.0.0.1:7070)
  topic                 the topic (required)
  partitions            a subset of partitions: "0,2,5" or "[0,2,5]" (default all)
  startingIndex         "earliest", "latest", an index for every partition, or
                        JSON per partition: {"0": 42, "1": "earliest"}; partitions
                        not named start at the default (batch: earliest,
                        streaming: latest). Inclusive.
  endingIndex           batch only: "latest" (default), "earliest", an index, or
                        JSON per partition. Exclusive.
  startingTimestamp     ms since the epoch: start each partition at its first
                        record appended at or after it (instead of startingIndex)
  maxRecordsPerTrigger  streaming: at most this many records per micro-batch
  maxRecordsPerSplit    split a partition's range into Spark tasks of at most
                        this many records (default: one task per partition)

Write options (batch and streaming): bootstrap, topic, and
  maxBatchBytes         bytes of record values per request (default 1 MiB)
  guarantee             "exactly-once" (default: tasks stage, the driver commits
                        the winning attempts atomically) or "at-least-once"
                        (tasks append as they go: retries duplicate, a failed
                        job leaves what its tasks wrote)
  stagingTimeoutMs      how long a task's staged rows may wait for the commit
                        after its last batch (default: the node's
                        --staging-timeout)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from laminar.client import parse_address
from laminar.spark.errors import LaminarSparkError

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
        "partitions",
        "startingindex",
        "endingindex",
        "startingtimestamp",
        "maxrecordspertrigger",
        "maxrecordspersplit",
    }
)
_WRITE_OPTIONS: Final = frozenset(
    {"bootstrap", "topic", "maxbatchbytes", "guarantee", "stagingtimeoutms"}
)
GUARANTEES: Final = ("exactly-once", "at-least-once")
# Options Spark itself may pass to a source or sink.
_SPARK_OPTIONS: Final = frozenset({"path", "checkpointlocation", "queryname"})
_KAFKA_HINTS: Final = {
    "startingoffsets": "startingIndex",
    "endingoffsets": "endingIndex",
    "subscribe": "topic",
    "kafka.bootstrap.servers": "bootstrap",
    "maxoffsetspertrigger": "maxRecordsPerTrigger",
}


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """What to read (see the module docstring for each option)."""

    bootstrap: str
    topic: str
    partitions: tuple[int, ...] | None
    starting: IndexSpec | None
    ending: IndexSpec
    starting_timestamp_ms: int | None
    max_records_per_trigger: int | None
    max_records_per_split: int | None


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Where to write, how to batch, and with which guarantee."""

    bootstrap: str
    topic: str
    max_batch_bytes: int
    guarantee: str = "exactly-once"
    staging_timeout_s: float | None = None


def read_options(options: Mapping[str, str]) -> ReadOptions:
    """Parse and check the options of `spark.read` / `spark.readStream`."""
    opts = _lowered(options, _READ_OPTIONS)
    starting = opts.get("startingindex")
    timestamp = opts.get("startingtimestamp")
    if starting is not None and timestamp is not None:
        raise LaminarSparkError("give startingIndex or startingTimestamp, not both")
    return ReadOptions(
        bootstrap=_bootstrap(opts),
        topic=_topic(opts),
        partitions=_partitions(opts.get("partitions")),
        starting=None if starting is None else _index_spec("startingIndex", starting),
        ending=_index_spec("endingIndex", opts.get("endingindex", "latest")),
        starting_timestamp_ms=None if timestamp is None else _count("startingTimestamp", timestamp),
        max_records_per_trigger=_positive(opts, "maxrecordspertrigger", "maxRecordsPerTrigger"),
        max_records_per_split=_positive(opts, "maxrecordspersplit", "maxRecordsPerSplit"),
    )


def write_options(options: Mapping[str, str]) -> WriteOptions:
    """Parse and check the options of `df.write` / `df.writeStream`."""
    opts = _lowered(options, _WRITE_OPTIONS)
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
    )


def _lowered(options: Mapping[str, str], known: frozenset[str]) -> dict[str, str]:
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    for name in opts:
        if name in known or name in _SPARK_OPTIONS:
            continue
        hint = _KAFKA_HINTS.get(name)
        advice = f"; laminar calls it {hint!r}" if hint else ""
        raise LaminarSparkError(
            f"unknown option {name!r}{advice} (laminar options here: {', '.join(sorted(known))})"
        )
    return opts


def _bootstrap(opts: dict[str, str]) -> str:
    bootstrap = opts.get("bootstrap", DEFAULT_BOOTSTRAP).strip()
    try:
        parse_address(bootstrap)
    except ValueError as exc:
        raise LaminarSparkError(f"bootstrap={bootstrap!r} is not host:port: {exc}") from None
    return bootstrap


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
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LaminarSparkError(f"{name} is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise LaminarSparkError(f"{name} must be a JSON object of partition to index")
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
