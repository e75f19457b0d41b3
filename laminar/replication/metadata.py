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
  "config"}`, `{"op": "alter", "name", "topic_id", "config"}` (the whole new
  config), `{"op": "delete", "name", "topic_id"}` and `{"op": "snapshot",
  "next_topic_id", "topics": [...], "at", "placed_on"}` (`at` absent in
  snapshots written before it existed: they are taken as placed where they
  are; `placed_on`: `[[topic_id, i], ...]` with `placements[i]` a
  `[[node, weight], ...]`: each topic's creation `placed_on`, which gossip
  clusters derive first replicas from, each distinct list stored once).
  Create entries carry `placed_on` too in a cluster. `{"op":
  "decommission", "node", "cancel"?}` records that the cluster decided a node
  leaves for good (or, cancelled, that it stays); snapshots carry the set as
  `"decommissioned": [node, ...]` (absent: none). Unknown ops
  from a newer node are skipped (and reported as such), never guessed at.
- Compaction: a snapshot entry holds the whole state its index implies, and
  applying it replaces the state. The owner appends one, as the first entry of
  a new segment, once the log since the last holds twice as many entries as
  there are topics (`needs_snapshot`), and drops the segments before it: the
  log stays within a small multiple of the state, and a replay starts at a
  snapshot. A shard that was behind the dropped entries applies the snapshot
  and learns what was created and deleted meanwhile from the difference.
- A snapshot names the index it was planned for (`at`): the state it holds is
  the state after every entry below `at`. One that lands anywhere else (in a
  cluster the metadata leader proposes it like any entry) is skipped, so a
  snapshot can never undo an entry it did not see.
- Gaps: whoever applies entries after missing some (a restart from a
  compacted log, a Raft install, a tail that the owner compacted past) calls
  `resync()`; entries are then skipped until the next snapshot, which defines
  the whole state. A compacted log always holds a snapshot after its start.
- Reconciliation (`Applied.snapshot`): after a snapshot the shell deletes local
  partitions of topics the snapshot proves deleted (an id below its
  `next_topic_id` that it does not list); a delete entry compacted away while
  this node was down never runs otherwise. Ids at or past `next_topic_id` are
  topics created after the snapshot and are never touched.
- Bounds: topic configs take only the keys of `topic_config` (typed), and the
  owner refuses a create past `max_topics`: every metadata answer lists every
  topic, so this is what keeps the answer (and a client's bootstrap) small.
  It also refuses a topic of more than `max_topic_partitions` partitions, and
  one that would take the partition replicas past `max_partitions` per node
  (`TopicLimits`). The owner is where placement is decided, so the check runs
  once, before any entry is written: a refused create leaves nothing behind.
  In a cluster the replicas are counted over all nodes against
  `max_partitions` times the placeable nodes (every node is expected to run
  with the same limit; placement spreads replicas by weight, so a node's own
  share is not checked exactly).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack

from laminar.placement import partition_id
from laminar.replication.topic_config import (
    TopicConfigError,
    check_removal,
    check_topic_config,
    known_entries,
)
from laminar.security.state import SECURITY_OPS, SecurityEntry, SecurityState
from laminar.security.state import decode_body as decode_security_body
from laminar.security.state import encode_entry as encode_security_entry
from laminar.wire import ErrorCode, TopicInfo

METADATA_TOPIC_ID: Final = 0
METADATA_PID: Final = partition_id(METADATA_TOPIC_ID, 0)
FIRST_TOPIC_ID: Final = 1
MAX_TOPIC_ID: Final = 0xFFFF_FFFF
MAX_PARTITIONS: Final = 65536
MAX_NAME_LENGTH: Final = 249
_NAME_RE: Final = re.compile(r"[A-Za-z0-9._-]+")
_RESERVED_NAMES: Final = frozenset({".", ".."})
SNAPSHOT_MIN_ENTRIES: Final = 64
"""No snapshot before this many entries since the last (small logs stay as they are)."""


class MetadataError(Exception):
    """A metadata request cannot be granted; `code` is the wire error to answer with
    (NOT_LEADER names the metadata `leader` when known)."""

    def __init__(self, code: ErrorCode, message: str, *, leader: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.leader = leader


Placement = tuple[tuple[str, float], ...]
"""Members (node id, weight) a topic's first replicas were placed on."""


@dataclass(frozen=True, slots=True)
class CreateTopic:
    name: str
    topic_id: int
    partitions: int
    config: dict[str, int | str] = field(default_factory=dict)
    replication_factor: int = 1
    placed_on: Placement = ()
    """The cluster's members (node id, weight) as the creator saw them: every
    node derives the partitions' first replicas from these, so all agree on
    each group's first membership whatever their own views say now (empty:
    a single node)."""

    def info(self) -> TopicInfo:
        return TopicInfo(
            self.name, self.topic_id, self.partitions, dict(self.config), self.replication_factor
        )


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    name: str
    topic_id: int


@dataclass(frozen=True, slots=True)
class AlterTopic:
    """Replace a topic's config with `config`."""

    name: str
    topic_id: int
    config: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Decommission:
    """Node `node_id` leaves the cluster for good: placement moves every replica
    it holds to the others (`cancel`: it stays a member after all)."""

    node_id: str
    cancel: bool = False


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The whole state after every entry below `at`, the index it was planned
    for (None: an older snapshot, valid wherever it is)."""

    next_topic_id: int
    topics: tuple[TopicInfo, ...]
    at: int | None = None
    placed_on: tuple[tuple[int, Placement], ...] = ()
    """Each topic's `CreateTopic.placed_on` (those that had one), by topic id:
    compaction must not forget whom a topic's first replicas were placed on."""
    decommissioned: tuple[str, ...] = ()
    security: dict[str, Any] = field(default_factory=dict)
    """Users, ACLs and the decoy key (`SecurityState.snapshot_body`; empty: none)."""


@dataclass(frozen=True, slots=True)
class UnknownEntry:
    """An entry this version cannot interpret (written by a newer node)."""

    raw: Any


Entry = (
    CreateTopic | DeleteTopic | AlterTopic | Decommission | SecurityEntry | Snapshot | UnknownEntry
)
Change = CreateTopic | DeleteTopic | AlterTopic | Decommission | SecurityEntry
"""What a client's request becomes: one entry the metadata leader plans."""


def encode_entry(entry: Change | Snapshot) -> bytes:
    body: dict[str, Any]
    if not isinstance(entry, CreateTopic | DeleteTopic | AlterTopic | Decommission | Snapshot):
        return encode_security_entry(entry)
    if isinstance(entry, CreateTopic):
        body = {
            "op": "create",
            "name": entry.name,
            "topic_id": entry.topic_id,
            "partitions": entry.partitions,
            "config": entry.config,
        }
        if entry.replication_factor != 1:
            body["replication_factor"] = entry.replication_factor
        if entry.placed_on:
            body["placed_on"] = [list(member) for member in entry.placed_on]
    elif isinstance(entry, AlterTopic):
        body = {
            "op": "alter",
            "name": entry.name,
            "topic_id": entry.topic_id,
            "config": entry.config,
        }
    elif isinstance(entry, Snapshot):
        body = {
            "op": "snapshot",
            "next_topic_id": entry.next_topic_id,
            "topics": [t.to_wire() for t in entry.topics],
        }
        if entry.at is not None:
            body["at"] = entry.at
        if entry.placed_on:
            # Most topics are created under the same view: each distinct list once.
            distinct: dict[Placement, int] = {}
            body["placed_on"] = [
                [topic_id, distinct.setdefault(members, len(distinct))]
                for topic_id, members in entry.placed_on
            ]
            body["placements"] = [[list(member) for member in members] for members in distinct]
        if entry.decommissioned:
            body["decommissioned"] = list(entry.decommissioned)
        body.update(entry.security)
    elif isinstance(entry, Decommission):
        body = {"op": "decommission", "node": entry.node_id}
        if entry.cancel:
            body["cancel"] = True
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
    if op in SECURITY_OPS:
        security = decode_security_body(body)
        return UnknownEntry(body) if security is None else security
    try:
        if op == "create":
            config = body.get("config") or {}
            if type(config) is not dict:
                return UnknownEntry(body)
            return CreateTopic(
                _str(body["name"]),
                _int(body["topic_id"]),
                _int(body["partitions"]),
                config,
                _int(body.get("replication_factor", 1)),
                _placement(body.get("placed_on")),
            )
        if op == "delete":
            return DeleteTopic(_str(body["name"]), _int(body["topic_id"]))
        if op == "alter":
            config = body.get("config") or {}
            if type(config) is not dict:
                return UnknownEntry(body)
            return AlterTopic(_str(body["name"]), _int(body["topic_id"]), known_entries(config))
        if op == "snapshot":
            topics = body["topics"]
            if type(topics) is not list:
                return UnknownEntry(body)
            at = body.get("at")
            placed = body.get("placed_on") or []
            placements = body.get("placements") or []
            if type(placed) is not list or type(placements) is not list:
                return UnknownEntry(body)
            distinct = [_placement(members) for members in placements]
            decommissioned = body.get("decommissioned") or []
            if type(decommissioned) is not list:
                return UnknownEntry(body)
            return Snapshot(
                _int(body["next_topic_id"]),
                tuple(map(_topic, topics)),
                None if at is None else _int(at),
                tuple((_int(topic_id), _pick(distinct, i)) for topic_id, i in placed),
                tuple(map(_str, decommissioned)),
                _security_of(body),
            )
        if op == "decommission":
            cancel = body.get("cancel", False)
            if type(cancel) is not bool:
                return UnknownEntry(body)
            return Decommission(_str(body["node"]), cancel)
    except (KeyError, TypeError, ValueError):
        pass
    return UnknownEntry(body)


_SECURITY_SNAPSHOT_KEYS: Final = ("users", "acls", "decoy_key")


def _security_of(snapshot: dict[str, Any]) -> dict[str, Any]:
    """A snapshot's security part, checked whole (TypeError/ValueError if not)."""
    body: dict[str, Any] = {k: snapshot[k] for k in _SECURITY_SNAPSHOT_KEYS if k in snapshot}
    SecurityState().restore(body)
    return body


def _placement(value: object) -> Placement:
    if value is None:
        return ()
    if type(value) is not list:
        raise TypeError
    return tuple((_str(node), _weight(weight)) for node, weight in value)


def _pick(placements: list[Placement], index: object) -> Placement:
    if not 0 <= _int(index) < len(placements):
        raise TypeError
    return placements[_int(index)]


def _weight(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1e9:
        raise TypeError
    return float(value)


def _topic(h: object) -> TopicInfo:
    if type(h) is not dict:
        raise TypeError
    config = h.get("config") or {}
    if type(config) is not dict:
        raise TypeError
    return TopicInfo(
        _str(h["name"]),
        _int(h["topic_id"]),
        _int(h["partitions"]),
        dict(known_entries(config)),
        _int(h.get("replication_factor", 1)),
    )


def _str(v: object) -> str:
    if type(v) is not str:
        raise TypeError
    return v


def _int(v: object) -> int:
    if type(v) is not int:
        raise TypeError
    return v


INTERNAL_PREFIX: Final = "__"
"""Topics whose names start with this are the node's own (the positions topic
of consumer groups): clients may read them, never create, change, delete or
write them."""


def is_internal_topic(name: str) -> bool:
    return name.startswith(INTERNAL_PREFIX)


def refuse_internal_topic(name: str, action: str) -> None:
    """Raise `MetadataError` if a client asks to `action` an internal topic."""
    if is_internal_topic(name):
        raise MetadataError(
            ErrorCode.INVALID_REQUEST,
            f"cannot {action} {name[:60]!r}: topics whose names start with "
            f"{INTERNAL_PREFIX!r} are the node's own",
        )


def check_topic_name(name: str) -> None:
    """Raise `MetadataError` unless `name` is a usable topic name ("." and ".."
    are refused: a name may one day be a directory name)."""
    if (
        not name
        or len(name) > MAX_NAME_LENGTH
        or not _NAME_RE.fullmatch(name)
        or name in _RESERVED_NAMES
    ):
        raise MetadataError(
            ErrorCode.INVALID_REQUEST,
            f"invalid topic name {name[:60]!r}: use 1-{MAX_NAME_LENGTH} characters "
            "from A-Z a-z 0-9 . _ - (not '.' or '..')",
        )


def _checked_config(config: dict[str, int | str]) -> dict[str, int]:
    try:
        return check_topic_config(config)
    except TopicConfigError as exc:
        raise MetadataError(ErrorCode.INVALID_REQUEST, str(exc)) from None


@dataclass(frozen=True, slots=True)
class Applied:
    """What applying one entry changed (for the shard to act on). A snapshot can
    create and delete many topics at once (a shard that was far behind); when
    one was applied, `snapshot` is it (the shell reconciles its files with it)."""

    index: int
    created: tuple[TopicInfo, ...] = ()
    deleted: tuple[TopicInfo, ...] = ()
    altered: tuple[TopicInfo, ...] = ()
    snapshot: Snapshot | None = None


@dataclass(frozen=True, slots=True)
class TopicLimits:
    """What the owner lets topic creates add up to (`--max-topics`,
    `--max-partitions`, `--max-topic-partitions`)."""

    max_topics: int = 10_000
    max_partitions: int = 50_000
    """Partition replicas one node holds at most."""
    max_topic_partitions: int = MAX_PARTITIONS
    """Partitions one topic has at most (at most `MAX_PARTITIONS`)."""


class MetadataState:
    """Topics as of `applied_index` (exclusive: entries below it are applied)."""

    def __init__(self, max_topics: int = 10_000, limits: TopicLimits | None = None) -> None:
        self.limits = limits or TopicLimits(max_topics=max_topics)
        self.max_topics = self.limits.max_topics
        self._by_name: dict[str, TopicInfo] = {}
        self._by_id: dict[int, TopicInfo] = {}
        self._placed_on: dict[int, dict[str, float]] = {}
        self.next_topic_id = FIRST_TOPIC_ID
        self.decommissioned: frozenset[str] = frozenset()
        """Nodes the cluster decided leave for good (placement places nothing there)."""
        self.applied_index = 0
        self.snapshot_index: int | None = None
        """Index of the last snapshot entry applied (None: none yet)."""
        self.awaiting_snapshot = False
        """Entries before this point are missing (`resync`): skip until a snapshot."""
        self.security = SecurityState()
        """Users, ACLs and the decoy key (`laminar.security.state`)."""

    # -- queries ---------------------------------------------------------------

    def topics(self) -> tuple[TopicInfo, ...]:
        """Every topic, in id order."""
        return tuple(self._by_id[i] for i in sorted(self._by_id))

    def by_name(self, name: str) -> TopicInfo | None:
        return self._by_name.get(name)

    def by_id(self, topic_id: int) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def placed_on(self, topic_id: int) -> dict[str, float] | None:
        """The members a topic's first replicas were placed on (None: not recorded)."""
        return self._placed_on.get(topic_id)

    def knows_id(self, topic_id: int) -> bool:
        """True if `topic_id` was ever assigned in the entries applied so far."""
        return topic_id < self.next_topic_id

    # -- decisions (owner only) ------------------------------------------------

    def plan_create(
        self,
        name: str,
        partitions: int,
        config: dict[str, int | str] | None = None,
        replication_factor: int = 1,
        nodes: int = 1,
        placed_on: Placement = (),
    ) -> CreateTopic:
        """The entry that creates `name` with each partition on `replication_factor`
        of the cluster's `nodes` (`placed_on`: who they are, with their
        weights), or `MetadataError` saying why not."""
        check_topic_name(name)
        if not 1 <= replication_factor <= nodes:
            raise MetadataError(
                ErrorCode.INVALID_REQUEST,
                f"replication factor {replication_factor} is not possible: the cluster has "
                f"{nodes} node{'s' if nodes != 1 else ''}",
            )
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise MetadataError(
                ErrorCode.INVALID_REQUEST,
                f"a topic needs 1 to {MAX_PARTITIONS} partitions, got {partitions}",
            )
        if partitions > self.limits.max_topic_partitions:
            raise MetadataError(
                ErrorCode.INVALID_REQUEST,
                f"a topic has at most {self.limits.max_topic_partitions} partitions here "
                f"(--max-topic-partitions), got {partitions}",
            )
        checked = _checked_config(config or {})
        if name in self._by_name:
            raise MetadataError(ErrorCode.TOPIC_EXISTS, f"topic {name!r} already exists")
        if len(self._by_id) >= self.max_topics:
            raise MetadataError(
                ErrorCode.INVALID_REQUEST,
                f"the node holds its limit of {self.max_topics} topics (--max-topics); "
                "delete one first",
            )
        self._check_partition_room(partitions * replication_factor, nodes)
        if self.next_topic_id > MAX_TOPIC_ID:
            raise MetadataError(ErrorCode.INTERNAL, "every topic id has been used")
        return CreateTopic(
            name, self.next_topic_id, partitions, dict(checked), replication_factor, placed_on
        )

    def _check_partition_room(self, replicas: int, nodes: int) -> None:
        """Refuse a create whose `replicas` would take the node(s) past `max_partitions`."""
        held = sum(t.partitions * t.replication_factor for t in self._by_id.values())
        room = self.limits.max_partitions * nodes
        if held + replicas > room:
            where = "the node holds" if nodes == 1 else f"the {nodes} nodes hold"
            raise MetadataError(
                ErrorCode.INVALID_REQUEST,
                f"{where} {held} partition replicas and may hold {room} "
                f"(--max-partitions {self.limits.max_partitions} per node); "
                f"this topic needs {replicas} more: use fewer partitions or delete a topic",
            )

    def plan_alter(
        self, name: str, config: dict[str, int | str], remove: tuple[str, ...] = ()
    ) -> AlterTopic:
        """The entry that sets `config` and removes `remove` on topic `name`."""
        topic = self._by_name.get(name)
        if topic is None:
            raise MetadataError(ErrorCode.UNKNOWN_TOPIC, f"no topic named {name[:100]!r}")
        checked = _checked_config(config)
        try:
            check_removal(remove)
        except TopicConfigError as exc:
            raise MetadataError(ErrorCode.INVALID_REQUEST, str(exc)) from None
        merged = {k: v for k, v in topic.config.items() if k not in remove and type(v) is int}
        merged.update(checked)
        return AlterTopic(name, topic.topic_id, merged)

    def plan_decommission(
        self, node_id: str, cancel: bool, members: Collection[str], placed: Collection[str]
    ) -> Decommission:
        """The entry that decommissions `node_id` (or, `cancel`, keeps it), or
        `MetadataError` saying why not. `members`: every node membership knows
        (down ones too); `placed`: those placement may put replicas on now.
        Refused: a node nobody knows (a typo must not look done), and a
        decommission that would leave fewer placeable nodes than a topic's
        replication factor (its partitions would have nowhere to go).
        Repeating a decision is allowed (a retried request)."""
        if cancel or node_id in self.decommissioned:
            return Decommission(node_id, cancel)
        if node_id not in members:
            raise MetadataError(
                ErrorCode.INVALID_REQUEST,
                f"there is no node {node_id[:64]!r} in the cluster "
                f"(members: {', '.join(sorted(members)) or 'none'})",
            )
        rest = set(placed) - self.decommissioned - {node_id}
        short = [t for t in self.topics() if t.replication_factor > len(rest)]
        if short:
            topic = max(short, key=lambda t: t.replication_factor)
            raise MetadataError(
                ErrorCode.INVALID_REQUEST,
                f"decommissioning {node_id} would leave {len(rest)} node"
                f"{'s' if len(rest) != 1 else ''} for topic {topic.name!r} (replication "
                f"factor {topic.replication_factor}); add a node first",
            )
        return Decommission(node_id)

    def snapshot(self, at: int) -> Snapshot:
        """The entry that holds the whole state as it is now, to be appended at
        index `at` (applied there only: see the module docstring)."""
        placed = tuple(
            (topic_id, tuple(self._placed_on[topic_id].items()))
            for topic_id in sorted(self._placed_on)
        )
        return Snapshot(
            self.next_topic_id,
            self.topics(),
            at,
            placed,
            tuple(sorted(self.decommissioned)),
            self.security.snapshot_body(),
        )

    def needs_snapshot(self) -> bool:
        """True once the entries since the last snapshot outnumber twice the
        topics, users and ACLs (so a snapshot costs O(1) per entry, amortized)."""
        since = self.applied_index - (self.snapshot_index or 0)
        return since >= max(SNAPSHOT_MIN_ENTRIES, 2 * (len(self._by_id) + len(self.security)))

    def plan_delete(self, name: str) -> DeleteTopic:
        """The entry that deletes `name`, or `MetadataError` (UNKNOWN_TOPIC)."""
        topic = self._by_name.get(name)
        if topic is None:
            raise MetadataError(ErrorCode.UNKNOWN_TOPIC, f"no topic named {name[:100]!r}")
        return DeleteTopic(name, topic.topic_id)

    # -- applying (every shard) ------------------------------------------------

    def resync(self) -> None:
        """The next entry applied does not follow the last one (entries between
        were compacted away): skip entries until a snapshot restores the whole
        state. Until then the state stays as it was, stale but never wrong about
        what it says existed."""
        self.awaiting_snapshot = True

    def apply(self, index: int, entry: Entry) -> Applied:
        """Apply the entry at `index`, at or after `applied_index`: a replicated
        metadata log holds Raft's own entries (a leader's no-op) between
        metadata entries, and a compacted one starts at a snapshot."""
        if index < self.applied_index:
            raise ValueError(
                f"metadata entry {index} applied out of order (expected {self.applied_index})"
            )
        self.applied_index = index + 1
        if isinstance(entry, Snapshot):
            if entry.at is not None and entry.at != index:
                return Applied(index)  # not where it was planned: entries may be between
            self.awaiting_snapshot = False
            return self._restore(index, entry)
        if self.awaiting_snapshot:
            return Applied(index)
        if isinstance(entry, CreateTopic):
            self.next_topic_id = max(self.next_topic_id, entry.topic_id + 1)
            if entry.name in self._by_name or entry.topic_id in self._by_id:
                return Applied(index)
            if entry.topic_id == METADATA_TOPIC_ID or entry.partitions < 1:
                return Applied(index)
            topic = TopicInfo(
                entry.name,
                entry.topic_id,
                entry.partitions,
                dict(known_entries(entry.config)),
                max(1, entry.replication_factor),
            )
            self._by_name[topic.name] = topic
            self._by_id[topic.topic_id] = topic
            if entry.placed_on:
                self._placed_on[topic.topic_id] = dict(entry.placed_on)
            return Applied(index, created=(topic,))
        if isinstance(entry, DeleteTopic):
            found = self._by_id.get(entry.topic_id)
            if found is None or found.name != entry.name:
                return Applied(index)
            del self._by_id[found.topic_id]
            del self._by_name[found.name]
            self._placed_on.pop(found.topic_id, None)
            return Applied(index, deleted=(found,))
        if isinstance(entry, AlterTopic):
            found = self._by_id.get(entry.topic_id)
            if found is None or found.name != entry.name:
                return Applied(index)
            topic = TopicInfo(
                found.name,
                found.topic_id,
                found.partitions,
                dict(entry.config),
                found.replication_factor,
            )
            self._by_id[topic.topic_id] = self._by_name[topic.name] = topic
            return Applied(index, altered=(topic,))
        if not isinstance(entry, Decommission | UnknownEntry):
            self.security.apply(entry)
            return Applied(index)
        if isinstance(entry, Decommission):
            if entry.cancel:
                self.decommissioned -= {entry.node_id}
            else:
                self.decommissioned |= {entry.node_id}
        return Applied(index)

    def _restore(self, index: int, snap: Snapshot) -> Applied:
        old = self._by_id
        new = {t.topic_id: t for t in snap.topics if t.topic_id != METADATA_TOPIC_ID}
        self._by_id = new
        self._by_name = {t.name: t for t in new.values()}
        self._placed_on = {
            topic_id: dict(members) for topic_id, members in snap.placed_on if topic_id in new
        }
        self.next_topic_id = max(self.next_topic_id, snap.next_topic_id)
        self.decommissioned = frozenset(snap.decommissioned)
        self.security.restore(snap.security)
        self.snapshot_index = index
        return Applied(
            index,
            created=tuple(t for i, t in new.items() if i not in old),
            deleted=tuple(t for i, t in old.items() if i not in new),
            altered=tuple(t for i, t in new.items() if i in old and old[i].config != t.config),
            snapshot=snap,
        )

    def apply_value(self, index: int, value: bytes) -> Applied:
        return self.apply(index, decode_entry(value))
