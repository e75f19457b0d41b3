"""Spark against a node with TLS and logins: the connector honours laminar's
security options and the Kafka source's (`kafka.security.protocol=SASL_SSL`,
a PEM truststore, a SCRAM JAAS line) on the driver and in every task, reads
and writes what the user's ACLs allow, and fails with the node's reason
where they do not. Rows are checked by identity."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install 'pyspark[sql]==4.3.0'")

from laminar.certs import Pem, make_ca, make_cert
from laminar.client import AuthenticationFailedError, Client
from laminar.security.acls import Acl, Operation, PatternType, Permission, ResourceType
from tests.delivery import assert_exactly_once
from tests.spark.helpers import all_records
from tests.system.nodes import RunningNode, start_node

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret-1"
ETL, ETL_PASSWORD = "etl", "etl-secret-1"
JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="{user}" password="{password}";'
)


class Secured:
    """The node, its CA, and the files a job is given."""

    def __init__(self, node: RunningNode, ca: Pem, etl_password_file: str) -> None:
        self.node, self.ca, self.etl_password_file = node, ca, etl_password_file

    def kafka_options(self, password: str = ETL_PASSWORD) -> dict[str, str]:
        return {
            "kafka.bootstrap.servers": self.node.bootstrap,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": self.ca.cert,
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": JAAS.format(user=ETL, password=password),
        }

    def laminar_options(self) -> dict[str, str]:
        return {
            "bootstrap": self.node.bootstrap,
            "tls": "true",
            "caFile": self.ca.cert,
            "user": ETL,
            "passwordFile": self.etl_password_file,
        }

    def admin(self) -> Client:
        deadline = time.monotonic() + 30
        while True:  # the bootstrap user is made a moment after the node is up
            try:
                return Client(
                    self.node.bootstrap,
                    tls=True,
                    ca_file=self.ca.cert,
                    username=ADMIN,
                    password=ADMIN_PASSWORD,
                )
            except AuthenticationFailedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def _secret(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    files = tmp_path_factory.mktemp("spark-secured-files")
    ca = make_ca(files, "ca")
    cert = make_cert(files, ca, "node")
    with start_node(
        tmp_path_factory.mktemp("spark-secured"),
        cores=2,
        auth="scram",
        bootstrap_user_file=_secret(files / "admin.cred", f"{ADMIN}:{ADMIN_PASSWORD}"),
        tls_cert_file=cert.cert,
        tls_key_file=cert.key,
    ) as node:
        yield Secured(node, ca, _secret(files / "etl.pw", ETL_PASSWORD + "\n"))


def _allow(operation: Operation, topic: str) -> Acl:
    return Acl(
        f"User:{ETL}", ResourceType.TOPIC, PatternType.LITERAL, topic, operation, Permission.ALLOW
    )


def _load(spark: Any, topic: str, options: dict[str, str]) -> Any:
    reader = spark.read.format("laminar").option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_a_job_reads_and_writes_what_its_acls_allow_and_is_told_why_not(
    spark: Any, secured: Secured
) -> None:
    with secured.admin() as admin:
        admin.create_user(ETL, ETL_PASSWORD)
        for topic in ("src", "dst"):
            admin.create_topic(topic, partitions=2)
        admin.add_acls([_allow(Operation.READ, "src"), _allow(Operation.WRITE, "dst")])
        values = [b"src-%d" % n for n in range(40)]
        for n, value in enumerate(values):
            admin.produce("src", n % 2, [value])

        # The Kafka source's options: read in two tasks.
        rows = _load(spark, "src", secured.kafka_options()).collect()
        assert_exactly_once([r.value for r in rows], values)

        # laminar's options: an exactly-once write (stage in tasks, commit on the driver).
        df = spark.createDataFrame([(v,) for v in values], "value BINARY").repartition(2)
        writer = df.write.format("laminar").option("topic", "dst").mode("append")
        for name, value in secured.laminar_options().items():
            writer = writer.option(name, value)
        writer.save()
        written = [r.value for p in (0, 1) for r in all_records(admin, "dst", p)]
        assert_exactly_once(written, values)

        # Not allowed to read what it wrote; a wrong password: the node's reasons.
        with pytest.raises(Exception, match=r"User:etl may not read topic 'dst'"):
            _load(spark, "dst", secured.kafka_options()).collect()
        with pytest.raises(Exception, match=r"authentication failed: invalid user name"):
            _load(spark, "src", secured.kafka_options(password="wrong")).collect()
