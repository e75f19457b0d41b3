"""A Kafka consumer group member as its own process, unmodified client library:
`python -m tests.system.kafka_member LIBRARY BOOTSTRAP GROUP TOPIC LOG`, with
LIBRARY one of confluent, kafka-python, aiokafka.

It subscribes, polls, and commits synchronously after each batch until
SIGTERM (then it closes, leaving the group), appending to LOG one line per
record processed, `GOT partition offset value`, flushed at once, and
`COMMITTED` after each acknowledged commit or `FAILED reason` after a refused
one (a rebalance moved a partition first). A SIGKILLed member's log ends where
it died.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from typing import TextIO

SESSION_MS = 6000
HEARTBEAT_MS = 500


def _confluent(bootstrap: str, group: str, topic: str, log: TextIO, stop: threading.Event) -> None:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS,
        }
    )
    consumer.subscribe([topic])
    try:
        while not stop.is_set():
            batch = consumer.consume(num_messages=100, timeout=0.2)
            batch = [r for r in batch if r.error() is None]
            for r in batch:
                log.write(f"GOT {r.partition()} {r.offset()} {r.value().decode()}\n")
            if batch:
                try:
                    consumer.commit(asynchronous=False)
                    log.write("COMMITTED\n")
                except confluent_kafka.KafkaException as exc:
                    log.write(f"FAILED {exc}\n")
    finally:
        consumer.close()


def _kafka_python(
    bootstrap: str, group: str, topic: str, log: TextIO, stop: threading.Event
) -> None:
    import kafka
    import kafka.errors

    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
    )
    try:
        while not stop.is_set():
            batches = consumer.poll(timeout_ms=200)
            for records in batches.values():
                for r in records:
                    log.write(f"GOT {r.partition} {r.offset} {r.value.decode()}\n")
            if batches:
                try:
                    consumer.commit()
                    log.write("COMMITTED\n")
                except kafka.errors.KafkaError as exc:
                    log.write(f"FAILED {exc!r}\n")
    finally:
        consumer.close()


def _aiokafka(bootstrap: str, group: str, topic: str, log: TextIO, stop: threading.Event) -> None:
    import aiokafka
    import aiokafka.errors

    async def run() -> None:
        consumer = aiokafka.AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
        )
        await consumer.start()
        try:
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=200)
                for records in batches.values():
                    for r in records:
                        log.write(f"GOT {r.partition} {r.offset} {r.value.decode()}\n")
                if batches:
                    try:
                        await consumer.commit()
                        log.write("COMMITTED\n")
                    except aiokafka.errors.KafkaError as exc:
                        log.write(f"FAILED {exc!r}\n")
        finally:
            await consumer.stop()

    asyncio.run(run())


LIBRARIES = {"confluent": _confluent, "kafka-python": _kafka_python, "aiokafka": _aiokafka}


def main(library: str, bootstrap: str, group: str, topic: str, log_path: str) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with open(log_path, "a", buffering=1) as log:
        LIBRARIES[library](bootstrap, group, topic, log, stop)


if __name__ == "__main__":
    main(*sys.argv[1:6])
