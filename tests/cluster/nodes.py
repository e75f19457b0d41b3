"""Real clusters of `laminar-node` processes for tests: start, kill, restart, read replicas.

    with Cluster.start(tmp_path, 3) as cluster:
        cluster.bootstrap                       # "127.0.0.1:p1,127.0.0.1:p2,..."
        cluster.nodes["n1"].kill()              # SIGKILL, for good
        cluster.restart("n1")                   # same data dir, same ports
        read_replica(cluster.nodes["n2"], pid)  # that node's committed records

Each node gets a fixed node port chosen free up front (peers must know each
other's node ports before they start; `tests.support.ports`): a start that
loses its port anyway is made again on fresh ports, a restart on the same
port is retried until the port is free. Shard and admin ports are ephemeral.
With `prefix(node_id)` a node runs under a command (a network namespace of
`tests.cluster.netns`), and `host(node_id)` is the address it binds.
With `certs` (a directory of `laminar.certs.make_cluster_certs`) every node
runs TLS with its own certificate, and its peer links are mutual TLS; the
cluster then needs no secret, and `request` speaks TLS to it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import ssl
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laminar.placement import shard_for
from laminar.replication.auth import write_secret
from laminar.wire import (
    NEED_DATA,
    ErrorCode,
    ErrorResponse,
    FetchRequest,
    FetchResponse,
    FrameDecoder,
    ListOffsetsRequest,
    ListOffsetsResponse,
    Message,
    decode_response,
)
from laminar.wire.records import decode_record
from tests.support import free_port, retry_on_port_in_use, wait_until
from tests.system.nodes import RunningNode, start_node

if TYPE_CHECKING:
    from tests.cluster.netns import TestNetwork


def host_index(node_id: str) -> int:
    """The network host of node `n{i+1}` (`Cluster.start_on`): i."""
    return int(node_id.removeprefix("n")) - 1


@dataclass
class Cluster:
    """Nodes n1..nN of one static cluster (see the module docstring)."""

    tmp: Path
    ports: dict[str, int]
    flags: dict[str, Any]
    cores: int
    host: Callable[[str], str]
    prefix: Callable[[str], list[str]]
    certs: Path | None = None
    nodes: dict[str, RunningNode] = field(default_factory=dict)

    @classmethod
    @contextlib.contextmanager
    def start(
        cls,
        tmp: Path,
        count: int = 3,
        *,
        cores: int = 2,
        secret: Path | None = None,
        host: Callable[[str], str] = lambda node_id: "127.0.0.1",
        prefix: Callable[[str], list[str]] = lambda node_id: [],
        certs: Path | None = None,
        **flags: Any,
    ) -> Iterator[Cluster]:
        ids = [f"n{i}" for i in range(1, count + 1)]
        if secret is None and certs is None:  # a cluster never runs without peer authentication
            secret = tmp / "cluster-secret"
            write_secret(secret)
        if secret is not None:
            flags["cluster_secret_file"] = secret
        clusters: list[Cluster] = []

        def attempt() -> Cluster:
            """All nodes on fresh ports and data dirs, an earlier attempt's gone."""
            for earlier in clusters:
                earlier.stop()
            for node_id in ids:
                shutil.rmtree(tmp / node_id, ignore_errors=True)
            ports = {node_id: free_port() for node_id in ids}
            cluster = cls(tmp, ports, flags, cores, host, prefix, certs)
            clusters.append(cluster)
            for node_id in ids:
                cluster.nodes[node_id] = cluster._start_once(node_id)
            return cluster

        try:
            yield retry_on_port_in_use(attempt)
        finally:
            for cluster in clusters:
                cluster.stop()

    @classmethod
    def start_on(
        cls, net: TestNetwork, tmp: Path, count: int = 3, **flags: Any
    ) -> contextlib.AbstractContextManager[Cluster]:
        """`start` with node n{i+1} on host i of `net` (its address, its namespace)."""
        return cls.start(
            tmp,
            count,
            host=lambda node_id: net.address(host_index(node_id)),
            prefix=lambda node_id: net.exec_prefix(host_index(node_id)),
            **{"insecure": True, **flags},
        )

    def _start(self, node_id: str, **changes: Any) -> RunningNode:
        """Start `node_id` on its own port (its peers know it), again while a
        process on its way out still holds that port."""
        return retry_on_port_in_use(lambda: self._start_once(node_id, **changes))

    def _start_once(self, node_id: str, **changes: Any) -> RunningNode:
        peers = ",".join(
            f"{other}={self.host(other)}:{port}"
            for other, port in self.ports.items()
            if other != node_id
        )
        flags = {
            "node_id": node_id,
            "port": self.ports[node_id],
            "host": self.host(node_id),
            "admin_port": 0,
            "shard_port_base": 0,
            "peers": peers,
            **self.tls_flags(node_id),
            **self.flags,
            **changes,
        }
        os.makedirs(self.tmp / node_id, exist_ok=True)
        return start_node(
            self.tmp / node_id,
            self.cores,
            data_dir=self.tmp / node_id / "data",
            prefix=self.prefix(node_id),
            **flags,
        )

    def tls_flags(self, node_id: str) -> dict[str, Path]:
        """Node `node_id`'s own certificate and the cluster's CA ({} without `certs`)."""
        if self.certs is None:
            return {}
        return {
            "tls_cert_file": self.certs / f"{node_id}.crt",
            "tls_key_file": self.certs / f"{node_id}.key",
            "tls_ca_file": self.certs / "ca.crt",
        }

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host(n)}:{p}" for n, p in self.ports.items())

    def restart(self, node_id: str, **changes: Any) -> RunningNode:
        node = self.nodes[node_id]
        if node.alive():
            node.kill()
        self.nodes[node_id] = self._start(node_id, **changes)
        return self.nodes[node_id]

    def live(self) -> dict[str, RunningNode]:
        return {n: node for n, node in self.nodes.items() if node.alive()}

    def stop(self) -> None:
        """SIGKILL every node still running."""
        for node in self.live().values():
            node.kill()


