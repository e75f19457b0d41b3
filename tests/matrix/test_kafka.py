"""The Kafka door on every topology, with confluent-kafka (librdkafka): an
idempotent producer delivers every acknowledged record exactly once across a
kill of the partition's leader (the client follows NOT_LEADER_OR_FOLLOWER to
the new leader's broker), and a Kafka consumer group keeps its committed
positions across a kill of its coordinator's node."""

from __future__ import annotations

import contextlib
import threading

import confluent_kafka

from laminar.client import Client, calls
from laminar.groups.positions import POSITIONS_TOPIC
from tests.matrix.reading import topic_name
from tests.matrix.topologies import Topology
from tests.support import wait_until

PARTITIONS = 2


def _stored(topology: Topology, topic: str) -> list[bytes]:
    """Every record of the topic, read through laminar's door."""
    out: list[bytes] = []
    with Client(topology.bootstrap) as client:
        for partition in range(PARTITIONS):
            index = 0
            while records := client.fetch(topic, partition, index):
                out += [r.value for r in records]
                index = records[-1].index + 1
    return out


def test_an_idempotent_kafka_producer_writes_each_acknowledged_record_once_across_a_leader_kill(
    healed: Topology,
) -> None:
    topic = topic_name("kprod")
    with Client(healed.bootstrap) as client:
        client.create_topic(topic, PARTITIONS, replication_factor=healed.replication_factor)
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": healed.kafka_bootstrap,
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 120_000,
        }
    )
    acked: list[bytes] = []
    failed: list[object] = []

    def on_delivery(err: object, message: confluent_kafka.Message) -> None:
        if err is None:
            acked.append(message.value())
        else:
            failed.append(err)

    def produce(values: range) -> None:
        for n in values:
            producer.produce(
                topic,
                b"%s-%d" % (topic.encode(), n),
                partition=n % PARTITIONS,
                on_delivery=on_delivery,
            )
            producer.poll(0)

    produce(range(0, 200))
    assert producer.flush(60) == 0
    healed.kill_leader(topic, 0)
    produce(range(200, 400))
    assert producer.flush(120) == 0, "records still unacknowledged"
    assert not failed, failed
    stored = _stored(healed, topic)
    assert sorted(stored) == sorted(acked), "each acknowledged record stored exactly once"
    assert len(acked) == 400


def test_a_kafka_group_keeps_its_positions_across_a_coordinator_kill(healed: Topology) -> None:
    topic, group = topic_name("kgroup"), f"kreaders-{healed.name}"
    with Client(healed.bootstrap) as client:
        client.create_topic(topic, PARTITIONS, replication_factor=healed.replication_factor)
        for n in range(100):
            client.produce(topic, n % PARTITIONS, [b"r%d" % n])
    seen: list[bytes] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def member() -> None:
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": healed.kafka_bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
            }
        )
        consumer.subscribe([topic])
        try:
            while not stop.is_set():
                batch = [m for m in consumer.consume(100, timeout=0.2) if m.error() is None]
                seen.extend(m.value() for m in batch)
                if batch:
                    # the coordinator may have moved: committed again with the next batch
                    with contextlib.suppress(confluent_kafka.KafkaException):
                        consumer.commit(asynchronous=False)
        except BaseException as exc:
            errors.append(exc)
        finally:
            consumer.close()

    thread = threading.Thread(target=member, daemon=True)
    thread.start()
    expected = {b"r%d" % n for n in range(100)}
    wait_until(lambda: expected <= set(seen), "the member read the backlog")
    with Client(healed.bootstrap) as client:
        wait_until(lambda: client.describe_group(group).lag == 0, "its positions committed")
        coordinator = client._start(calls.find_coordinator(group)).result()
    healed.kill_leader(POSITIONS_TOPIC, coordinator.partition)
    with Client(healed.bootstrap) as client:
        for n in range(100, 150):
            client.produce(topic, n % PARTITIONS, [b"r%d" % n])
    expected |= {b"r%d" % n for n in range(100, 150)}
    wait_until(lambda: expected <= set(seen), "the member read on after the coordinator's kill")
    stop.set()
    thread.join(60)
    assert not errors, errors
    with Client(healed.bootstrap) as client:
        described = wait_until(
            lambda: (d := client.describe_group(group)).lag == 0 and d, "positions at the end"
        )
    assert {p.partition for p in described.partitions} == set(range(PARTITIONS))
