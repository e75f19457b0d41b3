"""Group consumers on one node, through both clients: members share a topic's
partitions while a producer writes, a member that leaves hands its partitions
over, and every produced record is delivered (checked by identity)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from laminar.cli.common import Exit
from laminar.client import AsyncClient, Client, ConsumedRecord
from tests.support import wait_until
from tests.system.nodes import start_node

TOPIC = "events"
LAMINAR = [sys.executable, "-m", "laminar.cli.main"]
MEMBER = [sys.executable, "-m", "tests.system.group_member"]
REPO = Path(__file__).resolve().parents[2]
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


class Producing(threading.Thread):
    """Produces `v<n>` round robin over the partitions until stopped; keeps
    what was acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="producer", daemon=True)
        self.bootstrap = bootstrap
        self.acked: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with Client(self.bootstrap) as client:
            n = 0
            while not self.stop.is_set():
                client.produce(TOPIC, n % PARTITIONS, [b"v%d" % n])
                self.acked.append(f"v{n}")
                n += 1
                time.sleep(0.002)  # pacing: a steady trickle, not a flood


@dataclass
class MemberLog:
    """What a member process wrote (tests/system/group_member.py)."""

    got: list[tuple[int, int, str]] = field(default_factory=list)
    """(partition, index, value) in order."""
    covered: set[int] = field(default_factory=set)
    """Positions in `got` of the deliveries a later commit of this member
    covers (by position: a record delivered again after a refused commit is
    a second delivery, which a later commit covers alone)."""
    refused: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path) -> MemberLog:
        """A commit covers the deliveries of its partition since the member's
        last commit of it (a refused commit covers none of them, for good)."""
        log = cls()
        pending: dict[int, list[int]] = {}
        for line in path.read_text().splitlines():
            kind, *rest = line.split()
            if kind == "GOT":
                pending.setdefault(int(rest[0]), []).append(len(log.got))
                log.got.append((int(rest[0]), int(rest[1]), rest[2]))
            elif kind == "COMMITTED":
                partition, end = int(rest[0]), int(rest[1])
                log.covered |= {n for n in pending.pop(partition, []) if log.got[n][1] < end}
            elif kind == "REFUSED":
                pending.pop(int(rest[0]), None)
                log.refused.append(rest[1])
        return log


def test_killed_stopped_and_added_member_processes_deliver_every_record(tmp_path: Path) -> None:
    """Three member processes share six partitions while a producer writes;
    one is SIGKILLed, another added, a third SIGSTOPped past its session and
    resumed (its commits are refused: FENCED). Every acknowledged record is
    processed; a record is processed twice only when one of the times was
    not covered by its member's commit (the killed or the stopped member's
    last batch); the group ends with lag 0."""
    with start_node(tmp_path, cores=2, flush="never", group_partitions=2) as node:
        client = Client(node.bootstrap)
        client.create_topic(TOPIC, PARTITIONS)
        procs: dict[str, subprocess.Popen[bytes]] = {}

        def spawn(name: str) -> None:
            procs[name] = subprocess.Popen(
                [*MEMBER, node.bootstrap, "billing", TOPIC, str(tmp_path / f"{name}.log")],
                cwd=REPO,
            )

        def members_stable(count: int) -> bool:
            d = client.describe_group("billing")
            held = sum(len(m.assignment) for m in d.members)
            return d.state == "stable" and len(d.members) == count and held == PARTITIONS

        producer = Producing(node.bootstrap)
        try:
            for name in ("a", "b", "c"):
                spawn(name)
            wait_until(lambda: members_stable(3), "three members holding every partition")
            producer.start()
            wait_until(lambda: len(producer.acked) > 200, "records flowing")
            procs["a"].kill()  # SIGKILL: its session ends in SESSION_S
            spawn("d")
            wait_until(lambda: members_stable(3), "a expired, d joined")
            hold = tmp_path / "b.log.hold"
            hold.touch()  # b stops between processing a batch and committing it
            wait_until(lambda: "HOLDING" in (tmp_path / "b.log").read_text(), "b holding")
            procs["b"].send_signal(signal.SIGSTOP)
            wait_until(lambda: members_stable(2), "b expired while stopped")
            hold.unlink()
            procs["b"].send_signal(signal.SIGCONT)  # its commit comes too late
            wait_until(lambda: members_stable(3), "b back as a new member")
            producer.stop.set()
            producer.join()
            wait_until(lambda: client.describe_group("billing").lag == 0, "lag 0")
        finally:
            producer.stop.set()
            for proc in procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGCONT)
                    proc.terminate()
            for proc in procs.values():
                proc.wait(30)
            client.close()
    logs = {name: MemberLog.read(tmp_path / f"{name}.log") for name in procs}
    deliveries = Counter(v for log in logs.values() for _, _, v in log.got)
    assert set(producer.acked) <= set(deliveries)  # every acknowledged record, by identity
    covered = Counter(log.got[n][2] for log in logs.values() for n in log.covered)
    assert max(covered.values()) == 1  # no record processed twice under commits
    uncovered = {
        name for name, log in logs.items() for n in range(len(log.got)) if n not in log.covered
    }
    assert uncovered <= {"a", "b"}  # only the killed and the stopped member's tails
    assert "FENCED" in logs["b"].refused