# -- talking to one replica -------------------------------------------------------------


@contextlib.contextmanager
def gossip_node(
    tmp: Path,
    name: str,
    certs: Path,
    seed: RunningNode | None,
    ca_file: str | Path | None = None,
    **flags: Any,
) -> Iterator[RunningNode]:
    """Node `name` of a cluster joined by gossip on certificates (`certs`:
    NAME.crt, NAME.key, ca.crt unless `ca_file`): the seed runs with
    --gossip, the others --join it; membership is signed by the
    certificates, no secret. Its files in tmp/NAME."""
    (tmp / name).mkdir()
    with start_node(
        tmp / name,
        cores=1,
        data_dir=tmp / name / "data",
        node_id=name,
        gossip=seed is None,
        join=seed.info["membership_address"] if seed else None,
        tls_cert_file=certs / f"{name}.crt",
        tls_key_file=certs / f"{name}.key",
        tls_ca_file=ca_file or certs / "ca.crt",
        **flags,
    ) as node:
        yield node


def request(
    node: RunningNode, pid: int, message: Message, timeout_s: float = 10.0, ca_file: str = ""
) -> Any:
    """Send `message` to the shard of `node` that owns `pid`; its decoded answer
    (over TLS trusting `ca_file`, default the node's own --tls-ca-file, if it has one)."""
    port = node.shard_ports[shard_for(pid, len(node.shard_ports))]
    with contextlib.ExitStack() as stack:
        sock = stack.enter_context(socket.create_connection((node.host, port), timeout=timeout_s))
        ca_file = ca_file or node.flags.get("tls_ca_file", "")
        if ca_file:
            context = ssl.create_default_context(cafile=str(ca_file))
            sock = stack.enter_context(context.wrap_socket(sock, server_hostname=node.host))
        sock.sendall(message.encode(1))
        decoder = FrameDecoder(64 << 20)
        while True:
            frame = decoder.next_frame()
            if frame is not NEED_DATA:
                return decode_response(frame)
            data = sock.recv(1 << 20)
            if not data:
                raise ConnectionError("the node closed the connection")
            decoder.feed(data)


