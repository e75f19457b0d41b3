"""SASL/SCRAM on the Kafka door of a real node with TLS and `--auth scram`
(issue 28): unmodified kafka-python and confluent-kafka clients with
`security.protocol=SASL_SSL` log in with SCRAM-SHA-256 and -512; a wrong
password, an unknown user and a request sent before the login are refused,
and nothing they sent is applied (checked by identity, as the admin)."""

from __future__ import annotations

import os
import ssl
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from laminar.bench.servers.certs import Pem, make_ca, make_cert
from laminar.kafka import messages as m
from laminar.kafka.errors import ErrorCode
from laminar.security.scram import Mechanism
from tests.system.kafka_wire import Closed, KafkaWire, confluent_round_trip, record_batch
from tests.system.nodes import RunningNode, start_node

pytestmark = pytest.mark.timeout(180)

kafka = pytest.importorskip("kafka")
confluent_kafka = pytest.importorskip("confluent_kafka")

ADMIN = ("admin", "admin-password-1")
MECHANISMS = [Mechanism.SCRAM_SHA_256.value, Mechanism.SCRAM_SHA_512.value]


class SecuredNode:
    """A node with TLS and SCRAM logins, and how clients reach it."""

    def __init__(self, node: RunningNode, ca: Pem) -> None:
        self.node = node
        self.ca = ca

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


def write_user_file(directory: Path, user: str, password: str) -> str:
    path = directory / "admin.cred"
    path.write_text(f"{user}:{password}\n")
    os.chmod(path, 0o600)
    return str(path)


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
        auth="scram",
        bootstrap_user_file=write_user_file(directory, *ADMIN),
    ) as running:
        yield SecuredNode(running, ca)


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
