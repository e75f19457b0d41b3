"""Both clients, idempotent and not (and the asyncio one with a linger), produce
to one partition while its leader is killed; a reader follows it meanwhile.
Checked by identity on every topology."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from laminar.client import (
    AsyncClient,
    CannotConnectError,
    Client,
    ConnectionLostError,
    DuplicateSequenceError,
    LaminarError,
    RequestTimeoutError,
    ServerTimeoutError,
)
from tests.matrix.reading import check_once, read_partition, topic_name
from tests.matrix.topologies import Topology
from tests.support import wait_until

ACKS_EACH_SIDE = 30
"""Acknowledged produces each producer must have before the kill and after it."""


LINGER_S = 0.005
"""The lingering asyncio producer's `linger_s`."""

ASYNC_IN_FLIGHT = 32
"""The asyncio producer's calls in flight: four times the idempotent window."""


@dataclass
class Outcomes:
    """What one producer was told about each value it sent."""

    acked: dict[bytes, int | None] = field(default_factory=dict)
    unknown: set[bytes] = field(default_factory=set)
    refused: set[bytes] = field(default_factory=set)

    def record(self, value: bytes, send: Callable[[], int]) -> None:
        try:
            self.acked[value] = send()
        except DuplicateSequenceError:
            self.acked[value] = None  # appended by an earlier attempt; its index is forgotten
        except CannotConnectError:
            self.refused.add(value)  # never sent
        except (ConnectionLostError, RequestTimeoutError, ServerTimeoutError):
            self.unknown.add(value)  # sent; the answer never came
        except LaminarError:
            self.refused.add(value)  # a refusal: nothing appended


class Producer(threading.Thread):
    """Produces values `<name>-<i>`, one per call, until stopped."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        topic: str,
        idempotent: bool,
        aio: bool,
        linger_s: float = 0.0,
    ):
        super().__init__(name=name, daemon=True)
        self.tag, self.bootstrap, self.topic = name, bootstrap, topic
        self.idempotent, self.aio, self.linger_s = idempotent, aio, linger_s
        self.outcomes = Outcomes()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            if self.aio:
                asyncio.run(self._run_async())
            else:
                with Client(self.bootstrap, idempotent=self.idempotent) as client:
                    for value in self._values():
                        self.outcomes.record(
                            value, lambda v=value: client.produce(self.topic, 0, [v])
                        )
        except BaseException as exc:
            self.error = exc

    async def _run_async(self) -> None:
        """`ASYNC_IN_FLIGHT` produce calls at a time, so the idempotent ones
        wait for the window and leave merged into batches (each call's index
        is its own record's)."""
        async with AsyncClient(
            self.bootstrap, idempotent=self.idempotent, linger_s=self.linger_s
        ) as client:
            loop = asyncio.get_running_loop()
            in_flight: dict[asyncio.Task[int], bytes] = {}
            for value in self._values():
                in_flight[loop.create_task(client.produce(self.topic, 0, [value]))] = value
                if len(in_flight) >= ASYNC_IN_FLIGHT:
                    done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        self.outcomes.record(in_flight.pop(task), task.result)
            if in_flight:
                await asyncio.wait(in_flight)
            for task, value in in_flight.items():
                self.outcomes.record(value, task.result)

    def _values(self) -> Iterator[bytes]:
        for i in itertools.count():
            if self.stop.is_set():
                return
            yield f"{self.tag}-{i}".encode()

    def acked(self) -> int:
        return len(self.outcomes.acked)


def test_both_clients_produce_once_and_read_in_order_across_a_leader_kill(
    healed: Topology,
) -> None:
    topic = topic_name("clients")
    with Client(healed.bootstrap) as admin:
        admin.create_topic(topic, partitions=1, replication_factor=healed.replication_factor)
    healed.leader(topic, 0)  # every node applied the creation
    producers = [
        Producer(f"{kind}-{mode}", healed.bootstrap, topic, mode == "idem", kind == "async")
        for kind in ("sync", "async")
        for mode in ("idem", "plain")
    ]
    producers.append(Producer("async-linger", healed.bootstrap, topic, True, True, LINGER_S))
    follower = Follower(healed.bootstrap, topic)
    follower.start()
    for producer in producers:
        producer.start()

    def each_has(count: int) -> bool:
        for producer in producers:
            if producer.error is not None:
                raise producer.error
        return all(p.acked() >= count for p in producers)

    wait_until(lambda: each_has(ACKS_EACH_SIDE), "acknowledged produces before the kill")
    healed.kill_leader(topic, 0)
    wanted = [p.acked() + ACKS_EACH_SIDE for p in producers]
    wait_until(
        lambda: all(p.acked() >= n for p, n in zip(producers, wanted, strict=True)),
        "acknowledged produces after the kill",
    )
    for producer in producers:
        producer.stop.set()
    for producer in producers:
        producer.join(60)
        assert producer.error is None, producer.error

    with Client(healed.bootstrap) as client:
        read = read_partition(client, topic, 0)
        end = client.offsets(topic, 0).highest
    for producer in producers:
        mine = [(i, v) for i, v in read if v.startswith(producer.tag.encode() + b"-")]
        o = producer.outcomes
        check_once(mine, o.acked, o.unknown)
        assert not o.refused & {v for _, v in mine}, "a refused produce was appended"
        if producer.idempotent:
            assert not o.unknown, f"{producer.tag}: an idempotent produce's outcome unknown"
    follower.wait_for(end)
    assert follower.read == read, "the reader's records differ from a fresh read"


class Follower(threading.Thread):
    """An `AsyncClient.reader` following partition 0 from the start, as a
    consumer does, through the kill."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.read: list[tuple[int, bytes]] = []
        self.position = 0
        self.target: int | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._follow())
        except BaseException as exc:
            self.error = exc

    async def _follow(self) -> None:
        async with (
            AsyncClient(self.bootstrap) as client,
            client.reader(self.topic, 0, 0, prefetch=2, max_wait_ms=200) as reader,
        ):
            while self.target is None or self.position < self.target:
                try:
                    batch = await reader.next_batch()
                except LaminarError:
                    continue  # the leader died under the fetch: ask again
                self.read += [(r.index, r.value) for r in batch]
                self.position = reader.position

    def wait_for(self, end: int) -> None:
        self.target = end
        self.join(60)
        assert self.error is None, self.error
        assert not self.is_alive(), f"the reader is stuck at {self.position} (end {end})"
