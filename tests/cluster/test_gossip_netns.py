"""A cluster joined with `--join` (SWIM membership, no `--peers`) under network faults.

Four nodes, each in a network namespace of its own (`tests.cluster.netns`),
join through the seed n1; a topic's partitions are Raft groups on three
replicas placed by weighted rendezvous over the live members. An idempotent
producer writes unique values to every partition throughout.

- Loss: 30% of one node's packets (both ways) are dropped for a while.
  Lifeguard's refutation keeps the node a member: nobody declares it dead
  (SWIM may suspect it; the suspect refutes). Once the loss stops every member
  sees every other alive and nothing acknowledged is lost or duplicated.
- Partition: one node's cable is pulled for longer than the suspicion timeout
  plus the dead grace. The majority declares it dead, every partition it held
  is back on three replicas on the survivors, and produces keep being
  acknowledged. Healed, the node rejoins with a higher incarnation (it refutes
  its death, seen in `laminar status --json`), the partitions placement gives
  it move back, the replicas it lost are retired, and every acknowledged
  record is present exactly once on every replica of every partition.

`make soak` runs rounds of loss, partition and SIGKILL on each node in turn,
the seed included. The kernel has no netem: faults are cuts and random loss.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from laminar.client import Client, LaminarError, RetryPolicy
from laminar.placement import partition_id, replica_nodes
from tests.cluster.history import Produce, check
from tests.cluster.netns import TestNetwork, netns_reason
from tests.cluster.nodes import host_index, offsets
from tests.cluster.test_gossip_cluster import gossip_cluster, member_states, replica_holders
from tests.support import wait_until
from tests.system.nodes import RunningNode

pytestmark = pytest.mark.skipif(netns_reason() is not None, reason=str(netns_reason()))

NODES = 4
PARTITIONS = 4
RF = 3
DEAD_GRACE_S = 1.0
LOSS_PERCENT = 30
LOSS_S = 10.0
PRODUCE_PAUSE_S = 0.02
"""Between one partition's produces: enough records, logs that stay quick to read."""
HEAL_TIMEOUT_S = 90.0
"""Rejoining after a partition waits for SWIM's reconnect (a push-pull with a
dead member, every 30 s on each member) and then for the moves back."""


class Producer:
    """A thread per partition producing unique values to it, idempotently
    (producer id + sequence, retried by the client across leader changes): each
    produce is acknowledged (`ok`) or, after any error, `info` (the retries hide
    what earlier attempts did), and the partition then gets a new producer id.
    A thread each, so a partition waiting out a cut-off leader holds up no other."""

    def __init__(self, bootstrap: str, history: list[Produce]) -> None:
        self.bootstrap = bootstrap
        self.history = history
        self.stop = threading.Event()
        self.errors: dict[int, str] = {}
        """partition -> the last error a produce to it ended with."""
        self.threads = [
            threading.Thread(target=self._run, args=(p,), daemon=True) for p in range(PARTITIONS)
        ]

    def __enter__(self) -> Producer:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)

    def acknowledged(self, partition: int) -> int:
        return sum(1 for op in self.history if op.partition == partition and op.outcome == "ok")

    def outcomes(self) -> dict[int, dict[str, int]]:
        """partition -> outcome -> how many (for failure messages)."""
        out: dict[int, dict[str, int]] = {p: {} for p in range(PARTITIONS)}
        for op in self.history:
            if isinstance(op, Produce):
                out[op.partition][op.outcome] = out[op.partition].get(op.outcome, 0) + 1
        return out

    def _run(self, partition: int) -> None:
        epoch = sequence = counter = 0
        # One client throughout: it must find a cut-off leader's successor itself.
        client = Client(self.bootstrap, timeout_s=5, retry=RetryPolicy(budget_s=20))
        try:
            while not self.stop.is_set():
                counter += 1
                value = b"p%d-%06d" % (partition, counter)
                producer_id = (partition + 1) << 16 | epoch
                try:
                    offset = client.produce(
                        "events", partition, [value], producer_id=producer_id, sequence=sequence
                    )
                except LaminarError as exc:
                    self.errors[partition] = repr(exc)
                    self.history.append(Produce(partition, value, "info"))
                    epoch, sequence = epoch + 1, 0
                    continue
                sequence += 1
                self.history.append(Produce(partition, value, "ok", offset))
                self.stop.wait(PRODUCE_PAUSE_S)
        finally:
            client.close()


