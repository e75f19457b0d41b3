"""Access control lists, Kafka's model, and the decision every request asks
for: a state machine applied from metadata log entries, with no I/O.

The model (Kafka's `StandardAuthorizer`, which AclAuthorizer matched):

- An ACL is (principal, resource type, pattern, resource name, operation,
  permission). The principal is `User:<name>` or `User:*` (anyone). Resource
  types are topic, group and cluster (the cluster's one name is
  `kafka-cluster`, as Kafka's admin tools send it). A literal pattern matches
  its name exactly, and the literal name `*` matches every name of its type;
  a prefixed pattern matches every name starting with it.
- `authorize(principal, operation, resource)`: a superuser may do anything;
  otherwise any matching DENY refuses, whatever ALLOWs match; otherwise a
  matching ALLOW grants; no match refuses (Kafka's
  `allow.everyone.if.no.acl.found=false`).
- An ACL of operation `all` matches every operation. An ALLOW of read, write,
  delete or alter also allows describe (seeing a topic you may use); a DENY
  denies its own operation only (a DENY of read does not hide the topic).
  The other implication Kafka has (alter_configs gives describe_configs)
  has no operation here yet.
- Hosts are not part of an ACL: laminar sees clients through proxies and NAT
  as often as not, and Kafka's host field is almost always `*`.

Applying follows the topic metadata (`laminar.replication.metadata`): only the
metadata leader plans (`plan_add`, `plan_remove`, or `SecurityRefusal`), every
node applies the same entries in order, and applying never fails. Entries
are msgpack maps `{"op": "acl_add" | "acl_remove", "acls": [[principal,
type, pattern, name, operation, permission], ...]}`.

Decisions are cached per (principal, operation, resource), so a request costs
a dict lookup and never a metadata read. Every change (an entry that changed
the set, a restore, a new superuser set) bumps `generation`; a cached decision
is used only if it was made at the current generation, so no decision older
than the last change is ever returned. The cache holds at most `cache_max`
decisions (the oldest go first).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, Literal, NamedTuple

from laminar.security.entries import pack, unpack
from laminar.security.errors import Refusal, SecurityRefusal
from laminar.security.principal import WILDCARD_PRINCIPAL, PrincipalError, check_acl_principal

CLUSTER_NAME: Final = "kafka-cluster"
ANY_NAME: Final = "*"
RESOURCE_NAME_MAX: Final = 255
ACLS_PER_CHANGE_MAX: Final = 1000
ACL_OPS: Final = frozenset({"acl_add", "acl_remove"})
"""The `op` values of this module's entries (the metadata decoder routes them here)."""


