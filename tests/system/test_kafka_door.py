"""The Kafka door on one node, with real Kafka clients, unmodified: kcat
(librdkafka 1.7), confluent-kafka (librdkafka 2.x), kafka-python 3 and
aiokafka. Records are checked by identity, and across doors: what one door
wrote, the other reads with the same index, key, value and headers."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from laminar.client import Client
from laminar.kafka import messages as m
from laminar.placement import partition_id, shard_for
from tests.system.kafka_wire import record_batch
from tests.system.nodes import RunningNode, start_node

pytestmark = pytest.mark.timeout(120)

kafka = pytest.importorskip("kafka")
confluent_kafka = pytest.importorskip("confluent_kafka")
aiokafka = pytest.importorskip("aiokafka")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningNode]:
    with start_node(tmp_path_factory.mktemp("kafka"), cores=2, flush="never") as running:
        yield running


def _topic(node: RunningNode, partitions: int = 2) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    with Client(node.bootstrap) as client:
        client.create_topic(name, partitions)
    return name


def _laminar_records(node: RunningNode, topic: str, partition: int) -> list[tuple]:
    with Client(node.bootstrap) as client:
        return [(r.index, r.key, r.value, r.headers) for r in client.fetch(topic, partition, 0)]


def _kcat(node: RunningNode, *args: str, stdin: bytes | None = None) -> bytes:
    done = subprocess.run(
        ["kcat", "-b", node.kafka_bootstrap, *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


# -- metadata and the brokers ---------------------------------------------------


def test_kcat_lists_one_broker_per_shard_and_each_partition_s_leader(
    node: RunningNode,
) -> None:
    topic = _topic(node, partitions=4)
    listing = json.loads(_kcat(node, "-L", "-J", "-t", topic))
    ports = sorted(b["name"].rsplit(":", 1)[1] for b in listing["brokers"])
    assert ports == sorted(str(p) for p in node.kafka_ports)
    (described,) = listing["topics"]
    assert described["topic"] == topic
    leaders = {p["partition"]: p["leader"] for p in described["partitions"]}
    assert sorted(leaders) == [0, 1, 2, 3]
    assert set(leaders.values()) <= {b["id"] for b in listing["brokers"]}


# -- produce and consume, across doors ------------------------------------------


def test_kcat_produces_keyed_lines_that_both_doors_read_back(node: RunningNode) -> None:
    topic = _topic(node, partitions=1)
    lines = [f"k{i}:value {i}" for i in range(50)]
    _kcat(node, "-P", "-t", topic, "-p", "0", "-K:", stdin="\n".join(lines).encode() + b"\n")
    laminar = _laminar_records(node, topic, 0)
    assert [(k, v) for _, k, v, _ in laminar] == [
        (f"k{i}".encode(), f"value {i}".encode()) for i in range(50)
    ]
    out = _kcat(node, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%o %k %s\n")
    consumed = [line.split(" ", 2) for line in out.decode().splitlines()]
    assert consumed == [[str(i), k.decode(), v.decode()] for i, k, v, _ in laminar]


def test_laminar_records_read_through_kafka_with_keys_headers_and_timestamps(
    node: RunningNode,
) -> None:
    topic = _topic(node, partitions=1)
    with Client(node.bootstrap) as client:
        client.produce(
            topic,
            0,
            [b"a", b"b", b""],
            keys=[b"ka", None, b""],
            headers=[{"h": b"1"}, None, {"x": b"", "y": b"2"}],
        )
        stored = client.fetch(topic, 0, 0)
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": node.kafka_bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        got = []
        while len(got) < 3:
            message = consumer.poll(10)
            assert message is not None, "no record within 10 s"
            assert message.error() is None, message.error()
            got.append(message)
    finally:
        consumer.close()
    for record, message in zip(stored, got, strict=True):
        assert message.offset() == record.index
        assert message.key() == record.key
        assert message.value() == record.value
        assert dict(message.headers() or []) == (record.headers or {})
        assert message.timestamp()[1] == record.timestamp_ms


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("idempotent", [False, True])
def test_confluent_kafka_produces_every_codec_and_reads_by_identity(
    node: RunningNode, compression: str, idempotent: bool
) -> None:
    topic = _topic(node, partitions=2)
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": node.kafka_bootstrap,
            "compression.type": compression,
            "enable.idempotence": idempotent,
        }
    )
    acked: dict[bytes, tuple[int, int]] = {}
    sent = {f"{compression}-{i}".encode() * 3: i for i in range(200)}

    def on_delivery(err: object, message: object) -> None:
        assert err is None, err
        acked[message.value()] = (message.partition(), message.offset())  # type: ignore[attr-defined]

    for value, i in sent.items():
        producer.produce(
            topic,
            value=value,
            key=str(i % 7).encode(),
            headers=[("n", str(i).encode())],
            on_delivery=on_delivery,
        )
    assert producer.flush(30) == 0
    assert len(acked) == 200
    seen: dict[bytes, tuple[int, int]] = {}
    for partition in (0, 1):
        for index, key, value, headers in _laminar_records(node, topic, partition):
            assert value not in seen, "a record stored twice"
            seen[value] = (partition, index)
            assert (key, headers) == (str(sent[value] % 7).encode(), {"n": b"%d" % sent[value]})
    assert seen == acked


def test_kafka_python_defaults_are_idempotent_and_its_consumer_reads_everything(
    node: RunningNode,
) -> None:
    topic = _topic(node, partitions=2)
    producer = kafka.KafkaProducer(bootstrap_servers=node.kafka_bootstrap)
    futures = [producer.send(topic, value=f"v{i}".encode(), key=b"k%d" % i) for i in range(100)]
    producer.flush(30)
    acked = {(m.partition, m.offset) for m in (f.get(timeout=10) for f in futures)}
    producer.close()
    consumer = kafka.KafkaConsumer(bootstrap_servers=node.kafka_bootstrap, enable_auto_commit=False)
    parts = [kafka.TopicPartition(topic, p) for p in (0, 1)]
    consumer.assign(parts)
    consumer.seek_to_beginning()
    got: dict[tuple[int, int], bytes] = {}
    for _ in range(50):
        for records in consumer.poll(timeout_ms=500).values():
            for r in records:
                got[(r.partition, r.offset)] = r.value
        if len(got) >= 100:
            break
    consumer.close()
    assert set(got) == acked
    assert sorted(got.values()) == sorted(f"v{i}".encode() for i in range(100))


def test_aiokafka_round_trip(node: RunningNode) -> None:
    topic = _topic(node, partitions=1)

    async def run() -> list[tuple[int, bytes | None, bytes | None]]:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=node.kafka_bootstrap)
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait(topic, value=b"v%d" % i, key=None if i % 2 else b"k")
            await producer.send_and_wait(topic, value=None, key=b"tomb")
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=node.kafka_bootstrap, enable_auto_commit=False
        )
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            out = []
            while len(out) < 21:
                batch = await consumer.getmany(tp, timeout_ms=5000)
                assert batch, "no records within 5 s"
                out += [(r.offset, r.key, r.value) for r in batch[tp]]
            return out
        finally:
            await consumer.stop()

    got = asyncio.run(run())
    laminar = _laminar_records(node, topic, 0)
    assert got == [(i, k, v) for i, k, v, _ in laminar]
    assert got[-1][1:] == (b"tomb", None)  # a null value stays null through both doors


# -- admin --------------------------------------------------------------------------


def test_admin_client_creates_describes_and_deletes_topics(node: RunningNode) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": node.kafka_bootstrap})
    name = f"adm-{uuid.uuid4().hex[:8]}"
    done = admin.create_topics([NewTopic(name, 3, config={"retention.ms": "60000"})])
    done[name].result(30)
    with Client(node.bootstrap) as client:
        (info,) = [t for t in client.list_topics() if t.name == name]
    assert info.partitions == 3 and info.config["retention.ms"] == 60000
    again = admin.create_topics([NewTopic(name, 1)])
    with pytest.raises(confluent_kafka.KafkaException) as exists:
        again[name].result(30)
    assert exists.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS
    described = admin.describe_configs([ConfigResource("topic", name)])
    configs = next(iter(described.values())).result(30)
    assert configs["retention.ms"].value == "60000"
    admin.delete_topics([name])[name].result(30)
    with Client(node.bootstrap) as client:
        assert name not in {t.name for t in client.list_topics()}


# -- bad input ----------------------------------------------------------------------


def _raw(node: RunningNode, frame: bytes, port: int | None = None) -> bytes:
    """The answer to one request frame sent on a connection of its own."""
    with socket.create_connection((node.host, port or node.kafka_ports[0]), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _read(sock, 4))[0]
        return _read(sock, size)


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "the node closed the connection"
        out += chunk
    return out


def test_an_unknown_api_key_gets_unsupported_version_and_the_node_serves_on(
    node: RunningNode,
) -> None:
    answer = _raw(node, struct.pack(">hhi", 999, 0, 77) + b"\x00\x00")
    correlation, code = struct.unpack(">ih", answer[:6])
    assert (correlation, code) == (77, 35)
    # an ApiVersions version from the future: the v0 answer lists what is served
    answer = _raw(node, struct.pack(">hhi", 18, 99, 78) + b"\x00\x00")
    correlation, code = struct.unpack(">ih", answer[:6])
    assert (correlation, code) == (78, 35)
    listing = json.loads(_kcat(node, "-L", "-J"))
    assert listing["brokers"]


def _request(api_key: int, version: int, correlation: int, body: object) -> bytes:
    """A request frame (without its size) as a Kafka client writes it."""
    out = bytearray(struct.pack(">hhih", api_key, version, correlation, 4) + b"test")
    if version >= 9 and api_key == 0:  # Produce v9+ is flexible: header v2
        out.append(0)
    m.encode(body, version, out)
    return bytes(out)


def _produce_answer(node: RunningNode, topic: str, records: bytes) -> m.ProduceResponse:
    body = m.ProduceRequest(
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            m.ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    m.ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)
                ],
            )
        ],
    )
    with Client(node.bootstrap) as client:
        (info,) = [t for t in client.list_topics() if t.name == topic]
    owner = shard_for(partition_id(info.topic_id, 0), len(node.kafka_ports))
    raw = _raw(node, _request(0, 8, 5, body), node.kafka_ports[owner])
    assert struct.unpack(">i", raw[:4])[0] == 5
    answer, _ = m.decode(m.ProduceResponse, 8, memoryview(raw), 4)
    return answer


def test_a_batch_with_a_wrong_crc_is_refused_and_nothing_is_stored(node: RunningNode) -> None:
    topic = _topic(node, partitions=1)
    good = record_batch([b"a", b"b"])
    damaged = bytearray(good)
    damaged[-1] ^= 0x01  # the last value's byte: inside the CRC
    answer = _produce_answer(node, topic, bytes(damaged))
    (part,) = answer.responses[0].partition_responses
    assert part.error_code == 2  # CORRUPT_MESSAGE
    assert _laminar_records(node, topic, 0) == []
    answer = _produce_answer(node, topic, good)  # the same connection path serves on
    assert answer.responses[0].partition_responses[0].error_code == 0
    assert [v for _, _, v, _ in _laminar_records(node, topic, 0)] == [b"a", b"b"]


def test_a_malformed_request_gets_an_error_and_an_oversized_one_a_closed_connection(
    node: RunningNode,
) -> None:
    truncated = _request(3, 4, 9, m.MetadataRequest(topics=None))[:-1]  # its last byte missing
    answer = _raw(node, truncated)
    assert struct.unpack(">i", answer[:4])[0] == 9
    with socket.create_connection((node.host, node.kafka_ports[0]), timeout=10) as sock:
        sock.sendall(struct.pack(">i", 1 << 30) + b"\x00" * 64)  # a 1 GiB frame announced
        assert sock.recv(1) == b"", "the node closes the connection"
    listing = json.loads(_kcat(node, "-L", "-J"))  # and serves everyone else
    assert listing["brokers"]


# -- Spark's Kafka source, step by step -------------------------------------------


def test_the_calls_spark_s_kafka_source_makes(node: RunningNode) -> None:
    """Spark's Kafka source (its jars cannot be fetched on this machine) asks
    Admin for the topic's partitions and for earliest, latest and by-timestamp
    offsets, then assign()s, seek()s, poll()s and asks position(): the same
    calls, with confluent-kafka."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient, OffsetSpec

    topic = _topic(node, partitions=2)
    with Client(node.bootstrap) as client:
        client.produce(topic, 0, [b"x%d" % i for i in range(10)])
        middle = client.fetch(topic, 0, 5)[0]
        client.produce(topic, 1, [b"y"])
    admin = AdminClient({"bootstrap.servers": node.kafka_bootstrap})
    (described,) = admin.describe_topics(TopicCollection([topic])).values()
    assert [p.id for p in described.result(30).partitions] == [0, 1]
    tp = confluent_kafka.TopicPartition(topic, 0)
    specs = {
        "earliest": OffsetSpec.earliest(),
        "latest": OffsetSpec.latest(),
        "at": OffsetSpec.for_timestamp(middle.timestamp_ms),
    }
    found = {
        name: next(iter(admin.list_offsets({tp: spec}).values())).result(30).offset
        for name, spec in specs.items()
    }
    assert found["earliest"] == 0 and found["latest"] == 10
    assert found["at"] <= middle.index  # records stamped in one append share a timestamp
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": node.kafka_bootstrap,
            "group.id": "spark",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        consumer.seek(confluent_kafka.TopicPartition(topic, 0, 7))
        message = None
        while message is None:
            message = consumer.poll(10)
        assert (message.offset(), message.value()) == (7, b"x7")
        (position,) = consumer.position([confluent_kafka.TopicPartition(topic, 0)])
        assert position.offset == 8
    finally:
        consumer.close()


