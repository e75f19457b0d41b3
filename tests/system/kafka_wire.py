"""A bare Kafka connection for tests: one request at a time, with the door's
own codec, over TLS or not, and a SCRAM login made with laminar's
`ScramClient`. Real clients hide what the node answered and when it closed;
this shows both."""

from __future__ import annotations

import os
import socket
import ssl
import struct
import time
import uuid
from pathlib import Path
from typing import Any

from kafka.record.default_records import DefaultRecordBatchBuilder

from laminar.kafka import messages as m
from laminar.security.scram import Mechanism, ScramClient

_FLEXIBLE_HEADER_SKIP = 1  # response header v1: one empty tagged-field byte


class Closed(Exception):
    """The node closed the connection instead of answering."""


class KafkaWire:
    """One connection to a Kafka port (see the module docstring)."""

    def __init__(self, host: str, port: int, ca_file: str | None = None) -> None:
        sock = socket.create_connection((host, port), timeout=15)
        if ca_file is not None:
            context = ssl.create_default_context(cafile=ca_file)
            sock = context.wrap_socket(sock, server_hostname=host)
        self.sock = sock
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> KafkaWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, body: Any, version: int) -> int:
        """Send one request; its correlation id."""
        self._correlation += 1
        api_key = type(body).API_KEY
        flexible = _flexible(type(body), version)
        out = bytearray(struct.pack(">hhih", api_key, version, self._correlation, 4) + b"test")
        if flexible:
            out.append(0)
        m.encode(body, version, out)
        self.sock.sendall(struct.pack(">i", len(out)) + bytes(out))
        return self._correlation

    def receive(self, request_type: Any, version: int) -> Any:
        """The next answer, decoded as the response to `request_type` at `version`."""
        size = struct.unpack(">i", self._read(4))[0]
        frame = self._read(size)
        response = m.RESPONSES[request_type.API_KEY]
        pos = 4
        if request_type is not m.ApiVersionsRequest and _flexible(response, version):
            pos += _FLEXIBLE_HEADER_SKIP
        body, _ = m.decode(response, version, memoryview(frame), pos)
        return body

    def call(self, body: Any, version: int) -> Any:
        self.send(body, version)
        return self.receive(type(body), version)

    def closed_by_node(self) -> bool:
        """Whether the node closed the connection (waits for it, up to the timeout)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, ssl.SSLError):
            return True

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise Closed(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return out

    def log_in(
        self, user: str, password: str, mechanism: Mechanism = Mechanism.SCRAM_SHA_256
    ) -> Any:
        """A SCRAM login; the last SaslAuthenticateResponse (error_code 0: logged in)."""
        handshake = self.call(m.SaslHandshakeRequest(mechanism=mechanism.value), 1)
        assert handshake.error_code == 0, handshake
        client = ScramClient(mechanism, user, password)
        first = self.call(m.SaslAuthenticateRequest(auth_bytes=client.first()), 2)
        if first.error_code:
            return first
        final = self.call(m.SaslAuthenticateRequest(auth_bytes=client.final(first.auth_bytes)), 2)
        if final.error_code == 0:
            client.verify(final.auth_bytes)
        return final


def _flexible(cls: type, version: int) -> bool:
    flex = cls.FLEXIBLE_VERSIONS  # type: ignore[attr-defined]
    return flex is not None and flex[0] <= version <= flex[1]


def record_batch(values: list[bytes]) -> bytes:
    """A RecordBatch v2 of `values`, as a producer without idempotence sends it."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for k, value in enumerate(values):
        builder.append(k, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    return bytes(builder.build())


def confluent_round_trip(config: dict[str, Any], topic: str, values: list[bytes]) -> list[bytes]:
    """Produce `values` to partition 0 of `topic` with confluent-kafka (each
    acknowledged), then read the partition from offset 0: what was read."""
    import confluent_kafka

    producer = confluent_kafka.Producer(config)
    acked: list[bytes] = []

    def on_delivery(err: object, message: Any) -> None:
        assert err is None, err
        acked.append(message.value())

    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert sorted(acked) == sorted(values)
    consumer = confluent_kafka.Consumer(
        {**config, "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < len(values) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.close()
    return got


def write_user_file(directory: Path, user: str, password: str) -> str:
    """An owner-only `--bootstrap-user-file` naming `user`."""
    path = directory / "admin.cred"
    path.write_text(f"{user}:{password}\n")
    os.chmod(path, 0o600)
    return str(path)
