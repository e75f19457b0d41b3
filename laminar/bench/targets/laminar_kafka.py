"""laminar's Kafka door: the node of `laminar`, driven by confluent-kafka.

The server is the very node the `laminar` target starts (`--flush always`);
the client is confluent-kafka (librdkafka, unmodified) talking to the shards'
Kafka ports, the way a Kafka application would:

- streams are topics created with the Kafka admin API (CreateTopics);
- a produce hands each record to `Producer.produce` for its partition and
  returns once every delivery report of the batch is in. librdkafka forms the
  Kafka batches itself (linger, batch size): with a window of 64 records in
  flight it batches what those 64 leave it. `acks` is confluent's default,
  all: the door answers after its group-commit flush (write + fdatasync). A
  thread polls the producer and hands each poll's finished batches to the
  event loop in one call;
- a reader is a `Consumer` with `assign()` at offset 0 (a backlog) or at the
  high watermark asked when it opens (a tail), no group:
  `consume(num_messages=...)`. librdkafka fetches ahead
  in its own threads whatever the harness's prefetch says (it cannot be
  turned off), so a Kafka consumer always reads with prefetch.

Variants: `laminar-kafka` is confluent's producer defaults; `laminar-kafka:
linger5` sets `linger.ms=5`, which librdkafka >= 1.5 already has as its default
(the two must measure the same; the variant keeps the issue's named setting
explicit).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # NewTopic: not in its __all__
    AdminClient,
    NewTopic,
)

from laminar.bench.targets.base import Durability, Endpoint, Start, SystemUnavailable
from laminar.bench.targets.laminar_target import SECURED, LaminarSystem

KIND = "laminar-kafka"
VARIANTS: dict[str, dict[str, str]] = {
    "default": {},
    "linger5": {"linger.ms": "5"},
    "tls": {},
    "tls-scram": {},
}
"""Producer settings per variant, on top of confluent's defaults (`tls` sets
`security.protocol=SSL` on every client instead, `tls-scram` `SASL_SSL` with
SCRAM-SHA-256 as the laminar target's ordinary user: `LaminarKafkaSystem.start`)."""
POLL_S = 0.1
"""The delivery thread's longest wait (it returns as soon as a report is in)."""
ADMIN_TIMEOUT_S = 30.0


class _Batch:
    """One `produce` call's records: the delivery callback of each of them,
    called in the delivery thread; the last one queues the batch as done."""

    __slots__ = ("deliveries", "error", "future", "left")

    def __init__(self, future: asyncio.Future[None], left: int, deliveries: _Deliveries) -> None:
        self.future = future
        self.left = left
        self.deliveries = deliveries
        self.error: confluent_kafka.KafkaError | None = None

    def __call__(self, error: confluent_kafka.KafkaError | None, _message: Any) -> None:
        if error is not None and self.error is None:
            self.error = error
        self.left -= 1
        if self.left == 0:
            self.deliveries.done.append(self)


def _settle(batches: list[_Batch]) -> None:
    """On the event loop: resolve the batches one poll finished."""
    for batch in batches:
        if batch.future.done():  # cancelled by the harness's drain
            continue
        if batch.error is None:
            batch.future.set_result(None)
        else:
            batch.future.set_exception(confluent_kafka.KafkaException(batch.error))


class _Deliveries(threading.Thread):
    """Polls a producer; hands the batches a poll finished to the loop in one
    `call_soon_threadsafe` (one wake-up per poll, not per record)."""

    def __init__(self, producer: confluent_kafka.Producer, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(name="kafka-deliveries", daemon=True)
        self.producer = producer
        self.loop = loop
        self.done: list[_Batch] = []
        self.running = True

    def run(self) -> None:
        while self.running:
            self.producer.poll(POLL_S)
            if self.done:
                finished, self.done = self.done, []
                self.loop.call_soon_threadsafe(_settle, finished)


class KafkaReader:
    """A `Consumer` assigned one partition: `fetch` returns what librdkafka
    has fetched, waiting up to `max_wait_ms` (in a thread) only when nothing
    is there. `consume(n, timeout)` alone would wait for all n records."""

    def __init__(self, consumer: confluent_kafka.Consumer, waiter: ThreadPoolExecutor) -> None:
        self._consumer = consumer
        self._waiter = waiter

    async def fetch(self, max_records: int, max_wait_ms: int) -> list[bytes]:
        consume = self._consumer.consume
        messages = consume(max_records, 0)
        if not messages and max_wait_ms > 0:
            loop = asyncio.get_running_loop()
            messages = await loop.run_in_executor(self._waiter, consume, 1, max_wait_ms / 1000)
            if messages:
                messages += consume(max_records - 1, 0)
        values = []
        for message in messages:
            value = message.value()
            if value is None:  # an error event (the harness writes no null values)
                raise confluent_kafka.KafkaException(message.error() or "a null value")
            values.append(value)
        return values

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._waiter, self._consumer.close)
        self._waiter.shutdown()