def test_group_describe_says_why_a_member_is_idle(tmp_path: Path) -> None:
    """Two members, one partition: the one without it has none left to get;
    the holder pauses it and says so in its next heartbeat."""
    with start_node(tmp_path, cores=2, flush="never") as node, Client(node.bootstrap) as client:
        client.create_topic(TOPIC, 1)
        with client.consumer("billing", [TOPIC]) as a, client.consumer("billing", [TOPIC]) as b:

            def reasons() -> dict[tuple[str, ...], str | None]:
                """Each member's partitions ("topic:n") -> why it is idle."""
                a.poll(timeout_s=0.05), b.poll(timeout_s=0.05)
                shown = _laminar(node.bootstrap, "group", "describe", "billing", "--json")
                return {
                    tuple(f"{t}:{p}" for t, p in m["partitions"]): m["idle_reason"]
                    for m in json.loads(shown.stdout)["members"]
                }

            wait_until(
                lambda: reasons()
                == {(f"{TOPIC}:0",): None, (): "no partitions left to give it (more members "
                    "than partitions)"},
                "one member holds the partition, the other has none to get",
            )  # fmt: skip
            holder = a if a.assignment() else b
            holder.pause([(TOPIC, 0)])
            wait_until(
                lambda: (
                    reasons().get((f"{TOPIC}:0",)) == "paused: it paused every partition it owns"
                ),
                "the pause reported",
            )
            human = _laminar(node.bootstrap, "group", "describe", "billing").stdout
            assert "IDLE BECAUSE" in human and f"{TOPIC}:0" in human, human


PAUSED, SOUGHT = (TOPIC, 1), (TOPIC, 0)


def test_batches_fetched_ahead_are_dropped_at_pause_and_seek_on_both_clients(
    tmp_path: Path,
) -> None:
    """Through each shell's Start/Join/Drop: a paused partition delivers
    nothing, a seek delivers from its index, every record comes once, and
    the fetches dropped leave no answer behind on the client's connections."""
    with start_node(tmp_path, cores=2, flush="never", group_partitions=1) as node:
        with Client(node.bootstrap) as producer:
            producer.create_topic(TOPIC, 2)
            for p in range(2):
                producer.produce(TOPIC, p, [b"%d-%d" % (p, i) for i in range(400)])
        with Client(node.bootstrap) as client:
            with client.consumer("sync", [TOPIC], max_records=50) as consumer:
                runs = [_pause_and_seek(consumer)]
            for conn in client._conns.values():
                assert not conn._done and not conn._proto.in_flight, "an answer left behind"
        with asyncio.Runner() as loop:
            aclient = loop.run(AsyncClient(node.bootstrap).connect())
            aconsumer = loop.run(_async_consumer(aclient, "async"))
            runs.append(_pause_and_seek(_Blocking(loop, aconsumer)))
            loop.run(aconsumer.close())
            assert not loop.run(_calls_running()), "a fetch ahead left running"
            loop.run(aclient.close())
    for seen, stats in runs:
        assert stats.dropped >= 2 and stats.used >= 1, stats  # the pause's and the seek's
        assert stats.ahead == 0, "dropped at close"
        paused = [r.index for r in seen[PAUSED]]
        assert paused == list(range(400)), "in order, once, no gap across the pause"
        sought = [r.index for r in seen[SOUGHT]]
        cut = next(i for i in range(1, len(sought)) if sought[i] <= sought[i - 1])  # the seek
        assert sought[:cut] == list(range(cut)) and sought[cut:] == list(range(10, 400))


def _pause_and_seek(consumer: Any) -> tuple[dict[Any, list[ConsumedRecord]], Any]:
    """Read, pause one partition, seek the other back to 10, resume, read all."""
    seen: dict[Any, list[ConsumedRecord]] = {PAUSED: [], SOUGHT: []}

    def poll(timeout_s: float) -> None:
        for r in consumer.poll(timeout_s=timeout_s):
            seen[r.topic, r.partition].append(r)

    while len(consumer.assignment()) < 2 or sum(map(len, seen.values())) < 100:
        poll(0.2)
    consumer.pause([PAUSED])
    held = len(seen[PAUSED])
    for _ in range(3):
        poll(0.05)
    assert len(seen[PAUSED]) == held, "a paused partition delivers nothing"
    consumer.seek(SOUGHT, 10)
    consumer.resume([PAUSED])
    while len(seen[PAUSED]) < 400 or seen[SOUGHT][-1].index < 399:
        poll(0.2)
    return seen, consumer.prefetch_stats


class _Blocking:
    """An `AsyncConsumer` whose polls run on `loop` till done: one script for both."""

    def __init__(self, loop: asyncio.Runner, consumer: Any) -> None:
        self._loop = loop
        self._consumer = consumer

    def poll(self, timeout_s: float) -> list[ConsumedRecord]:
        got: list[ConsumedRecord] = self._loop.run(self._consumer.poll(timeout_s))
        return got

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


async def _async_consumer(client: AsyncClient, group: str) -> Any:
    return client.consumer(group, [TOPIC], max_records=50)


async def _calls_running() -> list[asyncio.Task[Any]]:
    """`AsyncClient` calls still under way (a fetch ahead neither joined nor dropped)."""
    await asyncio.sleep(0)
    return [
        t
        for t in asyncio.all_tasks()
        if getattr(t.get_coro(), "__qualname__", "") == "AsyncClient._call" and not t.done()
    ]
