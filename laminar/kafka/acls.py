"""Kafka's ACL and SCRAM-user codes mapped onto `laminar.security`, sans I/O.

Kafka numbers what laminar names (`AclOperation`, `ResourceType`,
`PatternType`, `AclPermissionType` and `ScramMechanism` in apache/kafka's
clients): this module turns CreateAcls creations into `Acl`s, DescribeAcls
and DeleteAcls filters into `AclFilter`s, `Acl`s back into Kafka's fields,
and AlterUserScramCredentials upsertions into `ScramCredential`s.

What laminar does not model is refused, never mapped onto something close:
- resource types other than topic, group and cluster (transactional ids,
  delegation tokens, users), and operations other than read, write, create,
  delete, alter, describe and all (cluster_action, describe_configs,
  alter_configs, idempotent_write, the token operations): a creation of one
  answers INVALID_REQUEST saying so, as Kafka answers an ACL it cannot
  store; a filter naming one matches nothing (there is none to match);
- hosts: laminar's ACLs hold for every host (`laminar.security.acls`), so a
  creation must say `*`, and a filter's host is `*` or null.
The UNKNOWN and ANY codes are refused in a creation (INVALID_REQUEST) and
in a filter UNKNOWN is (ANY matches everything), as Kafka does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from laminar.kafka import messages as m
from laminar.kafka.errors import ErrorCode, KafkaError
from laminar.security.acls import (
    MATCH,
    Acl,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    check_acl,
)
from laminar.security.errors import SecurityRefusal
from laminar.security.scram import Mechanism, ScramCredential, credential_from_salted_password

ANY: Final = 1
"""The code that matches every value in a filter (all of Kafka's enums)."""
ANY_HOST: Final = "*"

RESOURCE_TYPES: Final = {2: ResourceType.TOPIC, 3: ResourceType.GROUP, 4: ResourceType.CLUSTER}
OPERATIONS: Final = {
    2: Operation.ALL,
    3: Operation.READ,
    4: Operation.WRITE,
    5: Operation.CREATE,
    6: Operation.DELETE,
    7: Operation.ALTER,
    8: Operation.DESCRIBE,
}
PERMISSIONS: Final = {2: Permission.DENY, 3: Permission.ALLOW}
PATTERNS: Final = {3: PatternType.LITERAL, 4: PatternType.PREFIXED}
MATCH_CODE: Final = 2
MECHANISMS: Final = {1: Mechanism.SCRAM_SHA_256, 2: Mechanism.SCRAM_SHA_512}
"""Kafka's ScramMechanism codes."""
_CODES: Final[dict[object, int]] = {
    value: code
    for table in (RESOURCE_TYPES, OPERATIONS, PERMISSIONS, PATTERNS, MECHANISMS)
    for code, value in table.items()
}

_KIND_NAMES: Final = {
    5: "transactional_id",
    6: "delegation_token",
    7: "user",
}
_OPERATION_NAMES: Final = {
    9: "cluster_action",
    10: "describe_configs",
    11: "alter_configs",
    12: "idempotent_write",
    13: "create_tokens",
    14: "describe_tokens",
}


def code_of(value: object) -> int:
    """Kafka's code for a laminar resource type, operation, permission,
    pattern or mechanism."""
    return _CODES[value]


def _pick(table: dict[int, Any], code: int, what: str, names: dict[int, str]) -> Any:
    value = table.get(code)
    if value is None:
        name = names.get(code)
        detail = f"{what} {name} is not modeled by laminar" if name else f"{what} code {code}"
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"cannot store an ACL with {detail}")
    return value


def acl_of(creation: m.CreateAclsRequest.AclCreation) -> Acl:
    """The ACL a CreateAcls creation asks for; KafkaError INVALID_REQUEST if
    laminar cannot store it (see the module docstring) or it is not valid (a
    principal that is not `User:<name>`, a name too long, another name for
    the cluster than `kafka-cluster`)."""
    if creation.host != ANY_HOST:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"laminar's ACLs hold for every host: use host '*', not {creation.host[:60]!r}",
        )
    acl = Acl(
        creation.principal,
        _pick(RESOURCE_TYPES, creation.resource_type, "resource type", _KIND_NAMES),
        _pick(PATTERNS, creation.resource_pattern_type, "pattern type", {}),
        creation.resource_name,
        _pick(OPERATIONS, creation.operation, "operation", _OPERATION_NAMES),
        _pick(PERMISSIONS, creation.permission_type, "permission", {}),
    )
    try:
        check_acl(acl)  # here, so one bad ACL does not fail the others sent with it
    except SecurityRefusal as exc:
        raise KafkaError(ErrorCode.INVALID_REQUEST, exc.message) from None
    return acl


