"""A static cluster of laminar nodes on loopback, started by the harness.

Node `n<i>` gets a node port chosen free up front (each node names the others
with `--peers id=host:port` before any of them runs), its own data directory
and log under the run's directory, and everything else ephemeral. All nodes
are started before any is waited for: a node's start-up does not depend on its
peers being up, and starting them together is how a cluster comes up in
practice (`make cluster`).

A node pins its shards to the first CPUs it may run on, so nodes started
alike would all share the first cores of the machine (three nodes of one
core each: all on CPU 0, the other cores idle). The cluster deals the
machine's CPUs out instead, in turn (`node_cpus`), as separate machines
would each have their own.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Final

from laminar.bench.servers.laminar_node import LaminarNode
from laminar.bench.servers.ports import free_port
from laminar.replication.auth import write_secret

MAX_NODES: Final = 5
HOST: Final = "127.0.0.1"


def node_ids(count: int) -> list[str]:
    """`n1`..`n<count>`; `count` must be 1..MAX_NODES."""
    if not 1 <= count <= MAX_NODES:
        raise ValueError(f"a benchmark cluster has 1 to {MAX_NODES} nodes, not {count}")
    return [f"n{i}" for i in range(1, count + 1)]


def node_cpus(count: int, cores_per_node: int, cpus: list[int]) -> list[list[int]]:
    """The CPUs of each of `count` nodes: `cpus` dealt out in turn,
    `cores_per_node` each (wrapping around when there are too few)."""
    return [
        sorted({cpus[(i * cores_per_node + j) % len(cpus)] for j in range(cores_per_node)})
        for i in range(count)
    ]


def peers_arg(ports: dict[str, int], node_id: str) -> str:
    """`--peers` for `node_id`: every other node as `id=host:port`."""
    return ",".join(f"{other}={HOST}:{port}" for other, port in ports.items() if other != node_id)


class LaminarCluster:
    """`count` laminar nodes that name each other as peers."""

    def __init__(
        self,
        workdir: Path,
        count: int,
        cores_per_node: int,
        flush: str = "always",
        runtime: str = "auto",
    ) -> None:
        ids = node_ids(count)
        self.ports = {node_id: free_port(HOST) for node_id in ids}
        secret = workdir / "cluster.secret"  # peers always authenticate each other
        write_secret(secret)
        cpus = node_cpus(count, cores_per_node, sorted(os.sched_getaffinity(0)))
        self.nodes = {
            node_id: LaminarNode(
                workdir,
                cores_per_node,
                flush,
                runtime,
                (
                    "--node-id",
                    node_id,
                    "--peers",
                    peers_arg(self.ports, node_id),
                    "--cluster-secret-file",
                    str(secret),
                ),
                port=self.ports[node_id],
                name=node_id,
                cpus=node_cpu,
            )
            for node_id, node_cpu in zip(ids, cpus, strict=True)
        }

    @property
    def bootstrap(self) -> str:
        """Every node's address, as the client's bootstrap list."""
        return ",".join(f"{HOST}:{port}" for port in self.ports.values())

    def start(self, timeout_s: float = 60.0) -> str:
        """Start every node; the bootstrap list once all of them serve."""
        for node in self.nodes.values():
            node.launch()
        for node in self.nodes.values():
            node.wait_serving(timeout_s)
        return self.bootstrap

    def pids(self) -> dict[str, int]:
        """Each running node's supervisor pid (its shards are its children)."""
        return {node_id: pid for node_id, node in self.nodes.items() if (pid := node.pid)}

    def kill(self, node_id: str) -> None:
        """SIGKILL a node's supervisor and shards at once (a machine crash)."""
        self.nodes[node_id].signal_group(signal.SIGKILL)

    def stop(self) -> None:
        for node in self.nodes.values():
            with contextlib.suppress(Exception):
                node.stop()

    def log_tail(self) -> str:
        return "\n".join(f"--- {n}\n{node.log_tail()}" for n, node in self.nodes.items())
