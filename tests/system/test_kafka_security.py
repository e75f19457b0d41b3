"""SASL/SCRAM on the Kafka door of a real node with TLS and `--auth scram`
(issue 28): unmodified kafka-python and confluent-kafka clients with
`security.protocol=SASL_SSL` log in with SCRAM-SHA-256 and -512; a wrong
password, an unknown user and a request sent before the login are refused,
and nothing they sent is applied (checked by identity, as the admin)."""

from __future__ import annotations

import hashlib
import os
import ssl
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from laminar.certs import Pem, make_ca, make_cert
from laminar.client import Client
from laminar.kafka import messages as m
from laminar.kafka.errors import ErrorCode
from laminar.security.scram import Mechanism
from tests.support import wait_until
from tests.system.kafka_wire import (
    Closed,
    KafkaWire,
    confluent_round_trip,
    record_batch,
    write_user_file,
)
from tests.system.nodes import RunningNode, start_node

pytestmark = pytest.mark.timeout(180)

kafka = pytest.importorskip("kafka")
confluent_kafka = pytest.importorskip("confluent_kafka")

ADMIN = ("admin", "admin-password-1")
MECHANISMS = [Mechanism.SCRAM_SHA_256.value, Mechanism.SCRAM_SHA_512.value]


class SecuredNode:
    """A node with TLS and SCRAM logins, and how clients reach it."""

    def __init__(self, node: RunningNode, ca: Pem, directory: Path) -> None:
        self.node = node
        self.ca = ca
        self.dir = directory

    def kafka_python(self, user: str, password: str, mechanism: str) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.node.kafka_bootstrap,
            "security_protocol": "SASL_SSL",
            "ssl_cafile": self.ca.cert,
            "sasl_mechanism": mechanism,
            "sasl_plain_username": user,
            "sasl_plain_password": password,
        }

    def confluent(self, user: str, password: str, mechanism: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.node.kafka_bootstrap,
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": self.ca.cert,
            "sasl.mechanisms": mechanism,
            "sasl.username": user,
            "sasl.password": password,
        }

    def laminar_login(self, user: str, password: str) -> dict[str, Any]:
        """A laminar `Client`'s options to log in to the node's own door."""
        return {"tls": True, "ca_file": self.ca.cert, "username": user, "password": password}

    def wire(self, shard: int = 0) -> KafkaWire:
        return KafkaWire(self.node.host, self.node.kafka_ports[shard], self.ca.cert)

    def admin(self) -> Any:
        return kafka.KafkaAdminClient(**self.kafka_python(*ADMIN, MECHANISMS[0]))

    def create_topic(self, partitions: int = 1) -> str:
        name = f"t-{uuid.uuid4().hex[:10]}"
        admin = self.admin()
        try:
            admin.create_topics([kafka.admin.NewTopic(name, partitions, 1)])
        finally:
            admin.close()
        return name

    def values(self, topic: str, partition: int = 0) -> list[bytes]:
        """Every value of a partition, read as the admin, in offset order."""
        consumer = kafka.KafkaConsumer(
            enable_auto_commit=False, **self.kafka_python(*ADMIN, MECHANISMS[0])
        )
        try:
            tp = kafka.TopicPartition(topic, partition)
            consumer.assign([tp])
            end = consumer.end_offsets([tp])[tp]
            consumer.seek_to_beginning()
            got: dict[int, bytes] = {}
            deadline = time.monotonic() + 30
            while len(got) < end and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    got.update((r.offset, r.value) for r in records)
            assert len(got) == end
            return [got[offset] for offset in sorted(got)]
        finally:
            consumer.close()

    def metric(self, name: str) -> dict[str, float]:
        """Samples of one /metrics family, by their label text."""
        url = f"https://{self.node.admin_host}:{self.node.admin_port}/metrics"
        context = ssl.create_default_context(cafile=self.ca.cert)
        with urllib.request.urlopen(url, timeout=10, context=context) as answer:
            text = answer.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith(name + "{"):
                labels, _, value = line.rpartition(" ")
                out[labels[len(name) :]] = float(value)
        return out


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredNode]:
    directory = tmp_path_factory.mktemp("sasl")
    ca = make_ca(directory, "ca")
    cert = make_cert(directory, ca, "node")
    with start_node(
        directory,
        cores=2,
        flush="never",
        tls_cert_file=cert.cert,
        tls_key_file=cert.key,
        tls_ca_file=ca.cert,  # client certificates log in too (optional: SASL needs none)
        auth="scram",
        bootstrap_user_file=write_user_file(directory, *ADMIN),
    ) as running:
        yield SecuredNode(running, ca, directory)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_logs_in_produces_and_consumes(secured: SecuredNode, mechanism: str) -> None:
    topic = secured.create_topic()
    producer = kafka.KafkaProducer(**secured.kafka_python(*ADMIN, mechanism))
    values = [f"kp-{mechanism}-{i}".encode() for i in range(30)]
    futures = [producer.send(topic, value=v, partition=0) for v in values]
    producer.flush(30)
    offsets = [f.get(timeout=10).offset for f in futures]
    producer.close()
    assert secured.values(topic) == values
    assert offsets == list(range(len(values)))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_logs_in_produces_and_consumes(
    secured: SecuredNode, mechanism: str
) -> None:
    topic = secured.create_topic()
    values = [f"ck-{mechanism}-{i}".encode() for i in range(30)]
    got = confluent_round_trip(secured.confluent(*ADMIN, mechanism), topic, values)
    assert got == secured.values(topic) == values


