"""Kafka's ACL and SCRAM codes onto laminar.security (`laminar.kafka.acls`):
the codes against kafka-python's enums, what is refused rather than mapped,
and credentials made from a client-salted password."""

from __future__ import annotations

import hashlib

import pytest
from kafka.admin import (
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourceType,
    ScramMechanism,
)

from laminar.kafka import acls
from laminar.kafka import messages as m
from laminar.kafka.errors import ErrorCode, KafkaError
from laminar.security.acls import (
    MATCH,
    Acl,
    AclFilter,
    Operation,
    PatternType,
    Permission,
)
from laminar.security.acls import ResourceType as Kind
from laminar.security.scram import Mechanism, make_credential
from laminar.shards.kafka_door import coordinator_error, kafka_error
from laminar.wire import ErrorCode as WireCode
from laminar.wire.errors import RequestError


def test_the_codes_are_kafka_s() -> None:
    for code, kind in acls.RESOURCE_TYPES.items():
        assert ResourceType(code).name == kind.name
    for code, operation in acls.OPERATIONS.items():
        assert ACLOperation(code).name == operation.name
    for code, permission in acls.PERMISSIONS.items():
        assert ACLPermissionType(code).name == permission.name
    for code, pattern in acls.PATTERNS.items():
        assert ACLResourcePatternType(code).name == pattern.name
    assert ACLResourcePatternType(acls.MATCH_CODE).name == "MATCH"
    for code, mechanism in acls.MECHANISMS.items():
        assert ScramMechanism(code).name == mechanism.name


def creation(**changes: object) -> m.CreateAclsRequest.AclCreation:
    fields: dict[str, object] = {
        "resource_type": 2,
        "resource_name": "events",
        "resource_pattern_type": 4,
        "principal": "User:alice",
        "host": "*",
        "operation": 4,
        "permission_type": 3,
    }
    fields.update(changes)
    return m.CreateAclsRequest.AclCreation(**fields)  # type: ignore[arg-type]


def test_a_creation_becomes_the_acl_it_names() -> None:
    assert acls.acl_of(creation()) == Acl(
        "User:alice", Kind.TOPIC, PatternType.PREFIXED, "events", Operation.WRITE, Permission.ALLOW
    )


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"operation": 12}, "idempotent_write is not modeled"),
        ({"operation": 10}, "describe_configs is not modeled"),
        ({"operation": 1}, "operation code 1"),
        ({"resource_type": 5}, "transactional_id is not modeled"),
        ({"resource_type": 1}, "resource type code 1"),
        ({"resource_pattern_type": 2}, "pattern type code 2"),
        ({"permission_type": 1}, "permission code 1"),
        ({"host": "10.0.0.1"}, "every host"),
        ({"principal": "alice"}, "User:<name>"),
        ({"resource_type": 4, "resource_name": "c"}, "kafka-cluster"),
    ],
)
def test_what_laminar_does_not_model_is_refused_not_mapped(
    changes: dict[str, object], said: str
) -> None:
    with pytest.raises(KafkaError, match=said) as refused:
        acls.acl_of(creation(**changes))
    assert refused.value.code == ErrorCode.INVALID_REQUEST


def fields(**changes: object) -> acls.FilterFields:
    given: dict[str, object] = {
        "resource_type": 1,
        "name": None,
        "pattern": 1,
        "principal": None,
        "host": None,
        "operation": 1,
        "permission": 1,
    }
    given.update(changes)
    return acls.FilterFields(**given)  # type: ignore[arg-type]


def test_filters_map_any_to_none_and_match_to_match() -> None:
    assert acls.filter_of(fields()) == AclFilter()
    assert acls.filter_of(
        fields(resource_type=3, name="g", pattern=2, principal="User:a", operation=3, permission=2)
    ) == AclFilter("User:a", Kind.GROUP, MATCH, "g", Operation.READ, Permission.DENY)


@pytest.mark.parametrize("changes", [{"operation": 12}, {"resource_type": 7}, {"host": "10.0.0.1"}])
def test_a_filter_on_what_laminar_does_not_model_matches_nothing(
    changes: dict[str, object],
) -> None:
    assert acls.filter_of(fields(**changes)) is None


def test_a_filter_naming_unknown_is_invalid() -> None:
    with pytest.raises(KafkaError):
        acls.filter_of(fields(operation=0))


def test_described_acls_are_grouped_by_resource_pattern() -> None:
    a = Acl("User:a", Kind.TOPIC, PatternType.LITERAL, "t", Operation.READ, Permission.ALLOW)
    b = Acl("User:b", Kind.TOPIC, PatternType.LITERAL, "t", Operation.ALL, Permission.DENY)
    c = Acl("User:a", Kind.CLUSTER, PatternType.LITERAL, "kafka-cluster", Operation.ALTER,
            Permission.ALLOW)  # fmt: skip
    resources = acls.described((a, b, c))
    assert [(r.resource_type, r.resource_name, r.pattern_type) for r in resources] == [
        (2, "t", 3),
        (4, "kafka-cluster", 3),
    ]
    assert [(d.principal, d.host, d.operation, d.permission_type) for d in resources[0].acls] == [
        ("User:a", "*", 3, 3),
        ("User:b", "*", 2, 2),
    ]


@pytest.mark.parametrize("mechanism", list(Mechanism))
def test_a_salted_password_makes_the_credential_the_password_would(mechanism: Mechanism) -> None:
    salt = bytes(range(24))
    digest = "sha256" if mechanism is Mechanism.SCRAM_SHA_256 else "sha512"
    salted = hashlib.pbkdf2_hmac(digest, b"pw", salt, 4096)
    upsertion = m.AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
        name="alice",
        mechanism=acls.code_of(mechanism),
        iterations=4096,
        salt=salt,
        salted_password=salted,
    )
    made = acls.upserted_credential(upsertion)
    assert made == make_credential(mechanism, "pw", iterations=4096, salt=salt)
    assert salted not in (made.stored_key, made.server_key)  # never what logs in


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"mechanism": 0}, ErrorCode.UNSUPPORTED_SASL_MECHANISM),
        ({"iterations": 1000}, ErrorCode.UNACCEPTABLE_CREDENTIAL),
        ({"salt": b"short"}, ErrorCode.UNACCEPTABLE_CREDENTIAL),
        ({"salted_password": b"x" * 7}, ErrorCode.UNACCEPTABLE_CREDENTIAL),
    ],
)
def test_an_upsertion_out_of_bounds_is_refused(changes: dict[str, object], code: int) -> None:
    given: dict[str, object] = {
        "name": "alice",
        "mechanism": 1,
        "iterations": 4096,
        "salt": bytes(24),
        "salted_password": bytes(32),
    }
    given.update(changes)
    upsertion = m.AlterUserScramCredentialsRequest.ScramCredentialUpsertion(**given)  # type: ignore[arg-type]
    with pytest.raises(KafkaError) as refused:
        acls.upserted_credential(upsertion)
    assert refused.value.code == code


def test_laminar_s_own_refusal_reaches_a_kafka_client_as_an_authorization_error() -> None:
    """A request the laminar check refuses (the door hands group and topic work
    to it) answers Kafka's authorization codes, never UNKNOWN_SERVER_ERROR."""
    refused = RequestError(WireCode.NOT_AUTHORIZED, "User:bob may not read topic 'x'")
    assert kafka_error(refused) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, refused.message)
    assert coordinator_error(refused)[0] is ErrorCode.GROUP_AUTHORIZATION_FAILED