class ResourceType(StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    CLUSTER = "cluster"


class PatternType(StrEnum):
    LITERAL = "literal"
    PREFIXED = "prefixed"


class Operation(StrEnum):
    READ = "read"
    WRITE = "write"
    CREATE = "create"
    DELETE = "delete"
    ALTER = "alter"
    DESCRIBE = "describe"
    ALL = "all"
    """In an ACL only: every operation."""


class Permission(StrEnum):
    ALLOW = "allow"
    DENY = "deny"


_ALL: Final = Operation.ALL
_DESCRIBE: Final = Operation.DESCRIBE
_DENY: Final = Permission.DENY
# (Module constants: reading `Operation.ALL` goes through the enum's metaclass,
# which costs more than the cached decision itself.)

IMPLIES_DESCRIBE: Final = frozenset(
    {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
)
"""Operations whose ALLOW also allows describe (Kafka's rule)."""


class Resource(NamedTuple):
    """What a request acts on: one named topic, group, or the cluster. (A
    NamedTuple of StrEnum and str: the decision cache hashes it in C, several
    times faster than a frozen dataclass, measured 0.2 against 1.0 us.)"""

    type: ResourceType
    name: str


CLUSTER: Final = Resource(ResourceType.CLUSTER, CLUSTER_NAME)


@dataclass(frozen=True, slots=True)
class Acl:
    """One rule: `permission` for `principal` to do `operation` on the
    resources of `resource_type` that `pattern` and `name` select."""

    principal: str
    resource_type: ResourceType
    pattern: PatternType
    name: str
    operation: Operation
    permission: Permission

    def to_wire(self) -> list[str]:
        return [
            self.principal,
            self.resource_type.value,
            self.pattern.value,
            self.name,
            self.operation.value,
            self.permission.value,
        ]

    @classmethod
    def from_wire(cls, item: object) -> Acl:
        """An ACL from `to_wire`'s list; ValueError/TypeError if it is not one."""
        if type(item) is not list or len(item) != 6 or any(type(v) is not str for v in item):
            raise TypeError
        principal, resource_type, pattern, name, operation, permission = item
        return cls(
            principal,
            ResourceType(resource_type),
            PatternType(pattern),
            name,
            Operation(operation),
            Permission(permission),
        )

    def sort_key(self) -> tuple[str, ...]:
        return tuple(self.to_wire())


def check_acl(acl: Acl) -> None:
    """Raise `SecurityRefusal` unless `acl` can be stored."""
    try:
        check_acl_principal(acl.principal)
    except PrincipalError as exc:
        raise SecurityRefusal(Refusal.INVALID, str(exc)) from None
    if not 0 < len(acl.name) <= RESOURCE_NAME_MAX or not acl.name.isprintable():
        raise SecurityRefusal(
            Refusal.INVALID,
            f"a resource name has 1-{RESOURCE_NAME_MAX} printable characters, "
            f"got {acl.name[:60]!r}",
        )
    if acl.resource_type is ResourceType.CLUSTER and acl.name != CLUSTER_NAME:
        raise SecurityRefusal(
            Refusal.INVALID, f"the only valid name for the cluster resource is {CLUSTER_NAME}"
        )


MATCH: Final = "match"
"""An `AclFilter.pattern` that selects the ACLs that apply to a resource named
`name`: literal ones of that name or `*`, and prefixed ones it starts with."""


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Which ACLs to list or delete, as Kafka's DescribeAcls and DeleteAcls
    filter them: a field left None matches anything; principals and names
    compare exactly (`User:*` selects only the ACLs written for anyone)."""

    principal: str | None = None
    resource_type: ResourceType | None = None
    pattern: PatternType | Literal["match"] | None = None
    name: str | None = None
    operation: Operation | None = None
    permission: Permission | None = None

    def matches(self, acl: Acl) -> bool:
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.resource_type is not None and acl.resource_type is not self.resource_type:
            return False
        if self.operation is not None and acl.operation is not self.operation:
            return False
        if self.permission is not None and acl.permission is not self.permission:
            return False
        if self.pattern == MATCH:
            return self.name is None or _applies_to(acl, self.name)
        if self.pattern is not None and acl.pattern is not self.pattern:
            return False
        return self.name is None or acl.name == self.name


def _applies_to(acl: Acl, name: str) -> bool:
    """Does `acl`'s pattern match a resource named `name`?"""
    if acl.pattern is PatternType.PREFIXED:
        return name.startswith(acl.name)
    return acl.name == name or acl.name == ANY_NAME


@dataclass(frozen=True, slots=True)
class AddAcls:
    acls: tuple[Acl, ...]


@dataclass(frozen=True, slots=True)
class RemoveAcls:
    acls: tuple[Acl, ...]


AclEntry = AddAcls | RemoveAcls

_Key = tuple[ResourceType, PatternType, str]


class AclSet:
    """The ACLs as of the entries applied so far, and the decisions they give."""

    def __init__(self, max_acls: int = 10_000, cache_max: int = 100_000) -> None:
        self.max_acls = max_acls
        self.cache_max = cache_max
        self.generation = 0
        """Bumped by every change; a cached decision from an older one is not used."""
        self._by_pattern: dict[_Key, set[Acl]] = {}
        self._count = 0
        self._superusers: frozenset[str] = frozenset()
        self._cache: dict[tuple[str, Operation, Resource], tuple[int, bool]] = {}

    # -- decisions ------------------------------------------------------------------

    def authorize(self, principal: str, operation: Operation, resource: Resource) -> bool:
        """May `principal` do `operation` on `resource`? (See the module docstring.)"""
        if operation is _ALL:
            raise ValueError("a request asks for one operation, not 'all'")
        key = (principal, operation, resource)
        cached = self._cache.get(key)
        if cached is not None and cached[0] == self.generation:
            return cached[1]
        decision = self._decide(principal, operation, resource)
        if key not in self._cache and len(self._cache) >= self.cache_max:
            del self._cache[next(iter(self._cache))]
        self._cache[key] = (self.generation, decision)
        return decision

    def _decide(self, principal: str, operation: Operation, resource: Resource) -> bool:
        if principal in self._superusers:
            return True
        allowed = False
        for acl in self._matching(resource):
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.permission is _DENY:
                if acl.operation is _ALL or acl.operation is operation:
                    return False
            elif (
                acl.operation is _ALL
                or acl.operation is operation
                or (operation is _DESCRIBE and acl.operation in IMPLIES_DESCRIBE)
            ):
                allowed = True
        return allowed

    def _matching(self, resource: Resource) -> Iterator[Acl]:
        """The ACLs whose pattern matches `resource`."""
        kind, name = resource.type, resource.name
        yield from self._by_pattern.get((kind, PatternType.LITERAL, name), ())
        if name != ANY_NAME:
            yield from self._by_pattern.get((kind, PatternType.LITERAL, ANY_NAME), ())
        for end in range(1, len(name) + 1):
            yield from self._by_pattern.get((kind, PatternType.PREFIXED, name[:end]), ())

    # -- queries -----------------------------------------------------------------

    def acls(self) -> tuple[Acl, ...]:
        """Every ACL, in a stable order (also what a snapshot stores)."""
        every = (acl for group in self._by_pattern.values() for acl in group)
        return tuple(sorted(every, key=Acl.sort_key))

    def select(self, wanted: AclFilter) -> tuple[Acl, ...]:
        """The ACLs `wanted` matches, in `acls()` order (DescribeAcls; DeleteAcls
        plans the removal of these)."""
        return tuple(acl for acl in self.acls() if wanted.matches(acl))

    def __len__(self) -> int:
        return self._count

    def __contains__(self, acl: object) -> bool:
        if not isinstance(acl, Acl):
            return False
        return acl in self._by_pattern.get((acl.resource_type, acl.pattern, acl.name), ())

    # -- decisions (metadata leader only) --------------------------------------

    def plan_add(self, acls: Iterable[Acl]) -> AddAcls:
        """The entry that adds `acls` (those already there are left out: adding
        one twice is not an error, as in Kafka)."""
        new = self._checked(acls, present=False)
        if self._count + len(new) > self.max_acls:
            raise SecurityRefusal(
                Refusal.LIMIT,
                f"the cluster holds {self._count} ACLs and may hold {self.max_acls}; "
                f"{len(new)} more do not fit",
            )
        return AddAcls(new)

    def plan_remove(self, acls: Iterable[Acl]) -> RemoveAcls:
        """The entry that removes those of `acls` that are there."""
        return RemoveAcls(self._checked(acls, present=True))

    def _checked(self, acls: Iterable[Acl], *, present: bool) -> tuple[Acl, ...]:
        given = list(acls)
        if len(given) > ACLS_PER_CHANGE_MAX:
            raise SecurityRefusal(
                Refusal.LIMIT, f"at most {ACLS_PER_CHANGE_MAX} ACLs in one change"
            )
        for acl in given:
            check_acl(acl)
        return tuple(acl for acl in dict.fromkeys(given) if (acl in self) is present)

    # -- applying (every node) ------------------------------------------------------

    def apply(self, entry: AclEntry) -> bool:
        """Apply one entry; True if it changed the set."""
        changed = False
        for acl in entry.acls:
            changed |= self._add(acl) if isinstance(entry, AddAcls) else self._remove(acl)
        if changed:
            self.generation += 1
        return changed

    def _add(self, acl: Acl) -> bool:
        if self._count >= self.max_acls or acl in self:
            return False
        self._by_pattern.setdefault((acl.resource_type, acl.pattern, acl.name), set()).add(acl)
        self._count += 1
        return True

    def _remove(self, acl: Acl) -> bool:
        key = (acl.resource_type, acl.pattern, acl.name)
        group = self._by_pattern.get(key)
        if group is None or acl not in group:
            return False
        group.discard(acl)
        if not group:
            del self._by_pattern[key]
        self._count -= 1
        return True

    def restore(self, acls: Iterable[Acl]) -> None:
        """Replace the whole set with a snapshot's ACLs."""
        self._by_pattern = {}
        self._count = 0
        for acl in acls:
            self._add(acl)
        self.generation += 1

    def set_superusers(self, principals: Iterable[str]) -> None:
        """The principals allowed everything (the users flagged superuser)."""
        superusers = frozenset(principals)
        if superusers != self._superusers:
            self._superusers = superusers
            self.generation += 1


def encode_entry(entry: AclEntry) -> bytes:
    op = "acl_add" if isinstance(entry, AddAcls) else "acl_remove"
    body = {"op": op, "acls": [acl.to_wire() for acl in entry.acls]}
    return pack(body)


def decode_entry(value: bytes) -> AclEntry | None:
    """The entry in `value`, or None if it is not a valid ACL entry."""
    return decode_body(unpack(value))


def decode_body(body: Any) -> AclEntry | None:
    """An ACL entry from its unpacked msgpack body, or None."""
    if type(body) is not dict or type(body.get("acls")) is not list:
        return None
    try:
        acls = tuple(Acl.from_wire(item) for item in body["acls"])
        for acl in acls:
            check_acl(acl)
    except (TypeError, ValueError, SecurityRefusal):
        return None
    if body.get("op") == "acl_add":
        return AddAcls(acls)
    if body.get("op") == "acl_remove":
        return RemoveAcls(acls)
    return None