def _produce_body(topic: str, value: bytes) -> m.ProduceRequest:
    partition = m.ProduceRequest.TopicProduceData.PartitionProduceData(
        index=0, records=record_batch([value])
    )
    return m.ProduceRequest(
        acks=-1,
        timeout_ms=5000,
        topic_data=[m.ProduceRequest.TopicProduceData(name=topic, partition_data=[partition])],
    )


@pytest.mark.parametrize(
    ("user", "password"), [(ADMIN[0], "not-the-password"), ("nobody", ADMIN[1])]
)
def test_a_wrong_password_or_an_unknown_user_is_refused_and_the_connection_closed(
    secured: SecuredNode, user: str, password: str
) -> None:
    before = sum(secured.metric("laminar_auth_failures_total").values())
    with secured.wire() as wire:
        answer = wire.log_in(user, password)
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert answer.error_message == "authentication failed: invalid user name or password"
        assert wire.closed_by_node()
    assert sum(secured.metric("laminar_auth_failures_total").values()) == before + 1


def test_confluent_kafka_with_a_wrong_password_reports_an_authentication_error(
    secured: SecuredNode,
) -> None:
    errors: list[Any] = []
    config = secured.confluent(ADMIN[0], "wrong-password", MECHANISMS[1])
    producer = confluent_kafka.Producer({**config, "error_cb": errors.append})
    deadline = time.monotonic() + 30
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors and errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION
    assert "invalid user name or password" in errors[0].str()


def test_a_request_before_the_login_closes_the_connection_and_is_not_applied(
    secured: SecuredNode,
) -> None:
    topic = secured.create_topic()
    value = f"before-login-{uuid.uuid4().hex}".encode()
    with secured.wire() as wire:
        wire.send(_produce_body(topic, value), 8)
        with pytest.raises(Closed):
            wire.receive(m.ProduceRequest, 8)
    with secured.wire() as wire:  # after a handshake, but before the proof
        assert wire.call(m.SaslHandshakeRequest(mechanism=MECHANISMS[0]), 1).error_code == 0
        wire.send(_produce_body(topic, value), 8)
        with pytest.raises(Closed):
            wire.receive(m.ProduceRequest, 8)
    with secured.wire() as wire:  # the same produce after a login is applied
        assert wire.log_in(*ADMIN).error_code == 0
        answer = wire.call(_produce_body(topic, b"after-login"), 8)
        assert answer.responses[0].partition_responses[0].error_code == 0
    assert secured.values(topic) == [b"after-login"]


