"""The same client through a silent leader: a check shared by the fault kinds.

`same_client_fails_over(cluster, topic, silence)` produces to a fresh
replicated partition through one `Client`, silences the partition's leader
with `silence(node_id)` (SIGSTOP, a cable pull: the process stays up and its
connections go quiet, neither closed nor answered), and requires the same
client's next produces to be acknowledged; then it undoes the fault and checks
every replica by identity (`tests.cluster.history`).

How soon is a figure, measured by benchmarks/silent_leader_bench.py against
issue 22's goal `FAILOVER_BOUND_S`: two election timeouts and a second, for a
client with its default settings (`timeout_s` 30 s). The client gives up on the
silent node when its connection, quiet with a request in flight, does not
answer a ping either (`laminar.client.protocol.Liveness`: about two
`PROBE_AFTER_S`, one election timeout), the followers elect a leader within
an election timeout of the fault, and the retry, routed around the silent
node with fresh metadata, finds it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from laminar.client import Client, LaminarError, RetryPolicy
from laminar.placement import partition_id
from laminar.replication.host import ELECTION_TICKS, TICK_S
from tests.cluster.history import Produce, check
from tests.cluster.nodes import Cluster, committed_values, leader_of, wait_committed
from tests.support import wait_until

ELECTION_TIMEOUT_S = 2 * ELECTION_TICKS * TICK_S
"""The longest election timeout: Raft draws each from [ELECTION_TICKS, 2 x ELECTION_TICKS) ticks."""
FAILOVER_BOUND_S = 2 * ELECTION_TIMEOUT_S + 1.0
"""From the fault to the same client's next acknowledged produce (issue 22)."""

Silence = Callable[[str], Callable[[], None]]
"""Silences node `node_id` and returns what undoes it."""


def sigstop(cluster: Cluster) -> Silence:
    """The silence of a stopped process: SIGSTOP the node and its shards (SIGCONT undoes it)."""

    def stop(node_id: str) -> Callable[[], None]:
        group = cluster.nodes[node_id].pid
        os.killpg(group, signal.SIGSTOP)
        return lambda: os.killpg(group, signal.SIGCONT)

    return stop


@dataclass
class _Acks:
    """What the producer thread saw: the history, and when each ack came."""

    history: list[Produce] = field(default_factory=list)
    acked: list[tuple[float, float]] = field(default_factory=list)
    """(sent at, acknowledged at), monotonic, one per `ok` produce."""
    errors: list[str] = field(default_factory=list)

    def first_sent_after(self, when: float) -> float | None:
        """When the first produce sent after `when` was acknowledged."""
        return next((at for sent, at in list(self.acked) if sent > when), None)


def _produce(client: Client, topic: str, acks: _Acks, stop: threading.Event) -> None:
    """Unique values one at a time, idempotently (the client's own sequences);
    any error is recorded as an unknown outcome (the retries hide what the
    attempts did) and producing goes on with the same client."""
    counter = 0
    while not stop.is_set():
        counter += 1
        value = b"v%06d" % counter
        sent = time.monotonic()
        try:
            offset = client.produce(topic, 0, [value])
        except LaminarError as exc:
            acks.errors.append(repr(exc))
            acks.history.append(Produce(0, value, "info"))
            continue
        acks.acked.append((sent, time.monotonic()))
        acks.history.append(Produce(0, value, "ok", offset))


def same_client_fails_over(cluster: Cluster, topic: str, silence: Silence) -> float:
    """The check of the module docstring; returns the seconds from the fault to
    the next acknowledged produce."""
    with Client(cluster.bootstrap, retry=RetryPolicy(budget_s=30)) as admin:
        info = admin.create_topic(topic, partitions=1, replication_factor=3)
    pid = partition_id(info.topic_id, 0)
    leader = leader_of(cluster, pid)
    # The node to be silenced first: every metadata refresh must pass it over.
    hosts = sorted(cluster.nodes, key=lambda name: name != leader)
    bootstrap = ",".join(f"{cluster.host(n)}:{cluster.ports[n]}" for n in hosts)
    acks, stop = _Acks(), threading.Event()
    with Client(bootstrap, retry=RetryPolicy(budget_s=30)) as client:
        producer = threading.Thread(target=_produce, args=(client, topic, acks, stop), daemon=True)
        producer.start()
        undo: Callable[[], None] | None = None
        try:
            wait_until(lambda: len(acks.acked) >= 10, "produces acknowledged before the fault")
            undo = silence(leader)
            fault_at = time.monotonic()
            next_ack = wait_until(
                lambda: acks.first_sent_after(fault_at), "a produce acknowledged after the fault"
            )
            elapsed = next_ack - fault_at
            count = len(acks.acked)
            wait_until(lambda: len(acks.acked) >= count + 10, "produces acknowledged after it")
        finally:
            stop.set()
            producer.join(60)
            if undo is not None:
                undo()
    ends = [op.offset for op in acks.history if op.offset is not None]
    wait_committed(cluster, pid, max(ends) + 1)
    final = {name: {0: committed_values(node, pid)} for name, node in cluster.nodes.items()}
    report = check(acks.history, final)
    assert report.valid, report.summary()
    return elapsed
