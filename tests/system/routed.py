"""Helpers of the routing tests: nodes per (mode, shards), metrics, UDP load.

    fleet = Fleet(tmp_dir)                       # module-scoped in the tests
    node = fleet.node("ebpf", 3)                 # started once, reused, stopped at the end
    pids = fleet.partitions("ebpf", 3)           # a topic's partition ids on that node
    counts = metrics(node)                       # {(name, frozenset(labels)): value}
    total(counts, "laminar_forwarded_out_total") # summed over shards (and any labels)

Nodes run with `--allow-oversubscribe` (this machine may have fewer cores than
shards), `--xdp off` (they listen on the host's lo), `--udp-max-bytes 1472`
(the default), so the USE_TCP rules can be met with small requests, and
`--udp-writes`, so produce datagrams are routed too.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from laminar.cli.status import parse_prometheus
from laminar.client import Client
from laminar.client.udp import UdpClient
from laminar.placement import partition_id
from laminar.wire import Message, Pong, Response
from tests.system.nodes import RunningNode, start_node

UDP_MAX_BYTES = 1472
PARTITIONS = 96
CLIENT_SOCKETS = 4
"""Requests go out from this many source ports, so kernel hashing alone would spread them."""

Metrics = dict[tuple[str, frozenset[tuple[str, str]]], float]


class Fleet:
    """Started nodes, one per (routing mode, shard count), reused across tests."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._nodes: dict[tuple[str, int], RunningNode] = {}
        self._pids: dict[tuple[str, int], list[int]] = {}

    def node(self, mode: str, shards: int) -> RunningNode:
        key = (mode, shards)
        if key not in self._nodes:
            where = self.root / f"{mode}-{shards}"
            where.mkdir()
            self._nodes[key] = start_node(
                where,
                cores=shards,
                routing=mode,
                allow_oversubscribe=True,
                udp_max_bytes=UDP_MAX_BYTES,
                udp_writes=True,
            )
        return self._nodes[key]

    def partitions(self, mode: str, shards: int) -> list[int]:
        """The partition ids of a topic of `PARTITIONS` partitions on that node."""
        key = (mode, shards)
        if key not in self._pids:
            with Client(self.node(mode, shards).bootstrap) as client:
                topic = client.create_topic("routed", partitions=PARTITIONS)
            self._pids[key] = [partition_id(topic.topic_id, p) for p in range(PARTITIONS)]
        return self._pids[key]

    def close(self) -> None:
        for node in self._nodes.values():
            if node.alive():
                node.proc.terminate()
        for node in self._nodes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.terminate()


def metrics(node: RunningNode) -> Metrics:
    """The node's /metrics samples keyed by name and label set."""
    with urllib.request.urlopen(node.admin_url + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {
        (name, frozenset(labels.items())): value for name, labels, value in parse_prometheus(text)
    }


def total(samples: Metrics, name: str, **labels: str) -> float:
    """The sum of `name` over every sample whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def call_spread(
    node: RunningNode, requests: Sequence[Message], sockets: int = CLIENT_SOCKETS
) -> list[Response | Exception]:
    """Answers to `requests` over UDP in order, sent round-robin from `sockets` sockets."""
    clients = [UdpClient((node.host, node.port), timeout_s=2.0, retries=10) for _ in range(sockets)]
    try:
        answers: list[Response | Exception] = [Exception("unanswered")] * len(requests)
        for i, client in enumerate(clients):
            chunk = list(range(i, len(requests), sockets))
            for index, answer in zip(
                chunk, client.call_many([requests[j] for j in chunk]), strict=True
            ):
                answers[index] = answer
        return answers
    finally:
        for client in clients:
            client.close()


def pongs(answers: Iterable[Response | Exception]) -> list[Pong]:
    """The answers, each checked to be a Pong."""
    out = []
    for answer in answers:
        assert isinstance(answer, Pong), answer
        out.append(answer)
    return out


def laminar_cli(node: RunningNode, *args: str, prefix: Sequence[str] = ()) -> Any:
    """Run the `laminar` CLI against the node (under `prefix`, e.g. a netns)."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "laminar.cli.main", *args, "--bootstrap", node.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "LAMINAR_BOOTSTRAP"},
    )