def test_api_versions_is_served_before_the_login_and_a_second_login_is_refused(
    secured: SecuredNode,
) -> None:
    with secured.wire() as wire:
        versions = wire.call(m.ApiVersionsRequest(), 0)
        advertised = {k.api_key for k in versions.api_keys}
        assert {m.SaslHandshakeRequest.API_KEY, m.SaslAuthenticateRequest.API_KEY} <= advertised
        assert wire.log_in(*ADMIN, Mechanism.SCRAM_SHA_512).error_code == 0
        again = wire.call(m.SaslHandshakeRequest(mechanism=MECHANISMS[0]), 1)
        assert again.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert wire.call(m.ApiVersionsRequest(), 0).error_code == 0  # still served


def test_an_unknown_mechanism_gets_the_list_and_a_closed_connection(
    secured: SecuredNode,
) -> None:
    with secured.wire() as wire:
        answer = wire.call(m.SaslHandshakeRequest(mechanism="PLAIN"), 1)
        assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert answer.mechanisms == MECHANISMS
        assert wire.closed_by_node()


# -- users made through Kafka, ACLs, authorization ---------------------------------------


def _new_user(secured: SecuredNode, mechanism: str = MECHANISMS[0]) -> tuple[str, str]:
    """A user made with kafka-python's AlterUserScramCredentials, as the admin."""
    name, password = f"u{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    admin = secured.admin()
    try:
        upsert = kafka.admin.UserScramCredentialUpsertion(name, mechanism, password)
        assert admin.alter_user_scram_credentials([upsert]) == {name: None}
    finally:
        admin.close()
    return name, password


def _acl(principal: str, operation: str, topic: str) -> Any:
    return kafka.admin.ACL(
        principal=principal,
        host="*",
        operation=kafka.admin.ACLOperation[operation],
        permission_type=kafka.admin.ACLPermissionType.ALLOW,
        resource_pattern=kafka.admin.ResourcePattern(kafka.admin.ResourceType.TOPIC, topic),
    )


def _grant(secured: SecuredNode, *acls: Any) -> None:
    admin = secured.admin()
    try:
        assert admin.create_acls(list(acls)) == {"succeeded": list(acls), "failed": []}
    finally:
        admin.close()


def test_users_made_with_alter_user_scram_credentials_log_in_and_are_described(
    secured: SecuredNode,
) -> None:
    alice, alice_pw = _new_user(secured, MECHANISMS[0])
    admin = secured.admin()
    try:
        described = admin.describe_user_scram_credentials([alice, "nobody"])
    finally:
        admin.close()
    assert described[alice]["credential_infos"] == [
        {"mechanism": kafka.admin.ScramMechanism.SCRAM_SHA_256, "iterations": 4096}
    ]
    assert described["nobody"]["credential_infos"] == []
    with secured.wire() as wire:
        assert wire.log_in(alice, alice_pw).error_code == 0
    with secured.wire() as wire:  # only the mechanism it was given
        assert wire.log_in(alice, alice_pw, Mechanism.SCRAM_SHA_512).error_code != 0
    # confluent-kafka's AdminClient makes a SCRAM-SHA-512 user, which then logs in
    from confluent_kafka import admin as ck_admin

    bob, bob_pw = f"u{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    info = ck_admin.ScramCredentialInfo(ck_admin.ScramMechanism.SCRAM_SHA_512, 8192)
    client = ck_admin.AdminClient(secured.confluent(*ADMIN, MECHANISMS[1]))
    futures = client.alter_user_scram_credentials(
        [ck_admin.UserScramCredentialUpsertion(bob, info, bob_pw.encode())]
    )
    futures[bob].result(timeout=30)
    with secured.wire() as wire:
        assert wire.log_in(bob, bob_pw, Mechanism.SCRAM_SHA_512).error_code == 0
    with secured.wire() as wire:
        assert wire.log_in(bob, "not-bob-s-password", Mechanism.SCRAM_SHA_512).error_code != 0