@dataclass(frozen=True, slots=True)
class FilterFields:
    """The fields DescribeAcls and DeleteAcls filters share."""

    resource_type: int
    name: str | None
    pattern: int
    principal: str | None
    host: str | None
    operation: int
    permission: int


def filter_fields(request: Any) -> FilterFields:
    """The filter of a DescribeAclsRequest or a DeleteAclsFilter."""
    return FilterFields(
        request.resource_type_filter,
        request.resource_name_filter,
        request.pattern_type_filter,
        request.principal_filter,
        request.host_filter,
        request.operation,
        request.permission_type,
    )


_UNMODELED: Final = object()


def _field(code: int, table: dict[int, Any]) -> Any:
    """A filter field's laminar value: None for ANY, `_UNMODELED` for a code
    laminar has no value for."""
    return None if code == ANY else table.get(code, _UNMODELED)


def filter_of(wanted: FilterFields) -> AclFilter | None:
    """The laminar filter that selects what `wanted` does; None if it can match
    no ACL laminar holds (a type, operation or host laminar does not model);
    KafkaError INVALID_REQUEST for an UNKNOWN code."""
    codes = (wanted.resource_type, wanted.pattern, wanted.operation, wanted.permission)
    if 0 in codes:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "a filter cannot name UNKNOWN")
    if wanted.host not in (None, ANY_HOST):
        return None
    resource_type = _field(wanted.resource_type, RESOURCE_TYPES)
    operation = _field(wanted.operation, OPERATIONS)
    permission = _field(wanted.permission, PERMISSIONS)
    if _UNMODELED in (resource_type, operation, permission):
        return None
    if wanted.pattern == ANY:
        pattern: PatternType | str | None = None
    elif wanted.pattern == MATCH_CODE:
        pattern = MATCH
    elif wanted.pattern in PATTERNS:
        pattern = PATTERNS[wanted.pattern]
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"pattern type code {wanted.pattern}")
    return AclFilter(
        wanted.principal,
        resource_type,
        pattern,  # type: ignore[arg-type]  # a PatternType or MATCH
        wanted.name,
        operation,
        permission,
    )


def described(acls: tuple[Acl, ...]) -> list[m.DescribeAclsResponse.DescribeAclsResource]:
    """DescribeAcls' resources: the ACLs grouped by resource pattern."""
    resource = m.DescribeAclsResponse.DescribeAclsResource
    groups: dict[tuple[ResourceType, str, PatternType], Any] = {}
    for acl in acls:
        key = (acl.resource_type, acl.name, acl.pattern)
        group = groups.get(key)
        if group is None:
            group = groups[key] = resource(
                resource_type=code_of(acl.resource_type),
                resource_name=acl.name,
                pattern_type=code_of(acl.pattern),
            )
        group.acls.append(
            resource.AclDescription(
                principal=acl.principal,
                host=ANY_HOST,
                operation=code_of(acl.operation),
                permission_type=code_of(acl.permission),
            )
        )
    return list(groups.values())


def deleted(acl: Acl) -> m.DeleteAclsResponse.DeleteAclsFilterResult.DeleteAclsMatchingAcl:
    """One ACL a DeleteAcls filter removed, in Kafka's fields."""
    return m.DeleteAclsResponse.DeleteAclsFilterResult.DeleteAclsMatchingAcl(
        error_message=None,
        resource_type=code_of(acl.resource_type),
        resource_name=acl.name,
        pattern_type=code_of(acl.pattern),
        principal=acl.principal,
        host=ANY_HOST,
        operation=code_of(acl.operation),
        permission_type=code_of(acl.permission),
    )


def upserted_credential(
    upsertion: m.AlterUserScramCredentialsRequest.ScramCredentialUpsertion,
) -> ScramCredential:
    """The credential an upsertion's salted password makes (the salted
    password itself is not kept); KafkaError UNSUPPORTED_SASL_MECHANISM or
    UNACCEPTABLE_CREDENTIAL (iterations, salt or key sizes out of bounds)."""
    mechanism = MECHANISMS.get(upsertion.mechanism)
    if mechanism is None:
        raise KafkaError(
            ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"SCRAM mechanism code {upsertion.mechanism}"
        )
    try:
        return credential_from_salted_password(
            mechanism, bytes(upsertion.salt), upsertion.iterations, bytes(upsertion.salted_password)
        )
    except ValueError as exc:
        raise KafkaError(ErrorCode.UNACCEPTABLE_CREDENTIAL, str(exc)) from None
