"""Cluster metadata as a log: the state machine, with no I/O.

Rules, and why:

- The metadata is the sequence of entries in a reserved partition
  (`METADATA_PID`, topic 0, partition 0), owned like any partition by its
  placement shard. Every shard holds a `MetadataState` and applies the entries
  in index order; the state after index `n` is a pure function of entries
  `0..n`, so a restart rebuilds it by replaying the log and every shard agrees.
- Only the owner *decides* (`plan_create`, `plan_delete`): it validates a
  request against the current state and produces the entry to append, with the
  topic id assigned. Applying never fails: an entry that no longer makes sense
  (a name that exists, an id that is gone) is applied as a no-op, so a replay
  can never get stuck.
- Topic ids start at 1 (0 is the metadata topic) and are never reused, not even
  after a delete: a new topic can never find an old topic's partition files.
- Entries are msgpack maps: `{"op": "create", "name", "topic_id", "partitions",
  "config"}` and `{"op": "delete", "name", "topic_id"}`. Unknown ops from a
  newer node are skipped (and reported as such), never guessed at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack

from laminar.placement import partition_id
from laminar.wire import ErrorCode, TopicInfo

METADATA_TOPIC_ID: Final = 0
METADATA_PID: Final = partition_id(METADATA_TOPIC_ID, 0)
FIRST_TOPIC_ID: Final = 1
MAX_TOPIC_ID: Final = 0xFFFF_FFFF
MAX_PARTITIONS: Final = 65536
MAX_NAME_LENGTH: Final = 249
_NAME_RE: Final = re.compile(r"[A-Za-z0-9._-]+")


class MetadataError(Exception):
    """A metadata request cannot be granted; `code` is the wire error to answer with."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class CreateTopic:
    name: str
    topic_id: int
    partitions: int
    config: dict[str, int | str] = field(default_factory=dict)

    def info(self) -> TopicInfo:
        return TopicInfo(self.name, self.topic_id, self.partitions, dict(self.config))


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    name: str
    topic_id: int


@dataclass(frozen=True, slots=True)
class UnknownEntry:
    """An entry this version cannot interpret (written by a newer node)."""

    raw: Any


Entry = CreateTopic | DeleteTopic | UnknownEntry


def encode_entry(entry: CreateTopic | DeleteTopic) -> bytes:
    if isinstance(entry, CreateTopic):
        body: dict[str, Any] = {
            "op": "create",
            "name": entry.name,
            "topic_id": entry.topic_id,
            "partitions": entry.partitions,
            "config": entry.config,
        }
    else:
        body = {"op": "delete", "name": entry.name, "topic_id": entry.topic_id}
    packed: bytes = msgpack.packb(body, use_bin_type=True)
    return packed


def decode_entry(value: bytes) -> Entry:
    """The entry stored at one index; `UnknownEntry` for anything unexpected."""
    try:
        body = msgpack.unpackb(value)
    except Exception:  # damaged or foreign bytes: skip them, never crash a replay
        return UnknownEntry(value)
    if type(body) is not dict:
        return UnknownEntry(body)
    op = body.get("op")
    try:
        if op == "create":
            config = body.get("config") or {}
            if type(config) is not dict:
                return UnknownEntry(body)
            return CreateTopic(
                _str(body["name"]), _int(body["topic_id"]), _int(body["partitions"]), config
            )
        if op == "delete":
            return DeleteTopic(_str(body["name"]), _int(body["topic_id"]))
    except (KeyError, TypeError):
        pass
    return UnknownEntry(body)


def _str(v: object) -> str:
    if type(v) is not str:
        raise TypeError
    return v


def _int(v: object) -> int:
    if type(v) is not int:
        raise TypeError
    return v


def check_topic_name(name: str) -> None:
    """Raise `MetadataError` unless `name` is a usable topic name."""
    if not name or len(name) > MAX_NAME_LENGTH or not _NAME_RE.fullmatch(name):
        raise MetadataError(
            ErrorCode.INVALID_REQUEST,
            f"invalid topic name {name[:60]!r}: use 1-{MAX_NAME_LENGTH} characters "
            "from A-Z a-z 0-9 . _ -",
        )


@dataclass(frozen=True, slots=True)
class Applied:
    """What applying one entry changed (for the shard to act on)."""

    index: int
    created: TopicInfo | None = None
    deleted: TopicInfo | None = None


class MetadataState:
    """Topics as of `applied_index` (exclusive: entries below it are applied)."""

    def __init__(self) -> None:
        self._by_name: dict[str, TopicInfo] = {}
        self._by_id: dict[int, TopicInfo] = {}
        self.next_topic_id = FIRST_TOPIC_ID
        self.applied_index = 0

    # -- queries ---------------------------------------------------------------

    def topics(self) -> tuple[TopicInfo, ...]:
        """Every topic, in id order."""
        return tuple(self._by_id[i] for i in sorted(self._by_id))

    def by_name(self, name: str) -> TopicInfo | None:
        return self._by_name.get(name)

    def by_id(self, topic_id: int) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def knows_id(self, topic_id: int) -> bool:
        """True if `topic_id` was ever assigned in the entries applied so far."""
        return topic_id < self.next_topic_id

    # -- decisions (owner only) ------------------------------------------------

    def plan_create(
        self, name: str, partitions: int, config: dict[str, int | str] | None = None
    ) -> CreateTopic:
        """The entry that creates `name`, or `MetadataError` saying why not."""
        check_topic_name(name)
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise MetadataError(
                ErrorCode.INVALID_REQUEST,
                f"a topic needs 1 to {MAX_PARTITIONS} partitions, got {partitions}",
            )
        if name in self._by_name:
            raise MetadataError(ErrorCode.TOPIC_EXISTS, f"topic {name!r} already exists")
        if self.next_topic_id > MAX_TOPIC_ID:
            raise MetadataError(ErrorCode.INTERNAL, "every topic id has been used")
        return CreateTopic(name, self.next_topic_id, partitions, dict(config or {}))

    def plan_delete(self, name: str) -> DeleteTopic:
        """The entry that deletes `name`, or `MetadataError` (UNKNOWN_TOPIC)."""
        topic = self._by_name.get(name)
        if topic is None:
            raise MetadataError(ErrorCode.UNKNOWN_TOPIC, f"no topic named {name[:100]!r}")
        return DeleteTopic(name, topic.topic_id)

    # -- applying (every shard) ------------------------------------------------

    def apply(self, index: int, entry: Entry) -> Applied:
        """Apply the entry at `index`, which must be `applied_index`."""
        if index != self.applied_index:
            raise ValueError(
                f"metadata entry {index} applied out of order (expected {self.applied_index})"
            )
        self.applied_index = index + 1
        if isinstance(entry, CreateTopic):
            self.next_topic_id = max(self.next_topic_id, entry.topic_id + 1)
            if entry.name in self._by_name or entry.topic_id in self._by_id:
                return Applied(index)
            if entry.topic_id == METADATA_TOPIC_ID or entry.partitions < 1:
                return Applied(index)
            topic = entry.info()
            self._by_name[topic.name] = topic
            self._by_id[topic.topic_id] = topic
            return Applied(index, created=topic)
        if isinstance(entry, DeleteTopic):
            found = self._by_id.get(entry.topic_id)
            if found is None or found.name != entry.name:
                return Applied(index)
            del self._by_id[found.topic_id]
            del self._by_name[found.name]
            return Applied(index, deleted=found)
        return Applied(index)

    def apply_value(self, index: int, value: bytes) -> Applied:
        return self.apply(index, decode_entry(value))