def test_deleting_a_user_s_last_credential_deletes_the_user(secured: SecuredNode) -> None:
    name, password = _new_user(secured)
    admin = secured.admin()
    try:
        deletion = kafka.admin.UserScramCredentialDeletion(name, MECHANISMS[0])
        assert admin.alter_user_scram_credentials([deletion]) == {name: None}
        again = admin.alter_user_scram_credentials([deletion])
    finally:
        admin.close()
    assert again[name] is not None  # nothing left to delete
    with secured.wire() as wire:
        assert wire.log_in(name, password).error_code == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_two_admins_altering_one_user_s_mechanisms_at_once_both_land(
    secured: SecuredNode,
) -> None:
    """Two AlterUserScramCredentials for a new user, one per mechanism, sent on
    two connections without waiting: each is planned on the state the other
    left (at the metadata leader), so the user ends with both, and logs in
    with either (a door computing the new set from its own state made both
    creates, and refused one)."""
    name, password = f"u{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    wires = [secured.wire(), secured.wire(1)]
    try:
        for wire in wires:
            assert wire.log_in(*ADMIN).error_code == 0
        codes = {Mechanism.SCRAM_SHA_256: 1, Mechanism.SCRAM_SHA_512: 2}
        for wire, (mechanism, code) in zip(wires, codes.items(), strict=True):
            salt = os.urandom(16)
            digest = "sha256" if mechanism is Mechanism.SCRAM_SHA_256 else "sha512"
            salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, 4096)
            upsert = m.AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
                name=name, mechanism=code, iterations=4096, salt=salt, salted_password=salted
            )
            wire.send(m.AlterUserScramCredentialsRequest(upsertions=[upsert]), 0)
        for wire in wires:
            answer = wire.receive(m.AlterUserScramCredentialsRequest, 0)
            assert [r.error_code for r in answer.results] == [0], answer
    finally:
        for wire in wires:
            wire.close()
    for mechanism in codes:
        with secured.wire() as wire:
            assert wire.log_in(name, password, mechanism).error_code == 0, mechanism


def test_kafka_python_creates_describes_and_deletes_acls(secured: SecuredNode) -> None:
    topic = f"acl-{uuid.uuid4().hex[:8]}"
    principal = f"User:{uuid.uuid4().hex[:8]}"
    read, write = _acl(principal, "READ", topic), _acl(principal, "WRITE", topic)
    _grant(secured, read, write)
    admin = secured.admin()
    try:
        wanted = kafka.admin.ACLFilter(
            principal=principal,
            host="*",
            operation=kafka.admin.ACLOperation.ANY,
            permission_type=kafka.admin.ACLPermissionType.ANY,
            resource_pattern=kafka.admin.ResourcePatternFilter(
                kafka.admin.ResourceType.ANY, None, kafka.admin.ACLResourcePatternType.ANY
            ),
        )
        found, error = admin.describe_acls(wanted)
        assert error is kafka.errors.NoError
        assert sorted(found, key=repr) == sorted([read, write], key=repr)
        ((_, removed, error),) = admin.delete_acls([wanted])
        assert error is kafka.errors.NoError
        assert sorted(removed, key=repr) == sorted([read, write], key=repr)
        assert admin.describe_acls(wanted)[0] == []
        # one invalid ACL (no "User:") fails alone: the other one sent with it holds
        invalid = _acl(principal.removeprefix("User:"), "READ", topic)
        result = admin.create_acls([read, invalid])
        assert result == {"succeeded": [read], "failed": [kafka.errors.InvalidRequestError]}
        assert admin.describe_acls(wanted)[0] == [read]
    finally:
        admin.close()