def offsets(node: RunningNode, pid: int, ca_file: str = "") -> ListOffsetsResponse:
    answer = request(node, pid, ListOffsetsRequest(pid, any_replica=True), ca_file=ca_file)
    if not isinstance(answer, ListOffsetsResponse):
        raise AssertionError(f"list offsets on {node.bootstrap}: {answer}")
    return answer


def read_replica(node: RunningNode, pid: int) -> list[tuple[int, bytes]]:
    """Every committed record `node`'s replica of `pid` still holds (retention
    may have removed the oldest, also while this reads: then it reads again):
    (index, blob)."""
    for _ in range(10):
        out: list[tuple[int, bytes]] = []
        range_ = offsets(node, pid)
        index, end = range_.lowest_index, range_.committed_index
        while index < end:
            message = FetchRequest(pid, index, max_bytes=4 << 20, any_replica=True)
            answer = request(node, pid, message)
            if isinstance(answer, ErrorResponse):
                if answer.code is ErrorCode.OFFSET_OUT_OF_RANGE:
                    break  # retention passed this point meanwhile: read again
                raise AssertionError(f"fetch from {node.bootstrap}: {answer}")
            assert isinstance(answer, FetchResponse)
            out += [(r.index, r.blob) for r in answer.records]
            index = answer.next_index
        else:
            return out
    raise AssertionError(f"{node.bootstrap}: retention kept moving the start of {pid}")


def leader_of(cluster: Cluster, pid: int, among: Iterable[str] | None = None) -> str:
    """The node every live node in `among` (default: all live) names as `pid`'s leader,
    once they agree. Right after a topic is created this also waits until every
    one of them has applied the creation: until then a node answers UNKNOWN_TOPIC,
    which the client does not retry."""
    names = list(among) if among is not None else list(cluster.live())

    def agreed() -> str | None:
        leaders = {offsets(cluster.nodes[name], pid).leader for name in names}
        leaders.discard(None)
        return leaders.pop() if len(leaders) == 1 else None

    leader: str = wait_until(agreed, f"one leader of partition {pid} among {names}")
    return leader


def wait_committed(cluster: Cluster, pid: int, end: int) -> None:
    """Wait until every live replica of `pid` has committed up to `end` (exclusive)."""
    for name, node in cluster.live().items():
        wait_until(lambda n=node: offsets(n, pid).committed_index >= end, f"{name} at {end}")


def read_answers(
    node: RunningNode, pid: int, start: int = 0
) -> list[tuple[tuple[int, bytes], ...]]:
    """What a reader of `node` gets fetching `pid` from `start` until an empty
    answer: each answer's (index, value) pairs (contiguous within one answer;
    the protocol's own entries leave gaps between answers). Unlike
    `read_replica` it trusts the node to stop at its commit index."""
    out: list[tuple[tuple[int, bytes], ...]] = []
    while True:
        message = FetchRequest(pid, start, max_bytes=4 << 20, any_replica=True)
        answer = request(node, pid, message)
        if isinstance(answer, ErrorResponse):
            raise AssertionError(f"fetch from {node.bootstrap}: {answer}")
        if not answer.records:
            return out
        out.append(tuple((r.index, decode_record(r.blob)[0]) for r in answer.records))
        start = answer.next_index


def committed_values(node: RunningNode, pid: int) -> list[tuple[int, bytes]]:
    """`read_replica` with each record's value instead of its encoded blob."""
    return [(index, decode_record(blob)[0]) for index, blob in read_replica(node, pid)]
