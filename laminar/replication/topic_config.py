"""Topic configs: the keys a topic may set, their types and meanings, no I/O.

Only these keys are accepted, each an integer in its range; anything else is
refused when a topic is created or altered, so a topic's config stays a few
bytes in every metadata answer. The names and meanings are Kafka's, so a
Kafka user finds them where they expect:

- `retention.ms`: delete a partition's oldest segments once their newest
  record is older than this (-1: keep forever, the default).
- `retention.bytes`: per partition, delete oldest segments while the rest
  still hold this many bytes (-1: no limit, the default).
- `segment.bytes`: a partition's segments roll over at this size (default: the
  node's `--segment-bytes`). Retention deletes whole segments only.
- `segment.ms`: roll the write segment once its first record is this old, so
  time-based retention can delete it on a quiet partition (default: never).
- `flush.messages`: 1 fsyncs every append before it is acknowledged, whatever
  the node's `--flush` says (default: the node's policy). Only 1 is accepted:
  the node's own flush interval covers the rest.

Retention runs on the node's timer (`--retention-check-interval`), never
inside a request, and never deletes the segment being written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

from laminar.log import LogConfig

SEGMENT_BYTES_MIN: Final = 4096
SEGMENT_BYTES_MAX: Final = 1 << 30


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One accepted key: an integer between `low` and `high` (inclusive)."""

    name: str
    low: int
    high: int
    meaning: str


TOPIC_CONFIG_KEYS: Final = {
    key.name: key
    for key in (
        ConfigKey("retention.ms", -1, 2**63 - 1, "-1 keeps records forever"),
        ConfigKey("retention.bytes", -1, 2**63 - 1, "-1: no size limit, per partition"),
        ConfigKey("segment.bytes", SEGMENT_BYTES_MIN, SEGMENT_BYTES_MAX, "segment size"),
        ConfigKey("segment.ms", 1, 2**63 - 1, "roll the write segment at this age"),
        ConfigKey("flush.messages", 1, 1, "1: fsync before every acknowledgement"),
    )
}


class TopicConfigError(ValueError):
    """A config key or value is not accepted; the message says which and why."""


def check_topic_config(config: Mapping[str, object]) -> dict[str, int]:
    """The config as stored, or `TopicConfigError` naming the first bad entry."""
    checked: dict[str, int] = {}
    for name, value in config.items():
        key = TOPIC_CONFIG_KEYS.get(name)
        if key is None:
            known = ", ".join(sorted(TOPIC_CONFIG_KEYS))
            raise TopicConfigError(f"unknown topic config {name[:60]!r}; the keys are {known}")
        if type(value) is not int or not key.low <= value <= key.high:
            raise TopicConfigError(
                f"topic config {name} must be an integer in {key.low}..{key.high} "
                f"({key.meaning}), got {str(value)[:40]!r}"
            )
        checked[name] = value
    return checked


def check_removal(names: tuple[str, ...]) -> None:
    """Raise `TopicConfigError` unless every name is a config key."""
    for name in names:
        if name not in TOPIC_CONFIG_KEYS:
            known = ", ".join(sorted(TOPIC_CONFIG_KEYS))
            raise TopicConfigError(f"unknown topic config {name[:60]!r}; the keys are {known}")


def known_entries(config: Mapping[str, object]) -> dict[str, int]:
    """The accepted entries of a stored config (an old log may hold others: they
    are ignored, never fatal to a replay)."""
    out: dict[str, int] = {}
    for name, value in config.items():
        key = TOPIC_CONFIG_KEYS.get(name)
        if key is not None and type(value) is int and key.low <= value <= key.high:
            out[name] = value
    return out


def log_config(base: LogConfig, config: Mapping[str, object]) -> LogConfig:
    """The partition log settings of a topic: the node's, with the topic's segment
    size and flush. Retention stays out of the log's config: the node applies it
    on its timer (`retention_limits`), never inside an append."""
    own = known_entries(config)
    segment_bytes = own.get("segment.bytes", base.segment_bytes)
    return replace(
        base,
        segment_bytes=segment_bytes,
        preallocate_bytes=min(base.preallocate_bytes, segment_bytes),
        flush="always" if own.get("flush.messages") == 1 else base.flush,
    )


def retention_limits(config: Mapping[str, object]) -> tuple[int | None, int | None]:
    """(retention bytes, retention ms) of a topic; None where it keeps everything."""
    own = known_entries(config)
    retention_bytes = own.get("retention.bytes", -1)
    retention_ms = own.get("retention.ms", -1)
    return (
        None if retention_bytes < 0 else retention_bytes,
        None if retention_ms < 0 else retention_ms,
    )


def segment_ms(config: Mapping[str, object]) -> int | None:
    """How old the write segment may grow before it is rolled (None: never)."""
    return known_entries(config).get("segment.ms")
