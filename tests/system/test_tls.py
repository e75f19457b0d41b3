"""TLS on a real node (issue 28, step 1): both laminar clients, unmodified
Kafka clients with `security.protocol=SSL`, clients the node must turn away
(plaintext, untrusting, too slow to finish a handshake), and a certificate
swapped on SIGHUP. A CA and the node's certificate are made per module with
the `openssl` command; records are checked by identity."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from laminar.certs import Pem, make_ca, make_cert
from laminar.client import AsyncClient, Client
from laminar.client.blocking import BlockingConnection, connect
from laminar.client.errors import CannotConnectError, ConnectionLostError
from laminar.security.tls import client_context
from laminar.wire import Pong
from laminar.wire.messages import Ping
from tests.system.kafka_wire import confluent_round_trip
from tests.system.nodes import RunningNode, start_node
from tests.system.test_readme import (
    README_KAFKA_ADDRESS,
    REPO,
    _run_python,
    _run_shell_line,
    examples,
)

pytestmark = pytest.mark.timeout(120)

FIRST_REQUEST_TIMEOUT_S = 2


class Certs:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.ca = make_ca(directory, "ca")
        self.node = make_cert(directory, self.ca, "node")
        self.other_ca = make_ca(directory, "other-ca")
        # The files the node is started with: the test of SIGHUP overwrites them.
        self.served = Pem(str(directory / "served.crt"), str(directory / "served.key"))
        shutil.copy(self.node.cert, self.served.cert)
        shutil.copy(self.node.key, self.served.key)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[RunningNode]:
    with start_node(
        tmp_path_factory.mktemp("tls"),
        cores=2,
        flush="never",
        tls_cert_file=certs.served.cert,
        tls_key_file=certs.served.key,
        tls_ca_file=certs.ca.cert,
        first_request_timeout=FIRST_REQUEST_TIMEOUT_S,
    ) as running:
        yield running


def _client(node: RunningNode, certs: Certs) -> Client:
    return Client(node.bootstrap, tls=True, ca_file=certs.ca.cert)


def _topic(node: RunningNode, certs: Certs, partitions: int = 2) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    with _client(node, certs) as client:
        client.create_topic(name, partitions)
    return name


def _values(node: RunningNode, certs: Certs, topic: str, partition: int) -> list[bytes]:
    with _client(node, certs) as client:
        return [r.value for r in client.fetch(topic, partition, 0) if r.value is not None]


def _peer_subject(port: int, certs: Certs) -> str:
    """The common name of the certificate a new TLS connection to `port` is shown."""
    context = ssl.create_default_context(cafile=certs.ca.cert)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        cert = tls.getpeercert()
    assert cert is not None
    subject: Any = cert["subject"]  # ((("commonName", "node"),),)
    return str(next(value for rdn in subject for key, value in rdn if key == "commonName"))


def _wait_for(predicate: object, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_both_clients_produce_and_consume_over_tls(node: RunningNode, certs: Certs) -> None:
    topic = _topic(node, certs)
    sync_values = [f"sync-{i}".encode() for i in range(50)]
    with _client(node, certs) as client:
        client.produce(topic, 0, sync_values)
        assert [r.value for r in client.fetch(topic, 0, 0)] == sync_values
    async_values = [f"async-{i}".encode() * (i + 1) for i in range(50)]

    async def run() -> list[bytes | None]:
        async with AsyncClient(node.bootstrap, tls=True, ca_file=certs.ca.cert) as client:
            await asyncio.gather(*(client.produce(topic, 1, [v]) for v in async_values[:25]))
            await client.produce(topic, 1, async_values[25:])
            return [r.value for r in await client.fetch(topic, 1, 0)]

    got = asyncio.run(run())
    assert sorted(v for v in got if v is not None) == sorted(async_values)
    assert _values(node, certs, topic, 0) == sync_values


def test_the_cli_speaks_tls(node: RunningNode, certs: Certs) -> None:
    def laminar(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "laminar.cli.main", "--tls", "--ca-file", certs.ca.cert,
             "-b", node.bootstrap, *args],
            input=stdin, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    topic = f"cli-{uuid.uuid4().hex[:8]}"
    assert laminar("topic", "create", topic).returncode == 0
    lines = [f"line {i}" for i in range(20)]
    produced = laminar("produce", topic, "--partition", "0", stdin="\n".join(lines))
    assert produced.returncode == 0, produced.stderr
    consumed = laminar("consume", topic, "--partition", "0", "--from-beginning")
    assert consumed.stdout.splitlines() == lines, consumed.stderr
    status = laminar("status", "--json")  # the admin endpoint too, over HTTPS
    assert json.loads(status.stdout)["admin"]["reachable"] is True, status.stderr


def test_a_plaintext_client_is_closed_and_the_node_serves_the_others(
    node: RunningNode, certs: Certs
) -> None:
    topic = _topic(node, certs, partitions=1)
    with _client(node, certs) as before:
        before.produce(topic, 0, [b"before"])
        with pytest.raises((ConnectionLostError, CannotConnectError)):
            Client(node.bootstrap, connect_timeout_s=3)
        _wait_for(lambda: "TLS with 127.0.0.1" in node.log_text(), "the refusal's log line")
        before.produce(topic, 0, [b"after, same connection"])
    with _client(node, certs) as fresh:
        fresh.produce(topic, 0, [b"after, new connection"])
    assert _values(node, certs, topic, 0) == [
        b"before",
        b"after, same connection",
        b"after, new connection",
    ]
    assert "connection closed" in node.log_text()


def test_a_client_that_does_not_trust_the_node_says_why(node: RunningNode, certs: Certs) -> None:
    with pytest.raises(CannotConnectError, match="certificate was not accepted"):
        Client(node.bootstrap, tls=True, ca_file=certs.other_ca.cert, connect_timeout_s=3)

    async def run() -> None:
        async with AsyncClient(node.bootstrap, tls=True, ca_file=certs.other_ca.cert):
            pass

    with pytest.raises(CannotConnectError, match="certificate was not accepted"):
        asyncio.run(run())


def test_a_slow_handshake_is_closed_at_the_first_request_timeout(
    node: RunningNode, certs: Certs
) -> None:
    """Half a ClientHello, then nothing: the node closes the connection once the
    first-request timeout has passed (the handshake counts as the first request)."""
    context = ssl.create_default_context(cafile=certs.ca.cert)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    hello_obj = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        hello_obj.do_handshake()
    hello = outgoing.read()
    bound_s = 10 * FIRST_REQUEST_TIMEOUT_S
    with socket.create_connection(("127.0.0.1", node.shard_ports[0]), timeout=bound_s) as sock:
        sock.sendall(hello[: len(hello) // 2])
        started = time.monotonic()
        try:
            closed = sock.recv(1) == b""
        except ConnectionResetError:
            closed = True
        waited = time.monotonic() - started
    assert closed
    assert waited < bound_s - 1, "the node never closed the stalled handshake"


def test_udp_is_off_with_tls(node: RunningNode, certs: Certs) -> None:
    """A datagram cannot be encrypted by TLS: no process of the node holds a UDP
    socket on the node port (the supervisor binds no steering group), the node
    port answers no datagram, and /status and `laminar status` say so."""
    pids = [node.pid, *node.shard_pids()]
    udp_ports = {
        conn.laddr.port for pid in pids for conn in psutil.Process(pid).net_connections(kind="udp")
    }
    assert node.port not in udp_ports
    assert node.info["routing_mode"] == "off" and node.info["udp"] is False
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(1.0)
        sock.sendto(Ping(0).encode(1), (node.host, node.port))
        with pytest.raises(TimeoutError):
            sock.recvfrom(65536)
    with _client(node, certs) as client:  # while TCP with TLS answers
        assert client.ping().shard_id in (0, 1)
    status = subprocess.run(
        [sys.executable, "-m", "laminar.cli.main", "--tls", "--ca-file", certs.ca.cert,
         "-b", node.bootstrap, "status"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "routing off" in status.stdout
    assert "udp       off: TLS or logins are on" in status.stdout


def test_confluent_kafka_over_ssl(node: RunningNode, certs: Certs) -> None:
    pytest.importorskip("confluent_kafka")
    topic = _topic(node, certs, partitions=1)
    tls = {"security.protocol": "SSL", "ssl.ca.location": certs.ca.cert}
    values = [f"confluent-{i}".encode() for i in range(100)]
    got = confluent_round_trip({"bootstrap.servers": node.kafka_bootstrap, **tls}, topic, values)
    assert got == _values(node, certs, topic, 0) == values


def test_kafka_python_over_ssl(node: RunningNode, certs: Certs) -> None:
    kafka = pytest.importorskip("kafka")
    topic = _topic(node, certs, partitions=1)
    tls = {"security_protocol": "SSL", "ssl_cafile": certs.ca.cert}
    producer = kafka.KafkaProducer(bootstrap_servers=node.kafka_bootstrap, **tls)
    values = [f"kafka-python-{i}".encode() for i in range(50)]
    futures = [producer.send(topic, value=v, partition=0) for v in values]
    producer.flush(30)
    offsets = [f.get(timeout=10).offset for f in futures]
    producer.close()
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=node.kafka_bootstrap, enable_auto_commit=False, **tls
    )
    consumer.assign([kafka.TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got: dict[int, bytes] = {}
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.update((r.offset, r.value) for r in records)
    consumer.close()
    assert [got[o] for o in offsets] == values == _values(node, certs, topic, 0)


def test_sighup_swaps_the_certificate_for_new_connections_only(
    node: RunningNode, certs: Certs
) -> None:
    """After the files change and SIGHUP, new connections are shown the new
    certificate on every port (the admin endpoint's HTTPS too); a connection
    made before keeps working."""
    context = ssl.create_default_context(cafile=certs.ca.cert)
    address = ("127.0.0.1", node.shard_ports[0])
    old = BlockingConnection(address, 5.0, tls=context)
    try:
        assert Pong.from_frame(old.wait(old.send(Ping()), time.monotonic() + 10))
        ports = [*node.shard_ports, node.port, *node.kafka_ports, node.admin_port]
        assert {_peer_subject(p, certs) for p in ports} == {"node"}
        renewed = make_cert(certs.dir, certs.ca, "node-renewed")
        shutil.copy(renewed.cert, certs.served.cert)
        shutil.copy(renewed.key, certs.served.key)
        os.kill(node.pid, signal.SIGHUP)
        _wait_for(
            lambda: {_peer_subject(p, certs) for p in ports} == {"node-renewed"},
            "every port to show the renewed certificate",
        )
        assert Pong.from_frame(old.wait(old.send(Ping()), time.monotonic() + 10))
    finally:
        old.close()
    assert "TLS certificate reloaded" in node.log_text()
    assert node.alive()


def test_the_readme_tls_section_runs_as_written(tmp_path: Path) -> None:
    """The README's "TLS" section, in a fresh directory: its openssl lines make
    the certificates, its `laminar-node` line is the node started here (on
    ephemeral ports), then its CLI, kcat and Python lines run against it."""
    blocks = [e for e in examples((REPO / "README.md").read_text()) if e.section == "TLS"]
    assert [e.language for e in blocks] == ["sh", "sh", "python"]
    make_certs, start_line = blocks[0].source.strip().rsplit("\n", 1)
    assert start_line == ".venv/bin/laminar-node --tls-cert-file node.crt --tls-key-file node.key"
    for line in make_certs.splitlines():
        _run_shell_line(line, dict(os.environ), "", tmp_path)
    with start_node(
        tmp_path,
        cores=2,
        tls_cert_file=tmp_path / "node.crt",
        tls_key_file=tmp_path / "node.key",
    ) as running:
        env = {**os.environ, "LAMINAR_BOOTSTRAP": running.bootstrap}
        for line in blocks[1].source.strip().splitlines():
            line = line.replace(".venv/bin/", f"{REPO}/.venv/bin/")
            line = line.replace(README_KAFKA_ADDRESS, running.kafka_bootstrap)
            _run_shell_line(line, env, running.bootstrap, tmp_path)
        _run_python([blocks[2].source], running, tmp_path)
        with Client(running.bootstrap, tls=True, ca_file=str(tmp_path / "ca.crt")) as client:
            assert [r.value for r in client.fetch("secured", 0, 0)] == [b"hello", b"over TLS"]


def test_a_connection_the_node_closes_ends_with_close_notify(
    node: RunningNode, certs: Certs
) -> None:
    """Here closed for sending no request in time: the client reads a clean
    end (close_notify), which tells it from a cut (Python's ssl raises
    SSLEOFError on a cut when ragged ends are not suppressed)."""
    context = ssl.create_default_context(cafile=certs.ca.cert)
    with (
        socket.create_connection(
            ("127.0.0.1", node.shard_ports[0]), timeout=10 * FIRST_REQUEST_TIMEOUT_S
        ) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1", suppress_ragged_eofs=False) as tls,
    ):
        assert tls.recv(1) == b""


def test_the_blocking_client_ends_tls_with_close_notify(certs: Certs) -> None:
    """`TlsSocket.close` says close_notify: the server reads a clean end."""
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(certs.served.cert, certs.served.key)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        ended: list[bytes] = []

        def serve() -> None:
            conn, _ = listener.accept()
            with server_context.wrap_socket(
                conn, server_side=True, suppress_ragged_eofs=False
            ) as tls:
                tls.settimeout(10)
                ended.append(tls.recv(1))

        server = threading.Thread(target=serve)
        server.start()
        client = connect(listener.getsockname()[:2], 10, client_context(True, certs.ca.cert))
        client.close()
        server.join(10)
    assert ended == [b""]