def test_confluent_kafka_creates_describes_and_deletes_acls(secured: SecuredNode) -> None:
    from confluent_kafka import admin as ck

    principal = f"User:{uuid.uuid4().hex[:8]}"
    binding = ck.AclBinding(
        ck.ResourceType.GROUP,
        "billing-",
        ck.ResourcePatternType.PREFIXED,
        principal,
        "*",
        ck.AclOperation.READ,
        ck.AclPermissionType.ALLOW,
    )
    client = ck.AdminClient(secured.confluent(*ADMIN, MECHANISMS[1]))
    assert client.create_acls([binding])[binding].result(timeout=30) is None
    wanted = ck.AclBindingFilter(
        ck.ResourceType.ANY,
        None,
        ck.ResourcePatternType.ANY,
        principal,
        None,
        ck.AclOperation.ANY,
        ck.AclPermissionType.ANY,
    )
    assert client.describe_acls(wanted).result(timeout=30) == [binding]
    assert client.delete_acls([wanted])[wanted].result(timeout=30) == [binding]
    assert client.describe_acls(wanted).result(timeout=30) == []
    refused = ck.AclBinding(
        ck.ResourceType.BROKER,  # Kafka code 4: the cluster
        "kafka-cluster",
        ck.ResourcePatternType.LITERAL,
        principal,
        "*",
        ck.AclOperation.IDEMPOTENT_WRITE,  # not modeled by laminar: refused, not mapped
        ck.AclPermissionType.ALLOW,
    )
    with pytest.raises(confluent_kafka.KafkaException) as invalid:
        client.create_acls([refused])[refused].result(timeout=30)
    assert invalid.value.args[0].code() == confluent_kafka.KafkaError.INVALID_REQUEST
    assert client.describe_acls(wanted).result(timeout=30) == []


def test_a_writer_may_produce_but_not_fetch_and_sees_only_its_topic(
    secured: SecuredNode,
) -> None:
    topic, hidden = secured.create_topic(), secured.create_topic()
    writer, password = _new_user(secured)
    _grant(secured, _acl(f"User:{writer}", "WRITE", topic))
    producer = kafka.KafkaProducer(**secured.kafka_python(writer, password, MECHANISMS[0]))
    values = [f"w-{i}-{uuid.uuid4().hex[:6]}".encode() for i in range(10)]
    futures = [producer.send(topic, value=v, partition=0) for v in values]
    producer.flush(30)
    assert [f.get(timeout=10).offset for f in futures] == list(range(len(values)))
    with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
        producer.send(hidden, value=b"not-allowed", partition=0).get(timeout=30)
    producer.close()
    assert secured.values(topic) == values
    assert secured.values(hidden) == []
    with secured.wire() as wire:
        assert wire.log_in(writer, password).error_code == 0
        listed = wire.call(m.MetadataRequest(topics=None), 9)
        assert [t.name for t in listed.topics] == [topic]
        named = wire.call(
            m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name=hidden)]), 9
        )
        assert [(t.name, t.error_code) for t in named.topics] == [
            (hidden, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        ]
        partition = m.FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0)
        fetch = m.FetchRequest(
            max_wait_ms=0,
            max_bytes=1 << 20,
            topics=[m.FetchRequest.FetchTopic(topic=topic, partitions=[partition])],
        )
        fetched = wire.call(fetch, 11)
        (answer,) = fetched.responses[0].partitions
        assert answer.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert not answer.records
    for shard in range(len(secured.node.kafka_ports)):  # the owner of partition 0 among them
        with secured.wire(shard) as wire:
            assert wire.log_in(writer, password).error_code == 0
            produced = wire.call(_produce_body(hidden, b"not-allowed"), 8)
            (refused,) = produced.responses[0].partition_responses
            assert refused.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert secured.values(hidden) == []


def test_a_user_without_alter_on_the_cluster_changes_no_acl_and_no_user(
    secured: SecuredNode,
) -> None:
    name, password = _new_user(secured)
    client = kafka.KafkaAdminClient(**secured.kafka_python(name, password, MECHANISMS[0]))
    grant = _acl(f"User:{name}", "READ", "anything")
    try:
        result = client.create_acls([grant])
        assert result["failed"] == [kafka.errors.ClusterAuthorizationFailedError]
        upsert = kafka.admin.UserScramCredentialUpsertion("mallory", MECHANISMS[0], "pw")
        assert client.alter_user_scram_credentials([upsert])["mallory"] is not None
    finally:
        client.close()
    admin = secured.admin()
    try:
        assert admin.describe_user_scram_credentials(["mallory"])["mallory"]["error"]
        everything = kafka.admin.ACLFilter(
            principal=f"User:{name}",
            host=None,
            operation=kafka.admin.ACLOperation.ANY,
            permission_type=kafka.admin.ACLPermissionType.ANY,
            resource_pattern=kafka.admin.ResourcePatternFilter(
                kafka.admin.ResourceType.ANY, None, kafka.admin.ACLResourcePatternType.ANY
            ),
        )
        assert admin.describe_acls(everything)[0] == []
    finally:
        admin.close()


