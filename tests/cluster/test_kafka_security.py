"""SASL and ACLs on the Kafka door of a static 3-node cluster with `--auth
scram` (issue 28): users and ACLs made through any node's Kafka door reach
the metadata leader and hold on every node; a Kafka client with SASL produces
to the partition leader; records are checked by identity. Every node runs
TLS with its own certificate (peer links are mutual TLS)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar.certs import make_cluster_certs
from laminar.kafka import messages as m
from laminar.kafka.errors import ErrorCode
from laminar.security.scram import Mechanism
from tests.cluster.nodes import Cluster
from tests.support import wait_until
from tests.system.kafka_wire import KafkaWire, write_user_file

pytestmark = pytest.mark.timeout(240)

kafka = pytest.importorskip("kafka")

ADMIN = ("admin", "admin-password-1")
TOPIC_READ, TOPIC_WRITE = 3, 4


def _acl(principal: str, operation: int, topic: str) -> m.CreateAclsRequest.AclCreation:
    return m.CreateAclsRequest.AclCreation(
        resource_type=2,  # topic
        resource_name=topic,
        resource_pattern_type=3,  # literal
        principal=principal,
        host="*",
        operation=operation,
        permission_type=3,  # allow
    )


def _upsert(name: str, password: str) -> m.AlterUserScramCredentialsRequest:
    """kafka-python's upsertion: it salts the password, the node keeps keys."""
    made = kafka.admin.UserScramCredentialUpsertion(name, "SCRAM-SHA-256", password)
    return m.AlterUserScramCredentialsRequest(
        upsertions=[
            m.AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
                name=name,
                mechanism=1,
                iterations=made.iterations,
                salt=made.salt,
                salted_password=made.salted_password,
            )
        ]
    )


def test_users_and_acls_made_on_any_node_hold_on_every_node(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    make_cluster_certs(certs)
    ca = str(certs / "ca.crt")
    with Cluster.start(
        tmp_path,
        3,
        certs=certs,
        auth="scram",
        bootstrap_user_file=write_user_file(tmp_path, *ADMIN),
    ) as cluster:
        nodes = [cluster.nodes[n] for n in ("n1", "n2", "n3")]

        def wire(node_index: int) -> KafkaWire:
            node = nodes[node_index]
            return KafkaWire(node.host, node.kafka_ports[0], ca)

        def admin_logged_in(node_index: int) -> KafkaWire:
            connection = wire(node_index)
            answer = connection.log_in(*ADMIN)
            if answer.error_code:  # the bootstrap user has not reached that node yet
                connection.close()
                raise AssertionError(answer.error_message)
            return connection

        topic = f"t-{uuid.uuid4().hex[:8]}"
        wait_until(lambda: _created_somewhere(admin_logged_in, topic), f"{topic} created")
        # one user and one ACL made through each node's door (two of them not the leader's)
        users = [(f"u{i}{uuid.uuid4().hex[:6]}", f"pw-{uuid.uuid4().hex}") for i in range(3)]
        for i, (name, password) in enumerate(users):
            with wait_until(lambda i=i: admin_logged_in(i), f"the admin logs in on n{i + 1}") as a:
                altered = a.call(_upsert(name, password), 0)
                assert [(r.user, r.error_code) for r in altered.results] == [(name, 0)]
                granted = a.call(
                    m.CreateAclsRequest(creations=[_acl(f"User:{name}", TOPIC_WRITE, topic)]), 2
                )
                assert [r.error_code for r in granted.results] == [0]
        # every user logs in on every node, and its ACL holds there
        for name, password in users:
            for i in range(3):

                def sees_only_its_topic(i: int = i, name: str = name, pw: str = password) -> bool:
                    with wire(i) as w:
                        if w.log_in(name, pw, Mechanism.SCRAM_SHA_256).error_code:
                            return False
                        listed = w.call(m.MetadataRequest(topics=None), 9)
                        return [t.name for t in listed.topics] == [topic]

                wait_until(sees_only_its_topic, f"{name} logs in on n{i + 1} and sees {topic}")
        # a partition on two nodes: the third names its leader too (it
        # asks them over the peer session: a client's question needs a login)
        pair = f"pair-{uuid.uuid4().hex[:8]}"
        wait_until(lambda: _created_somewhere(admin_logged_in, pair, 2), f"{pair} created")
        for i in range(3):

            def names_pair_leader(i: int = i) -> bool:
                with admin_logged_in(i) as a:
                    listed = a.call(m.MetadataRequest(topics=[_wanted(pair)]), 9)
                    (partition,) = listed.topics[0].partitions
                    return partition.error_code == 0 and partition.leader_id >= 0

            wait_until(names_pair_leader, f"n{i + 1} names the leader of {pair}/0")
        # a Kafka client with SASL produces to the leader, through any bootstrap node
        name, password = users[1]
        bootstrap = ",".join(f"{n.host}:{n.kafka_ports[0]}" for n in nodes)
        sasl = {
            "bootstrap_servers": bootstrap,
            "security_protocol": "SASL_SSL",
            "ssl_cafile": ca,
            "sasl_mechanism": "SCRAM-SHA-256",
        }
        producer = kafka.KafkaProducer(
            **sasl, sasl_plain_username=name, sasl_plain_password=password
        )
        values = [f"v{i}-{uuid.uuid4().hex[:6]}".encode() for i in range(20)]
        futures = [producer.send(topic, value=v, partition=0) for v in values]
        producer.flush(60)
        offsets = [f.get(timeout=30).offset for f in futures]
        producer.close()
        consumer = kafka.KafkaConsumer(
            **sasl,
            sasl_plain_username=ADMIN[0],
            sasl_plain_password=ADMIN[1],
            enable_auto_commit=False,
        )
        consumer.assign([kafka.TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        got: dict[int, bytes] = {}
        deadline = time.monotonic() + 60
        while len(got) < len(values) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.update((r.offset, r.value) for r in records)
        consumer.close()
        assert [got.get(o) for o in offsets] == values  # each where it was acknowledged
        # the writer may not read, on any node
        for i in range(3):
            with wire(i) as w:
                assert w.log_in(name, password).error_code == 0
                partition = m.FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0)
                fetched = w.call(
                    m.FetchRequest(
                        max_wait_ms=0,
                        max_bytes=1 << 20,
                        topics=[m.FetchRequest.FetchTopic(topic=topic, partitions=[partition])],
                    ),
                    11,
                )
                (answer,) = fetched.responses[0].partitions
                assert answer.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _wanted(topic: str) -> m.MetadataRequest.MetadataRequestTopic:
    return m.MetadataRequest.MetadataRequestTopic(name=topic)


def _created_somewhere(
    wire_admin: Callable[[int], KafkaWire], topic: str, replication_factor: int = 3
) -> bool:
    """Create `topic` through each node in turn until one (the metadata
    leader: CreateTopics goes to the controller) takes it."""
    for i in range(3):
        with wire_admin(i) as admin:
            created = admin.call(
                m.CreateTopicsRequest(
                    topics=[
                        m.CreateTopicsRequest.CreatableTopic(
                            name=topic, num_partitions=1, replication_factor=replication_factor
                        )
                    ],
                    timeout_ms=30_000,
                ),
                4,
            )
            if created.topics[0].error_code in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
                return True
    return False
