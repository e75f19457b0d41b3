"""Group consumers on one node, through both clients: members share a topic's
partitions while a producer writes, a member that leaves hands its partitions
over, and every produced record is delivered (checked by identity)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

from laminar.cli.common import Exit
from laminar.client import AsyncClient, Client, ConsumedRecord
from tests.support import wait_until
from tests.system.nodes import start_node

TOPIC = "events"
LAMINAR = [sys.executable, "-m", "laminar.cli.main"]
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


def _laminar(node_bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LAMINAR, *args, "--bootstrap", node_bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "LAMINAR_BOOTSTRAP": ""},
    )


def test_the_cli_consumes_as_a_member_and_lists_describes_resets_and_deletes_groups(
    tmp_path: Path,
) -> None:
    with start_node(tmp_path, cores=2, flush="never") as node, Client(node.bootstrap) as client:
        client.create_topic(TOPIC, 3)
        values = [f"r{n}" for n in range(10)]
        for n, value in enumerate(values):
            client.produce(TOPIC, n % 3, [value.encode()])
        read = _laminar(
            node.bootstrap,
            "consume",
            TOPIC,
            "--group",
            "billing",
            "--from-beginning",
            "--max",
            "10",
            "--json",
        )
        assert read.returncode == 0, read.stderr
        assert sorted(json.loads(line)["value"] for line in read.stdout.splitlines()) == values

        described = json.loads(
            _laminar(node.bootstrap, "group", "describe", "billing", "--json").stdout
        )
        assert (described["state"], described["members"], described["lag"]) == ("empty", [], 0)
        assert [(p["partition"], p["committed"]) for p in described["partitions"]] == [
            (0, 4),
            (1, 3),
            (2, 3),
        ]
        listed = json.loads(_laminar(node.bootstrap, "group", "list", "--json").stdout)
        assert [g["group"] for g in listed] == ["billing"]

        reset = _laminar(
            node.bootstrap, "group", "reset", "billing", "--topic", TOPIC, "--to-earliest"
        )
        assert reset.returncode == 0, reset.stderr
        assert client.describe_group("billing").lag == 10
        with client.consumer("billing", [TOPIC]) as member:
            wait_until(
                lambda: member.poll(timeout_s=0.1) is not None and member.assignment(), "a member"
            )
            busy = _laminar(
                node.bootstrap,
                "group",
                "reset",
                "billing",
                "--topic",
                TOPIC,
                "--to-latest",
                "--json",
            )
            assert busy.returncode == Exit.SERVER_ERROR
            assert json.loads(busy.stderr)["error"]["code"] == "GROUP_NOT_EMPTY"
        deleted = _laminar(node.bootstrap, "group", "delete", "billing")
        assert deleted.returncode == 0, deleted.stderr
        gone = _laminar(node.bootstrap, "group", "describe", "billing", "--json")
        assert json.loads(gone.stderr)["error"]["code"] == "UNKNOWN_GROUP"