def test_a_transactional_producer_is_refused_with_a_clear_error(node: RunningNode) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": node.kafka_bootstrap, "transactional.id": "billing-tx"}
    )
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        producer.init_transactions(20)
    assert (
        refused.value.args[0].code()
        == confluent_kafka.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    )


def test_admin_lists_and_describes_groups_and_the_cluster(node: RunningNode) -> None:
    from confluent_kafka.admin import AdminClient

    topic = _topic(node, partitions=2)
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": node.kafka_bootstrap, "group.id": f"g-{topic}"}
    )
    try:
        consumer.subscribe([topic])
        while not consumer.assignment():
            consumer.poll(0.2)
        admin = AdminClient({"bootstrap.servers": node.kafka_bootstrap})
        listed = admin.list_consumer_groups().result(30)
        assert f"g-{topic}" in {g.group_id for g in listed.valid}
        described = admin.describe_consumer_groups([f"g-{topic}"])[f"g-{topic}"].result(30)
        (member,) = described.members
        assert {(tp.topic, tp.partition) for tp in member.assignment.topic_partitions} == {
            (topic, 0),
            (topic, 1),
        }
        cluster = admin.describe_cluster().result(30)
        ports = sorted(n.port for n in cluster.nodes)
        assert ports == sorted(node.kafka_ports)
    finally:
        consumer.close()