def _group_acl(principal: str, group: str) -> Any:
    return kafka.admin.ACL(
        principal=principal,
        host="*",
        operation=kafka.admin.ACLOperation.READ,
        permission_type=kafka.admin.ACLPermissionType.ALLOW,
        resource_pattern=kafka.admin.ResourcePattern(kafka.admin.ResourceType.GROUP, group),
    )


def test_a_reader_consumes_in_its_group_and_is_refused_other_groups_and_topics(
    secured: SecuredNode,
) -> None:
    topic, other = secured.create_topic(), secured.create_topic()
    values = [f"r-{i}-{uuid.uuid4().hex[:6]}".encode() for i in range(5)]
    producer = kafka.KafkaProducer(**secured.kafka_python(*ADMIN, MECHANISMS[0]))
    for value in values:
        producer.send(topic, value=value, partition=0)
    producer.flush(30)
    producer.close()
    reader, password = _new_user(secured)
    group, foreign = f"g-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    principal = f"User:{reader}"
    _grant(secured, _acl(principal, "READ", topic), _group_acl(principal, group))
    consumer = kafka.KafkaConsumer(
        topic,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **secured.kafka_python(reader, password, MECHANISMS[0]),
    )
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < len(values) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(r.value for r in records)
    consumer.commit()
    assert consumer.committed(kafka.TopicPartition(topic, 0)) == len(values)
    consumer.close()
    assert got == values
    other_consumer = kafka.KafkaConsumer(  # the admin's group, which the reader must not see
        group_id=foreign, enable_auto_commit=False, **secured.kafka_python(*ADMIN, MECHANISMS[0])
    )
    other_consumer.assign([kafka.TopicPartition(topic, 0)])
    other_consumer.commit({kafka.TopicPartition(topic, 0): kafka.OffsetAndMetadata(1, "", -1)})
    other_consumer.close()
    listed: set[str] = set()
    for shard in range(len(secured.node.kafka_ports)):  # each broker lists its own groups
        with secured.wire(shard) as wire:
            assert wire.log_in(reader, password).error_code == 0
            listed |= {g.group_id for g in wire.call(m.ListGroupsRequest(), 4).groups}
    assert listed == {group}  # not the other tests' groups
    with secured.wire() as wire:
        assert wire.log_in(reader, password).error_code == 0
        found = wire.call(m.FindCoordinatorRequest(key_type=0, coordinator_keys=[foreign]), 4)
        assert [c.error_code for c in found.coordinators] == [ErrorCode.GROUP_AUTHORIZATION_FAILED]
        joined = wire.call(
            m.JoinGroupRequest(
                group_id=foreign,
                session_timeout_ms=10_000,
                rebalance_timeout_ms=10_000,
                member_id="",
                protocol_type="consumer",
                protocols=[m.JoinGroupRequest.JoinGroupRequestProtocol(name="range")],
            ),
            5,
        )
        assert joined.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        described = wire.call(m.DescribeGroupsRequest(groups=[foreign]), 4)
        assert described.groups[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        partition = m.OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition
        committed = wire.call(
            m.OffsetCommitRequest(
                group_id=group,
                generation_id_or_member_epoch=-1,
                topics=[
                    m.OffsetCommitRequest.OffsetCommitRequestTopic(
                        name=other, partitions=[partition(partition_index=0, committed_offset=0)]
                    )
                ],
            ),
            8,
        )
        assert [(t.name, [p.error_code for p in t.partitions]) for t in committed.topics] == [
            (other, [ErrorCode.TOPIC_AUTHORIZATION_FAILED])
        ]
        fetched = wire.call(
            m.OffsetFetchRequest(
                group_id=group,
                topics=[
                    m.OffsetFetchRequest.OffsetFetchRequestTopic(name=other, partition_indexes=[0])
                ],
            ),
            7,
        )
        assert [(t.name, [p.error_code for p in t.partitions]) for t in fetched.topics] == [
            (other, [ErrorCode.TOPIC_AUTHORIZATION_FAILED])
        ]


def test_topic_changes_producer_ids_and_configs_need_their_acls(secured: SecuredNode) -> None:
    topic = secured.create_topic()
    name, password = _new_user(secured)
    new_topic = f"t-{uuid.uuid4().hex[:10]}"
    with secured.wire() as wire:
        assert wire.log_in(name, password).error_code == 0
        created = wire.call(
            m.CreateTopicsRequest(
                topics=[
                    m.CreateTopicsRequest.CreatableTopic(
                        name=new_topic, num_partitions=1, replication_factor=-1
                    )
                ],
                timeout_ms=10_000,
            ),
            4,
        )
        assert created.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        deleted = wire.call(m.DeleteTopicsRequest(topic_names=[topic], timeout_ms=10_000), 4)
        assert deleted.responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        producer_id = wire.call(
            m.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1), 4
        )
        assert producer_id.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        configs = wire.call(
            m.DescribeConfigsRequest(
                resources=[
                    m.DescribeConfigsRequest.DescribeConfigsResource(
                        resource_type=2, resource_name=topic
                    )
                ]
            ),
            4,
        )
        assert configs.results[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert secured.values(topic) == []  # still there, readable by the admin
    admin = secured.admin()
    try:
        assert new_topic not in admin.list_topics()
    finally:
        admin.close()


def test_a_client_certificate_names_the_principal_the_acls_judge(secured: SecuredNode) -> None:
    """Kafka's `SSL` with a client certificate: no SASL, the certificate's CN is
    the principal (`User:<CN>`), and its ACLs hold as a SASL user's do."""
    topic, hidden = secured.create_topic(), secured.create_topic()
    name = f"cert{uuid.uuid4().hex[:8]}"
    mine = make_cert(secured.dir, secured.ca, name, hosts=())
    _grant(secured, _acl(f"User:{name}", "WRITE", topic))
    config = {
        "bootstrap.servers": secured.node.kafka_bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": secured.ca.cert,
        "ssl.certificate.location": mine.cert,
        "ssl.key.location": mine.key,
    }
    producer = confluent_kafka.Producer(config)
    outcomes: dict[str, Any] = {}

    def on_delivery(err: Any, message: Any) -> None:
        outcomes[message.topic()] = err

    producer.produce(topic, value=b"by-certificate", partition=0, on_delivery=on_delivery)
    producer.produce(hidden, value=b"not-allowed", partition=0, on_delivery=on_delivery)
    producer.flush(30)
    assert outcomes[topic] is None
    assert outcomes[hidden].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert secured.values(topic) == [b"by-certificate"]
    assert secured.values(hidden) == []


def test_a_deleted_user_s_connection_is_closed_at_its_next_request(secured: SecuredNode) -> None:
    """A SCRAM login lasts while its user does (Kafka would keep the
    connection until it re-authenticates)."""
    user, password = f"dora-{uuid.uuid4().hex[:6]}", "dora-secret-1"

    def logged_in_wire() -> KafkaWire | None:
        wire = secured.wire()
        if wire.log_in(user, password).error_code == 0:
            return wire
        wire.close()  # the user has not reached this shard yet
        return None

    def still_served(wire: KafkaWire) -> bool:
        try:
            wire.call(m.MetadataRequest(topics=[]), 9)
        except Closed:
            return False
        return True

    login = secured.laminar_login(*ADMIN)
    with Client(secured.node.bootstrap, **login) as admin:
        admin.create_user(user, password)
        wire = wait_until(logged_in_wire, f"{user} logs in")
        with wire:
            assert still_served(wire)
            before = secured.metric("laminar_auth_failures_total")
            admin.delete_user(user)
            wait_until(lambda: not still_served(wire), "the connection closed")

    def deletions(samples: dict[str, float]) -> float:
        return sum(n for labels, n in samples.items() if 'reason="user-deleted"' in labels)

    assert deletions(secured.metric("laminar_auth_failures_total")) == deletions(before) + 1
