"""kcat, kafka-python and aiokafka, unmodified, on every topology
(confluent-kafka has its own checks in test_kafka.py). Each produces to a
partition before and after a kill of its leader (the clients follow the
leader to its new broker), reads it back from the beginning, and consumes it
in a group that commits (lag 0 on laminar's door); kafka-python and aiokafka
create and delete a topic with their admin clients (kcat has none). Every acknowledged
record is stored exactly once, at the offset its client was told, checked by
identity through laminar's door; every client reads the same records."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import time
from collections.abc import Callable

import aiokafka
import aiokafka.admin
import kafka
import kafka.admin

from laminar.client import Client
from laminar.kafka import messages as m
from tests.matrix.reading import check_once, read_partition, topic_name
from tests.matrix.topologies import Topology
from tests.support import wait_until
from tests.system.kafka_wire import KafkaWire

PER_PHASE = 20
TIMEOUT_S = 60.0
FORMAT = ("-f", "%o %s\\n")
MEMBER = {"auto_offset_reset": "earliest", "enable_auto_commit": False}
"""A group member that reads from the start and commits only when told."""
Acked = dict[bytes, int | None]
"""Value -> the offset its producer was told (None: the client does not say)."""

# -- producers: each returns what was acknowledged -----------------------------------


def _kcat_produce(bootstrap: str, topic: str, values: list[bytes]) -> Acked:
    done = subprocess.run(
        ["kcat", "-b", bootstrap, "-P", "-t", topic, "-p", "0"],
        input=b"\n".join(values) + b"\n",
        capture_output=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0 and b"Delivery failed" not in done.stderr, done.stderr.decode()
    return dict.fromkeys(values)  # kcat -P reports no offsets


def _kafka_python_produce(bootstrap: str, topic: str, values: list[bytes]) -> Acked:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap)  # idempotent by default
    try:
        futures = [(v, producer.send(topic, value=v, partition=0)) for v in values]
        return {v: f.get(timeout=TIMEOUT_S).offset for v, f in futures}
    finally:
        producer.close(timeout=10)


def _aiokafka_produce(bootstrap: str, topic: str, values: list[bytes]) -> Acked:
    async def run() -> Acked:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            return {v: (await producer.send_and_wait(topic, v, partition=0)).offset for v in values}
        finally:
            await producer.stop()

    return asyncio.run(asyncio.wait_for(run(), TIMEOUT_S))


# -- readers: (offset, value) of the whole partition ------------------------------


def _kcat_read(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    done = subprocess.run(
        ["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", *FORMAT],
        capture_output=True,
        timeout=TIMEOUT_S,
        check=True,
    )
    pairs = (line.split(b" ", 1) for line in done.stdout.splitlines())
    return [(int(offset), value) for offset, value in pairs]


def _kafka_python_read(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = kafka.TopicPartition(topic, 0)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, "kafka-python did not read to the end"
            for records in consumer.poll(200).values():
                out += [(r.offset, r.value) for r in records]
        return out
    finally:
        consumer.close()


def _aiokafka_read(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    async def run() -> list[tuple[int, bytes]]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        tp = aiokafka.TopicPartition(topic, 0)
        try:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            end = (await consumer.end_offsets([tp]))[tp]
            out: list[tuple[int, bytes]] = []
            while await consumer.position(tp) < end:
                got = await consumer.getmany(tp, timeout_ms=200)
                out += [(r.offset, r.value) for r in got.get(tp, [])]
            return out
        finally:
            await consumer.stop()

    return asyncio.run(asyncio.wait_for(run(), TIMEOUT_S))


# -- group members: read everything expected, commit, leave ------------------------


def _kcat_group(bootstrap: str, topic: str, group: str, expected: set[bytes]) -> None:
    """kcat's balanced consumer (-G): to the end of every partition, then it
    commits and leaves."""
    done = subprocess.run(
        ["kcat", "-b", bootstrap, "-G", group, "-o", "beginning", "-e", "-f", "%s\\n", topic],
        capture_output=True,
        timeout=TIMEOUT_S,
        check=True,
    )
    assert expected <= set(done.stdout.splitlines()), done.stderr.decode()


def _kafka_python_group(bootstrap: str, topic: str, group: str, expected: set[bytes]) -> None:
    consumer = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, **MEMBER)
    try:
        seen: set[bytes] = set()
        deadline = time.monotonic() + TIMEOUT_S
        while not expected <= seen:
            assert time.monotonic() < deadline, "the kafka-python member did not read it all"
            seen.update(r.value for records in consumer.poll(200).values() for r in records)
        consumer.commit()
    finally:
        consumer.close()


def _aiokafka_group(bootstrap: str, topic: str, group: str, expected: set[bytes]) -> None:
    async def run() -> None:
        consumer = aiokafka.AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, **MEMBER
        )
        await consumer.start()
        try:
            seen: set[bytes] = set()
            while not expected <= seen:
                got = await consumer.getmany(timeout_ms=200)
                seen.update(r.value for records in got.values() for r in records)
            await consumer.commit()
        finally:
            await consumer.stop()

    asyncio.run(asyncio.wait_for(run(), TIMEOUT_S))


# -- admin clients: create a topic, then delete it ---------------------------------


def _kafka_python_admin(
    bootstrap: str, name: str, replicas: int, topics: Callable[[], set[str]]
) -> None:
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([kafka.admin.NewTopic(name, 2, replicas)])
        wait_until(lambda: name in topics(), f"{name} created through kafka-python")
        admin.delete_topics([name])
    finally:
        admin.close()


def _aiokafka_admin(
    bootstrap: str, name: str, replicas: int, topics: Callable[[], set[str]]
) -> None:
    async def run() -> None:
        admin = aiokafka.admin.AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics([aiokafka.admin.NewTopic(name, 2, replicas)])
            await asyncio.to_thread(
                wait_until, lambda: name in topics(), f"{name} made by aiokafka"
            )
            await admin.delete_topics([name])
        finally:
            await admin.close()

    asyncio.run(asyncio.wait_for(run(), TIMEOUT_S))


PRODUCERS = {"kcat": _kcat_produce, "kafka-python": _kafka_python_produce}
PRODUCERS["aiokafka"] = _aiokafka_produce
READERS = {"kcat": _kcat_read, "kafka-python": _kafka_python_read, "aiokafka": _aiokafka_read}
GROUPS = {"kcat": _kcat_group, "kafka-python": _kafka_python_group, "aiokafka": _aiokafka_group}
ADMINS = {"kafka-python": _kafka_python_admin, "aiokafka": _aiokafka_admin}


def _listed_ports(topology: Topology) -> set[int]:
    """The Kafka ports every shard of every live node lists as brokers."""
    listed: set[int] = set()
    for node in topology.nodes.values():
        if node.alive():
            for port in node.kafka_ports:
                with KafkaWire(node.host, port) as wire:
                    listed |= {b.port for b in wire.call(m.MetadataRequest(topics=[]), 9).brokers}
    return listed


def _wait_until_unlisted(topology: Topology, killed: str) -> None:
    """Wait until no live shard lists a broker of `killed` (Kafka lists live
    brokers only, and admin clients send to any one listed)."""
    if killed in topology.killed:  # a single node is back at once
        dead = set(topology.nodes[killed].kafka_ports)
        wait_until(lambda: not dead & _listed_ports(topology), f"no shard lists {killed}")


def test_kcat_kafka_python_and_aiokafka_ride_out_a_leader_kill(healed: Topology) -> None:
    topic = topic_name("kclients")
    with Client(healed.bootstrap) as client:
        client.create_topic(topic, 1, replication_factor=healed.replication_factor)
    acked: Acked = {}
    for phase in ("before", "after"):
        if phase == "after":
            _wait_until_unlisted(healed, healed.kill_leader(topic, 0))
        for library, produce in PRODUCERS.items():
            values = [b"%s-%s-%d" % (library.encode(), phase.encode(), n) for n in range(PER_PHASE)]
            acked |= produce(healed.kafka_bootstrap, topic, values)
    assert len(acked) == 2 * PER_PHASE * len(PRODUCERS)
    with Client(healed.bootstrap) as client:
        stored = read_partition(client, topic, 0)
    check_once(stored, acked)
    for library, read in READERS.items():
        assert read(healed.kafka_bootstrap, topic) == stored, f"{library} reads what laminar holds"

    with Client(healed.bootstrap) as client:

        def topics() -> set[str]:
            return {t.name for t in client.list_topics()}

        for library, member in GROUPS.items():
            group = f"{topic}-{library}"
            member(healed.kafka_bootstrap, topic, group, set(acked))
            assert client.describe_group(group).lag == 0, f"{library}'s commit is the position"
        for library, admin in ADMINS.items():
            name = f"{topic}-{library}-admin"
            admin(healed.kafka_bootstrap, name, healed.replication_factor, topics)
            gone = functools.partial(lambda n: n not in topics(), name)
            wait_until(gone, f"{name} deleted through {library}")
