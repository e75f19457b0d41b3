"""Group consumers on one node, through both clients: members share a topic's
partitions while a producer writes, a member that leaves hands its partitions
over, and every produced record is delivered (checked by identity)."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from pathlib import Path

from laminar.client import AsyncClient, Client, ConsumedRecord
from tests.support import wait_until
from tests.system.nodes import start_node

TOPIC = "events"
PARTITIONS = 6


class Reader(threading.Thread):
    """A member polling and committing until told to stop (then it leaves)."""

    def __init__(self, bootstrap: str, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.bootstrap = bootstrap
        self.seen: list[ConsumedRecord] = []
        self.stop = threading.Event()
        self.polling = threading.Event()

    def run(self) -> None:
        with (
            Client(self.bootstrap) as client,
            client.consumer("billing", [TOPIC], session_timeout_s=3.0) as consumer,
        ):
            while not self.stop.is_set():
                self.seen += consumer.poll(timeout_s=0.2)
                consumer.commit()
                if consumer.assignment():
                    self.polling.set()


def test_members_share_partitions_hand_them_over_and_deliver_every_record(
    tmp_path: Path,
) -> None:
    with start_node(tmp_path, cores=2, flush="never", group_partitions=2) as node:
        with Client(node.bootstrap) as producer:
            producer.create_topic(TOPIC, PARTITIONS)
            produced = []
            a, b = Reader(node.bootstrap, "a"), Reader(node.bootstrap, "b")
            a.start()
            b.start()
            wait_until(
                lambda: a.polling.is_set() and b.polling.is_set(), "both members hold partitions"
            )
            for n in range(300):
                value = b"v%d" % n
                producer.produce(TOPIC, n % PARTITIONS, [value])
                produced.append(value)
                if n == 150:
                    a.stop.set()  # a leaves: b takes its partitions
                    a.join()

            def caught_up() -> bool:
                values = {r.value for r in a.seen + b.seen}
                return values >= set(produced)

            wait_until(caught_up, "every produced record delivered")
            b.stop.set()
            b.join()
        seen = Counter(r.value for r in a.seen + b.seen)
        assert set(seen) == set(produced)  # nothing else, nothing missing
        again = _drain(node.bootstrap)
        assert again == []  # the committed positions are the ends: nothing to read again


def _drain(bootstrap: str) -> list[ConsumedRecord]:
    """What a new member of the group reads once it holds every partition."""

    async def main() -> list[ConsumedRecord]:
        async with (
            AsyncClient(bootstrap) as client,
            client.consumer("billing", [TOPIC]) as consumer,
        ):
            got: list[ConsumedRecord] = []
            while len(consumer.assignment()) < PARTITIONS:
                got += await consumer.poll(timeout_s=0.1)
            while batch := await consumer.poll(timeout_s=0.5):
                got += batch
            return got

    return asyncio.run(main())
