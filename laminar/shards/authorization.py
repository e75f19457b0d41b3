"""Which ACL every laminar-door request needs, and the check a shard runs
before serving one. The decision table is data; nothing here does I/O.

Rules, and why:

- `NEEDS` maps each client op to the (operation, resource) pairs its decoded
  request needs, all of them, Kafka's choices where Kafka has the same
  request: a produce and a stage need WRITE on the partition's topic (the
  topic id is `pid >> 32`, named by the applied metadata), a fetch READ, a
  list-offsets DESCRIBE; a topic's create needs CREATE on the topic or on the
  cluster, its delete DELETE, its alter ALTER; a node's decommission ALTER on
  the cluster. An atomic commit or abort needs WRITE on every topic it names
  (a status names none: ownership, `laminar.writes.decisions`, guards it).
  Group ops need READ on the group (a heartbeat also DESCRIBE on each
  subscribed topic, a commit READ on each committed topic), finding a
  coordinator, reading positions and describing a group DESCRIBE, a reset
  READ on the group and each topic
  (DELETE on the group when it forgets positions), a group's delete DELETE.
  Users and ACLs (USERS, ACLS) need ALTER on the cluster to change and
  DESCRIBE to list. PING and AUTHENTICATE need nothing. METADATA,
  LIST_TOPICS and GROUP_LIST need nothing either: their answers list only the
  topics (`Authorizer.visible`) and groups (`Authorizer.lists_group`: DESCRIBE
  on the group or on the cluster, as Kafka's ListGroups) the principal may
  describe.
- An op missing from the table is refused (fail closed): a new op must be
  given its row before any client can use it.
- Internal traffic (sibling channels, peer sessions, the shard's own
  requests) is never checked: it carries no client
  (`RequestContext.from_client`). A
  client's frame forwarded to the owning shard carries the client's id and
  principal, and the owner checks it: a forwarded client frame without a
  principal is refused, not waved through.
- Decisions come from `AclSet.authorize`, cached per (principal, operation,
  resource) and invalidated by the ACL generation; a partition op's is
  cached again per (principal, op, topic id) (`Authorizer.allows_partition`),
  so a produce or fetch costs one dict hit, no metadata read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final, NamedTuple

from laminar.groups.frames import GroupMessage
from laminar.replication.metadata import MetadataState
from laminar.security.acls import CLUSTER, Operation, Resource, ResourceType
from laminar.security.frames import AclAction, UserAction
from laminar.security.ownership import Requester
from laminar.wire import ErrorCode, Op, TopicInfo
from laminar.wire.errors import RequestError
from laminar.wire.writes import StagedPart

_READ: Final = Operation.READ
_WRITE: Final = Operation.WRITE
_DESCRIBE: Final = Operation.DESCRIBE
_TOPIC: Final = ResourceType.TOPIC
_GROUP: Final = ResourceType.GROUP


class Need(NamedTuple):
    """One permission a request needs; `or_cluster`: the same operation on the
    cluster will do instead (a topic's creation, as in Kafka)."""

    operation: Operation
    resource: Resource
    or_cluster: bool = False


class UnresolvedTopic(Exception):
    """The request names a topic id this shard's metadata has not applied: the
    caller resolves it (waiting for the metadata) and asks again."""

    def __init__(self, partition_id: int) -> None:
        super().__init__(f"topic id {partition_id >> 32} is not applied here yet")
        self.partition_id = partition_id


NameOf = Callable[[int], str | None]
"""A topic id's name in the applied metadata (None: not applied)."""
Needs = Callable[[Any, NameOf], tuple[Need, ...]]


def _topic(pid: int, name_of: NameOf) -> Resource:
    """The topic of partition `pid`."""
    name = name_of(pid >> 32)
    if name is None:
        raise UnresolvedTopic(pid)
    return Resource(_TOPIC, name)


def _on_partition(operation: Operation) -> Needs:
    return lambda req, name_of: (Need(operation, _topic(req.partition_id, name_of)),)


def _on_named_topic(operation: Operation, or_cluster: bool = False) -> Needs:
    return lambda req, _: (Need(operation, Resource(_TOPIC, req.name), or_cluster),)


def _on_cluster(operation: Operation) -> Needs:
    return lambda req, _: (Need(operation, CLUSTER),)


def _nothing(req: Any, name_of: NameOf) -> tuple[Need, ...]:
    return ()


def _parts(operation: Operation, parts: Iterable[StagedPart], name_of: NameOf) -> list[Need]:
    """`operation` on each topic the parts are staged in (one partition id each)."""
    firsts = {part.partition_id >> 32: part.partition_id for part in parts}
    return [Need(operation, _topic(pid, name_of)) for pid in firsts.values()]


def _commit_write(req: Any, name_of: NameOf) -> tuple[Need, ...]:
    return tuple(_parts(_WRITE, req.parts, name_of))


def _on_topics(operation: Operation, names: Iterable[str]) -> list[Need]:
    return [Need(operation, Resource(_TOPIC, name)) for name in dict.fromkeys(names)]


def _group(operation: Operation, group: str) -> Need:
    return Need(operation, Resource(_GROUP, group))


def _find_coordinator(req: Any, _: NameOf) -> tuple[Need, ...]:
    return (_group(_DESCRIBE, req.group),)


def _heartbeat(req: GroupMessage, _: NameOf) -> tuple[Need, ...]:
    body = req.body
    return (_group(_READ, body.group), *_on_topics(_DESCRIBE, body.topics))


def _group_commit(req: GroupMessage, _: NameOf) -> tuple[Need, ...]:
    body = req.body
    return (_group(_READ, body.group), *_on_topics(_READ, (t for t, _ in body.positions)))


def _positions(req: GroupMessage, _: NameOf) -> tuple[Need, ...]:
    body = req.body
    named = () if body.partitions is None else (t for t, _ in body.partitions)
    return (_group(_DESCRIBE, body.group), *_on_topics(_DESCRIBE, named))


def _describe_group(req: GroupMessage, _: NameOf) -> tuple[Need, ...]:
    return (_group(_DESCRIBE, req.body),)


def _reset(req: GroupMessage, _: NameOf) -> tuple[Need, ...]:
    body = req.body
    forgets = any(index is None for index in body.positions.values())
    needs = [_group(_READ, body.group), *_on_topics(_READ, (t for t, _ in body.positions))]
    if forgets:
        needs.append(_group(Operation.DELETE, body.group))
    return tuple(needs)


def _delete_group(req: GroupMessage, _: NameOf) -> tuple[Need, ...]:
    return (_group(Operation.DELETE, req.body),)


def _admin(req: Any, _: NameOf) -> tuple[Need, ...]:
    """Users and ACLs: listing them describes the cluster, changing them alters it."""
    listing = req.action in (UserAction.LIST, AclAction.LIST)
    return (Need(_DESCRIBE if listing else Operation.ALTER, CLUSTER),)


def _internal(req: Any, _: NameOf) -> tuple[Need, ...]:
    raise RequestError(ErrorCode.NOT_AUTHORIZED, "an internal op is not a client's to send")


PARTITION_OPS: Final[dict[int, Operation]] = {
    Op.PRODUCE: _WRITE,
    Op.FETCH: _READ,
    Op.LIST_OFFSETS: _DESCRIBE,
    Op.STAGE: _WRITE,
}
"""The ops that need one operation on their partition's topic (decided per
topic id, `Authorizer.allows_partition`)."""

NEEDS: Final[dict[int, Needs]] = {
    **{op: _on_partition(operation) for op, operation in PARTITION_OPS.items()},
    Op.METADATA: _nothing,  # the answer lists only what the principal may describe
    Op.LIST_TOPICS: _nothing,  # likewise
    Op.CREATE_TOPIC: _on_named_topic(Operation.CREATE, or_cluster=True),
    Op.DELETE_TOPIC: _on_named_topic(Operation.DELETE),
    Op.ALTER_TOPIC: _on_named_topic(Operation.ALTER),
    Op.DECOMMISSION_NODE: _on_cluster(Operation.ALTER),
    Op.PING: _nothing,
    Op.COMMIT_WRITE: _commit_write,
    Op.ABORT_WRITE: _commit_write,  # its parts' topics (none for a final abort)
    Op.WRITE_STATUS: _nothing,  # ownership of the commit id decides
    Op.CHECK_STAGED: _internal,
    Op.PUBLISH_STAGED: _internal,
    Op.DROP_STAGED: _internal,
    Op.APPEND_STAGED: _internal,
    Op.FIND_COORDINATOR: _find_coordinator,
    Op.GROUP_HEARTBEAT: _heartbeat,
    Op.GROUP_COMMIT: _group_commit,
    Op.GROUP_POSITIONS: _positions,
    Op.GROUP_DESCRIBE: _describe_group,
    Op.GROUP_LIST: _nothing,  # the answer lists only what the principal may describe
    Op.GROUP_RESET: _reset,
    Op.GROUP_DELETE: _delete_group,
    Op.AUTHENTICATE: _nothing,
    Op.USERS: _admin,
    Op.ACLS: _admin,
}
"""What each client op needs (the module docstring says why)."""

_NEED_NOTHING: Final = frozenset(op for op, needs in NEEDS.items() if needs is _nothing)


def refusal(principal: str | None, need: Need) -> RequestError:
    """The NOT_AUTHORIZED answer naming what was missing."""
    who = principal or "a client that has not logged in"
    kind, name = need.resource
    return RequestError(
        ErrorCode.NOT_AUTHORIZED,
        f"{who} may not {need.operation.value} {kind.value} {name!r}; nothing was applied "
        "(an ACL must allow it: laminar acl add)",
    )


DECISIONS_MAX: Final = 100_000
"""Per-topic-id decisions kept (`Authorizer.allows_partition`); past it, all go."""
VISIBLE_MAX: Final = 64
"""Principals whose visible topic list is kept (each holds two tuples as long
as the topic list, 16 bytes a topic: cleared when full, so at most 10 MiB
with `--max-topics` 10,000)."""


class Authorizer:
    """The shard's ACL checks, over its applied metadata (users, ACLs, topic names).

    Partition ops are decided per (principal, op, topic id) in a dict of plain
    keys, dropped whenever the ACL generation moves: a produce or fetch costs
    one lookup, no topic-name read. Topic ids are never reused, so a decision
    for an id cannot outlive its topic's name (a deleted topic's requests fail
    on their own)."""

    __slots__ = ("_acls", "_decisions", "_generation", "_state", "_visible")

    def __init__(self, state: MetadataState) -> None:
        self._state = state
        self._acls = state.security.acls
        self._decisions: dict[tuple[str | None, int, int], bool] = {}
        self._visible: dict[str | None, tuple[tuple[TopicInfo, ...], tuple[TopicInfo, ...]]] = {}
        """Per principal: the topics last filtered and what it may see of them."""
        self._generation = -1

    def _name_of(self, topic_id: int) -> str | None:
        topic = self._state.by_id(topic_id)
        return None if topic is None else topic.name

    def check(self, op: int, request: Any, principal: str | None) -> None:
        """Raise NOT_AUTHORIZED (a `RequestError`) unless `principal` may send
        `request`; `UnresolvedTopic` when a topic id must be resolved first."""
        if op in PARTITION_OPS:
            pid = request.partition_id
            allowed = self.allows_partition(principal, op, pid)
            if allowed is None:
                raise UnresolvedTopic(pid)
            if not allowed:
                raise refusal(principal, NEEDS[op](request, self._name_of)[0])
            return
        if op in _NEED_NOTHING:
            return
        needs = NEEDS.get(op)
        if needs is None:
            raise RequestError(ErrorCode.NOT_AUTHORIZED, f"op {op} has no ACL rule")
        for need in needs(request, self._name_of):
            if not self.allows(principal, need):
                raise refusal(principal, need)

    def allows(self, principal: str | None, need: Need) -> bool:
        if principal is None:
            return False
        authorize = self._acls.authorize
        if authorize(principal, need.operation, need.resource):
            return True
        return need.or_cluster and authorize(principal, need.operation, CLUSTER)

    def allows_partition(self, principal: str | None, op: int, pid: int) -> bool | None:
        """May `principal` send partition op `op` (one of `PARTITION_OPS`) to
        `pid`? None when the topic is not applied here (the caller resolves it,
        or leaves the request to the general path)."""
        acls = self._acls
        if acls.generation != self._generation:
            self._forget()
        key = (principal, op, pid >> 32)
        decision = self._decisions.get(key)
        if decision is not None:
            return decision
        topic = self._state.by_id(pid >> 32)
        if topic is None:
            return None
        decision = principal is not None and acls.authorize(
            principal, PARTITION_OPS[op], Resource(_TOPIC, topic.name)
        )
        if len(self._decisions) >= DECISIONS_MAX:
            self._decisions.clear()
        self._decisions[key] = decision
        return decision

    def lists_group(self, requester: Requester, group: str) -> bool:
        """Does a group list answer to `requester` show `group`? (A node's own
        request sees every group.)"""
        if not requester.from_client:
            return True
        return self.allows(requester.principal, _group(_DESCRIBE, group)._replace(or_cluster=True))

    def visible(
        self, principal: str | None, topics: tuple[TopicInfo, ...]
    ) -> tuple[TopicInfo, ...]:
        """The topics `principal` may describe (what a metadata answer lists):
        those whose offsets it may list, decided per topic id; the answer is
        kept per principal until the topics or the ACLs change (clients ask
        again and again, the topics rarely change)."""
        if self._acls.generation != self._generation:
            self._forget()
        kept = self._visible.get(principal)
        if kept is not None and kept[0] == topics:  # the same TopicInfo objects: C speed
            return kept[1]
        allows = self.allows_partition
        seen = tuple(t for t in topics if allows(principal, Op.LIST_OFFSETS, t.topic_id << 32))
        if len(self._visible) >= VISIBLE_MAX:
            self._visible.clear()
        self._visible[principal] = (topics, seen)
        return seen

    def _forget(self) -> None:
        """The ACLs moved: every decision kept goes."""
        self._decisions.clear()
        self._visible.clear()
        self._generation = self._acls.generation
