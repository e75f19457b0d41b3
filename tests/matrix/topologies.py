"""The three topologies every user-facing check runs on, and the leader it kills.

    topology.bootstrap                  # "host:port,..." of every node
    victim = topology.kill_leader(pid)  # SIGKILL the node leading `pid` (the node, alone)
    topology.heal()                     # restart what was killed, same ports and data

- `single`: one node (2 shards). Its "leader" is the node itself: killing it
  is a crash and a restart, which the check's clients must ride out.
- `static3`: three nodes naming each other with `--peers` (replication factor 3).
- `gossip4`: four nodes joined with `--join` (SWIM, the cluster secret),
  replication factor 3, so a partition's replicas are three of the four.

A topology lives for the whole session (`conftest.py`), shared by every check;
each check kills one leader in its middle and heals before it ends, so the
next check starts with every node up. Killed nodes come back on their old
ports (the checks' clients hold the bootstrap list) and within the dead
grace, so a gossip cluster moves nothing.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from laminar.client import Client
from laminar.placement import partition_id
from laminar.replication.auth import write_secret
from tests.cluster.nodes import offsets
from tests.cluster.test_gossip_cluster import decisions_settled
from tests.support import free_port, retry_on_port_in_use, wait_until
from tests.system.nodes import RunningNode, start_node

NAMES = ("single", "static3", "gossip4")


@dataclass
class Topology:
    """Running nodes of one topology (see the module docstring)."""

    name: str
    replication_factor: int
    nodes: dict[str, RunningNode]
    killed: list[str] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes.values())

    @property
    def kafka_bootstrap(self) -> str:
        """The Kafka door of every live node (each node's first shard)."""
        return ",".join(n.kafka_bootstrap for n in self.nodes.values() if n.alive())

    @property
    def clustered(self) -> bool:
        return self.name != "single"

    def leader(self, topic: str, partition: int) -> str:
        """The node leading the partition, once the live nodes agree on one."""
        if not self.clustered:
            return next(iter(self.nodes))
        with Client(self.bootstrap) as client:  # a node may apply the creation a moment later
            described = wait_until(lambda: client.describe_topic(topic), f"{topic} known")
            pid = partition_id(described.topic.topic_id, partition)

        def agreed() -> str | None:
            named = set()
            for node in self.nodes.values():
                if node.alive():
                    try:
                        named.add(offsets(node, pid).leader)
                    except (AssertionError, OSError):
                        continue  # not a replica of the partition
            named.discard(None)
            return named.pop() if len(named) == 1 else None

        leader: str = wait_until(agreed, f"one leader of {topic}/{partition}")
        return leader

    def kill_leader(self, topic: str, partition: int) -> str:
        """SIGKILL the node leading `topic/partition`; its name. A cluster
        carries on without it until `heal`; a single node is restarted at once
        (a crash: nothing else could serve)."""
        name = self.leader(topic, partition)
        self.nodes[name].kill()
        self.killed.append(name)
        if not self.clustered:
            self.heal()
        return name

    def heal(self) -> None:
        """Restart every killed node where it was (same ports, same data)."""
        while self.killed:
            name = self.killed.pop()
            old = self.nodes[name]
            changes: dict[str, Any] = {"port": old.port}
            if self.name == "gossip4":  # join through a member that is up (the seed may not be)
                changes["join"] = next(
                    n.info["membership_address"] for n in self.nodes.values() if n.alive()
                )
            self.nodes[name] = old.restart(**changes)

    def stop(self) -> None:
        for node in self.nodes.values():
            if node.alive():
                node.kill()


def _secret(path: Path) -> Path:
    write_secret(path)
    return path


def start(name: str, tmp: Path) -> Topology:
    """Start topology `name` under `tmp` (nodes ready: node.json written)."""
    common: dict[str, Any] = {
        "admin_port": 0,
        "shard_port_base": 0,  # ephemeral: only the node ports are fixed
        "retention_check_interval": 1,
        "group_partitions": 4,  # a positions topic of 4 partitions (Raft groups), not 16
    }
    for i in range(1, 5):
        (tmp / f"n{i}").mkdir()
    if name == "single":  # a fixed port, so its Kafka ports (port+2022+i) survive a restart
        node = retry_on_port_in_use(
            lambda: start_node(
                tmp / "n1", cores=2, data_dir=tmp / "n1" / "data", port=free_port(), **common
            )
        )
        return Topology(name, 1, {"n1": node})
    if name == "static3":
        secret = _secret(tmp / "secret")
        return Topology(name, 3, retry_on_port_in_use(lambda: _static(tmp, secret, common)))
    if name == "gossip4":
        secret = _secret(tmp / "secret")
        nodes = {}
        for i in range(1, 5):
            n = f"n{i}"
            join = None if i == 1 else nodes["n1"].info["membership_address"]
            nodes[n] = retry_on_port_in_use(
                lambda n=n, join=join: start_node(
                    tmp / n,
                    cores=1,
                    data_dir=tmp / n / "data",
                    node_id=n,
                    port=free_port(),
                    cluster_secret_file=secret,
                    routing="userspace",
                    membership_port=0,
                    join=join,
                    dead_grace=60,
                    **common,
                )
            )
        topology = Topology(name, 3, nodes)
        wait_until(lambda: _all_alive(topology), "every member alive in every view")
        # The seed starts the write decisions group alone and placement grows it
        # a voter at a time: until it has three, losing one of its two voters
        # stalls every atomic write (a check that kills a leader would test the
        # cluster's bootstrap, not its feature).
        wait_until(
            lambda: decisions_settled(list(nodes.values())),
            "the write decisions group on three voters",
        )
        return topology
    raise ValueError(f"unknown topology {name!r}")


def _static(tmp: Path, secret: Path, common: dict[str, Any]) -> dict[str, RunningNode]:
    """Nodes n1-n3 of a static cluster on fresh ports (one that loses a port to
    another process stops those it started: `retry_on_port_in_use` starts again)."""
    ids = ("n1", "n2", "n3")
    ports = {n: free_port() for n in ids}
    nodes: dict[str, RunningNode] = {}
    try:
        for n in ids:
            peers = ",".join(f"{o}=127.0.0.1:{p}" for o, p in ports.items() if o != n)
            nodes[n] = start_node(
                tmp / n,
                cores=2,
                data_dir=tmp / n / "data",
                node_id=n,
                port=ports[n],
                peers=peers,
                cluster_secret_file=secret,
                **common,
            )
    except BaseException:
        for node in nodes.values():
            node.kill()
        raise
    return nodes


def _all_alive(topology: Topology) -> bool:
    for node in topology.nodes.values():
        with urllib.request.urlopen(f"{node.admin_url}/status", timeout=5) as answer:
            members = json.loads(answer.read())["members"]
        if len(members) != len(topology.nodes) or any(m["state"] != "alive" for m in members):
            return False
    return True