@dataclass
class Run:
    """One test's cluster, topic and history."""

    net: TestNetwork
    nodes: dict[str, RunningNode]
    topic_id: int = 0
    pids: list[int] = field(default_factory=list)
    history: list[Produce] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes.values())

    def wait_all_alive(self, what: str, timeout_s: float = 60.0) -> None:
        names = set(self.nodes)

        def everyone_alive() -> bool:
            for node in self.nodes.values():
                states = member_states(node)
                if set(states) != names or set(states.values()) != {"alive"}:
                    return False
            return True

        wait_until(everyone_alive, what, timeout_s)

    def placed(self, live: set[str], timeout_s: float, what: str) -> None:
        """Wait until every partition's replicas are exactly the top RF of `live`
        by rendezvous (a replica placement no longer names must have been
        retired), each holding every value acknowledged before it was read."""
        weights = dict.fromkeys(live, 1.0)
        targets = {pid: set(replica_nodes(pid, weights, RF)) for pid in self.pids}
        reachable = {name: node for name, node in self.nodes.items() if name in live}
        last: dict[int, Any] = {}

        def converged() -> bool:
            acked = [
                {op.value for op in list(self.history) if op.partition == p and op.outcome == "ok"}
                for p in range(PARTITIONS)
            ]
            holders_of = {p: replica_holders(reachable, pid) for p, pid in enumerate(self.pids)}
            last.update({p: sorted(h) for p, h in holders_of.items()})
            for p, pid in enumerate(self.pids):
                holders = holders_of[p]
                if set(holders) != targets[pid]:
                    return False
                if any(not acked[p] <= {value for _, value in log} for log in holders.values()):
                    return False
            return True

        try:
            wait_until(converged, what, timeout_s)
        except AssertionError as exc:
            wanted = {p: sorted(targets[pid]) for p, pid in enumerate(self.pids)}
            raise AssertionError(f"{exc}; holders {last}, placement wants {wanted}") from None

    def wait_files_retired(self) -> None:
        """Wait until each node keeps files only for the partitions placement over
        every node gives it: a replica moved away deletes its files once its
        removal is committed (a returning node's too, or it catches up)."""
        weights = dict.fromkeys(self.nodes, 1.0)
        placed = {p: set(replica_nodes(pid, weights, RF)) for p, pid in enumerate(self.pids)}
        wanted = {n: {p for p in placed if n in placed[p]} for n in self.nodes}
        kept: dict[str, set[int]] = {}

        def follows() -> bool:
            for name, node in self.nodes.items():
                kept[name] = {
                    p
                    for p in range(PARTITIONS)
                    if (node.data_dir / "partitions" / f"{self.topic_id}-{p}").is_dir()
                }
            return kept == wanted

        try:
            wait_until(follows, "the replicas moved away retired")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: files of {kept}, placement {wanted}") from None

    def check_history(self) -> None:
        """Every acknowledged record exactly once, at its offset, on every replica
        (`placed` checked who the replicas are; a partition is checked alone, so
        a node without a replica of it is no replica missing its records)."""
        acknowledged = 0
        for p, pid in enumerate(self.pids):
            history = [op for op in self.history if op.partition == p]
            final = {name: {p: log} for name, log in replica_holders(self.nodes, pid).items()}
            report = check(history, final)
            assert report.valid, f"partition {p}: {report.summary()}"
            acknowledged += report.acknowledged
        assert acknowledged > 0

    def deaths_logged(self, victim: str) -> list[str]:
        """The log lines in which a node's membership agent declared `victim` dead."""
        needle = f"member {victim} ("
        return [
            f"{name}: {line.strip()}"
            for name, node in self.nodes.items()
            for line in node.log_text().splitlines()
            if needle in line and ") is dead (" in line
        ]


@contextmanager
def joined(tmp_path: Path) -> Iterator[Run]:
    with (
        TestNetwork(NODES) as net,
        gossip_cluster(tmp_path, NODES, dead_grace=DEAD_GRACE_S, net=net) as (nodes, _start),
    ):
        run = Run(net, nodes)
        run.wait_all_alive("every node sees four alive members")
        with Client(run.bootstrap, retry=RetryPolicy(budget_s=30)) as client:
            topic = wait_until(
                lambda: client.create_topic("events", partitions=PARTITIONS, replication_factor=RF),
                "the topic is created",
            )
        run.topic_id = topic.topic_id
        run.pids = [partition_id(topic.topic_id, p) for p in range(PARTITIONS)]
        run.placed(set(nodes), 60, "every partition on its three replicas")
        try:
            yield run
        finally:  # nodes restarted by the test are not the ones gossip_cluster stops
            for node in run.nodes.values():
                if node.alive():
                    node.kill()