class LaminarKafkaTarget:
    """The confluent-kafka side: one `Producer` per worker process."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._client_settings = {
            "bootstrap.servers": endpoint.address,
            **{
                k.removeprefix("client."): v
                for k, v in endpoint.options.items()
                if k.startswith("client.")
            },
        }
        """What every confluent client of this target is given (TLS included)."""
        self._producer_settings = {
            k.removeprefix("producer."): v
            for k, v in endpoint.options.items()
            if k.startswith("producer.")
        }
        self._producer: confluent_kafka.Producer | None = None
        self._deliveries: _Deliveries | None = None

    async def connect(self) -> None:
        producer = confluent_kafka.Producer({**self._client_settings, **self._producer_settings})
        self._producer = producer
        self._deliveries = _Deliveries(producer, asyncio.get_running_loop())
        self._deliveries.start()

    async def create_stream(self, stream: str, partitions: int) -> None:
        admin = AdminClient({**self._client_settings})
        (created,) = admin.create_topics([NewTopic(stream, partitions, 1)]).values()
        try:
            await asyncio.wrap_future(created)
        except confluent_kafka.KafkaException as exc:
            if exc.args[0].code() != confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    async def produce(self, stream: str, partition: int, values: Sequence[bytes]) -> None:
        if self._producer is None or self._deliveries is None:
            raise RuntimeError("connect() first")
        future = asyncio.get_running_loop().create_future()
        batch = _Batch(future, len(values), self._deliveries)
        send = self._producer.produce
        for value in values:
            send(stream, value, partition=partition, on_delivery=batch)
        await future

    async def open_reader(
        self, stream: str, partition: int, start: Start, prefetch: int = 0
    ) -> KafkaReader:
        """`prefetch` is librdkafka's own (see the module docstring)."""
        del prefetch
        consumer = confluent_kafka.Consumer(
            {
                **self._client_settings,
                "group.id": f"laminar-bench-{stream}",  # required; no group is joined
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
            }
        )
        waiter = ThreadPoolExecutor(1, thread_name_prefix="kafka-consume")
        offset = 0
        if start == "tail":  # the end now, not when librdkafka gets to OFFSET_END
            here = confluent_kafka.TopicPartition(stream, partition)
            watermarks = partial(consumer.get_watermark_offsets, here, ADMIN_TIMEOUT_S)
            _, offset = await asyncio.get_running_loop().run_in_executor(waiter, watermarks)
        consumer.assign([confluent_kafka.TopicPartition(stream, partition, offset)])
        return KafkaReader(consumer, waiter)

    async def close(self) -> None:
        deliveries, producer = self._deliveries, self._producer
        if deliveries is None or producer is None:
            return
        deliveries.running = False
        await asyncio.get_running_loop().run_in_executor(None, deliveries.join)
        producer.flush(ADMIN_TIMEOUT_S)


class LaminarKafkaSystem(LaminarSystem):
    """The `laminar` node (`--flush always`); its Kafka ports are the endpoint."""

    def __init__(self, variant: str = "default", *, cores: int | None, runtime: str) -> None:
        if variant not in VARIANTS:
            raise SystemUnavailable(f"{KIND} has variants {', '.join(VARIANTS)}, not {variant!r}")
        super().__init__(variant if variant in SECURED else "always", cores=cores, runtime=runtime)
        self.kafka_variant = variant
        self.name = KIND if variant == "default" else f"{KIND}:{variant}"

    def start(self, workdir: Path) -> Endpoint:
        endpoint = super().start(workdir)
        host = endpoint.address.rpartition(":")[0]
        ports = [] if self._node is None else self._node.info.get("kafka_ports") or []
        if not ports:
            raise SystemUnavailable("the node opened no Kafka port")
        options = {f"producer.{k}": v for k, v in VARIANTS[self.kafka_variant].items()}
        ca_file = endpoint.options.get("tls_ca_file")
        if ca_file is not None:
            options.update({"client.security.protocol": "SSL", "client.ssl.ca.location": ca_file})
        if "username" in endpoint.options:
            options.update(
                {
                    "client.security.protocol": "SASL_SSL",
                    "client.sasl.mechanism": "SCRAM-SHA-256",
                    "client.sasl.username": endpoint.options["username"],
                    "client.sasl.password": endpoint.options["password"],
                }
            )
        return Endpoint(KIND, ",".join(f"{host}:{p}" for p in ports), options)

    def durability(self) -> Durability:
        door = super().durability()
        return Durability(
            door.fsync_before_ack,
            door.summary,
            door.detail
            + "; the Kafka door answers an acks=all Produce (confluent's default) then too",
            {**door.settings, "acks": "all (confluent default)", **VARIANTS[self.kafka_variant]},
        )

    def versions(self) -> dict[str, str]:
        client = (
            f"confluent-kafka {confluent_kafka.version()[0]} "
            f"(librdkafka {confluent_kafka.libversion()[0]})"
        )
        return {**super().versions(), "client": client}