def incarnations(node: RunningNode) -> dict[str, int]:
    """Each member's incarnation as `laminar status --json` on `node` shows it."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "laminar.cli.main",
            "status",
            "--json",
            "--bootstrap",
            node.bootstrap,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "LAMINAR_BOOTSTRAP"},
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    return {m["node_id"]: int(m["incarnation"]) for m in doc["members"]}


def lossy_period(run: Run, victim: str) -> None:
    """`victim` loses LOSS_PERCENT% of its packets for LOSS_S while the producer
    runs; then every member must see every other alive again."""
    run.net.loss(host_index(victim), LOSS_PERCENT)
    try:
        time.sleep(LOSS_S)
    finally:
        run.net.heal()
    run.wait_all_alive(f"every member sees every other alive after {victim}'s loss")


def partitioned_period(run: Run, producer: Producer, victim: str) -> None:
    """`victim`'s cable is pulled until the majority declared it dead and moved
    its partitions; then healed, it must rejoin with a higher incarnation and
    the partitions follow placement over all four again."""
    survivors = set(run.nodes) - {victim}
    witness = run.nodes[min(survivors)]
    before = incarnations(witness)[victim]
    run.net.isolate(host_index(victim))
    try:
        wait_until(
            lambda: all(member_states(run.nodes[n]).get(victim) == "dead" for n in survivors),
            f"the majority sees {victim} dead",
        )
        run.placed(survivors, 60, f"every partition back at three replicas without {victim}")
        # Produces to the majority are still acknowledged, on every partition.
        counts = [producer.acknowledged(p) for p in range(PARTITIONS)]
        try:
            wait_until(
                lambda: all(producer.acknowledged(p) > counts[p] + 2 for p in range(PARTITIONS)),
                "produces acknowledged by the majority",
            )
        except AssertionError as exc:
            stacks = "".join(
                "".join(traceback.format_stack(sys._current_frames()[t.ident]))
                for t in producer.threads
                if t.ident in sys._current_frames()
            )
            leaders = {
                n: [offsets(run.nodes[n], pid).leader for pid in run.pids] for n in survivors
            }
            raise AssertionError(
                f"{exc}: after {counts}, {producer.outcomes()}, last errors {producer.errors}, "
                f"leaders {leaders}; producers at\n{stacks}"
            ) from None
    finally:
        run.net.heal()
    run.wait_all_alive(f"{victim} rejoined", HEAL_TIMEOUT_S)
    after = incarnations(witness)[victim]
    assert after > before, f"{victim} came back at incarnation {after}, was {before}"


def killed_period(run: Run, victim: str) -> None:
    """SIGKILL `victim`; once the others declared it dead and moved its
    partitions, restart it on its data (new ports: it joins again through a
    survivor, as its operator would; its old incarnation is beaten by the new
    start's) and wait until it is a member again."""
    survivors = set(run.nodes) - {victim}
    run.nodes[victim].kill()
    wait_until(
        lambda: all(member_states(run.nodes[n]).get(victim) == "dead" for n in survivors),
        f"the others see {victim} dead",
    )
    run.placed(survivors, 60, f"every partition back at three replicas without {victim}")
    through = run.nodes[min(survivors)].info["membership_address"]
    run.nodes[victim] = run.nodes[victim].restart(join=through)
    run.wait_all_alive(f"{victim} joined again", HEAL_TIMEOUT_S)


@pytest.mark.soak  # a fault schedule (suite time): `make soak` runs it
def test_packet_loss_on_one_node_kills_nobody_and_loses_nothing(tmp_path: Path) -> None:
    with joined(tmp_path) as run:
        with Producer(run.bootstrap, run.history) as producer:
            lossy_period(run, "n2")
            wait_until(lambda: all(producer.acknowledged(p) > 5 for p in range(PARTITIONS)), "acks")
        assert not run.deaths_logged("n2"), "a live node was declared dead under loss"
        run.placed(set(run.nodes), 60, "every partition on its three replicas")
        run.check_history()


@pytest.mark.soak  # a fault schedule (suite time): `make soak` runs it
@pytest.mark.parametrize("victim", ["n2", "n1"])
def test_a_partitioned_node_is_replaced_then_rejoins_with_nothing_lost(
    tmp_path: Path, victim: str
) -> None:
    with joined(tmp_path) as run:
        with Producer(run.bootstrap, run.history) as producer:
            partitioned_period(run, producer, victim)
        run.placed(set(run.nodes), HEAL_TIMEOUT_S, "the partitions follow placement over all four")
        run.wait_files_retired()
        run.check_history()


@pytest.mark.soak
def test_rounds_of_loss_partition_and_kill_on_every_node(tmp_path: Path) -> None:
    """Each node in turn, the seed first: loss, then a partition, then SIGKILL
    and restart, with the partitions following placement after each, while an
    idempotent producer writes to every partition; then the identity check."""
    with joined(tmp_path) as run:
        with Producer(run.bootstrap, run.history) as producer:
            for victim in ("n1", "n2", "n3", "n4"):
                lossy_period(run, victim)
                partitioned_period(run, producer, victim)
                run.placed(set(run.nodes), HEAL_TIMEOUT_S, f"placement over all after {victim}")
                killed_period(run, victim)
                run.placed(set(run.nodes), HEAL_TIMEOUT_S, f"{victim} back in placement")
        run.placed(set(run.nodes), HEAL_TIMEOUT_S, "the partitions follow placement over all four")
        run.wait_files_retired()
        run.check_history()
