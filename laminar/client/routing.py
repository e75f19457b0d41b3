"""Where a request goes: addresses, the cluster view from metadata, and routes.

Shard-direct routing is pure computation: the partition id comes from the
topic id in the metadata, the shard from `laminar.placement.shard_for`, and the
address from that shard's entry in the metadata. No request asks the node
where a partition lives, and the same code serves the sync and async clients.

In a cluster the metadata also lists the nodes: a partition's replicas are the
top `replication_factor` of them by weighted rendezvous
(`laminar.placement.replica_nodes`), and requests go to the partition's leader,
on the shard that owns the partition on that node. The metadata names the
leaders of the partitions the answering node hosts (`MetadataResponse.leaders`),
so produces go straight to them; for the others the client starts at the
first replica and learns the leader from NOT_LEADER answers, which name it
(`ClusterView.learn`; the cache survives metadata refreshes, and a refresh's
leaders replace what it held). Commit, abort and status requests of atomic
writes go to the leader of the cluster's decisions group (`DECISIONS_PID`),
whatever their coordinator bucket.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import xxhash

from laminar.client.errors import (
    LaminarError,
    NotEnoughReplicasError,
    NotLeaderError,
    UnknownPartitionError,
    UnknownTopicError,
)
from laminar.placement import partition_id, replica_nodes, shard_for
from laminar.wire import (
    DEFAULT_MAX_FRAME_BYTES,
    ErrorCode,
    MetadataResponse,
    NodeInfo,
    ShardInfo,
    TopicInfo,
)
from laminar.wire.writes import DECISION_REPLICAS, DECISIONS_PID, coordinated_by_decisions

Address = tuple[str, int]
"""(host, port) of a TCP endpoint."""

DEFAULT_PORT = 7070
AVOID_S = 5.0
"""How long a node that gave no answer (`laminar.client.retry.no_answer`) is
routed around: long enough for its partitions to elect other leaders (1-2 s)."""

# A shard that binds every interface reports a wildcard host; reach it where the
# node itself was reached instead.
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})


def parse_address(text: str, default_port: int = DEFAULT_PORT) -> Address:
    """`"host:port"`, `"host"`, `":port"` or `"[v6]:port"` as an `Address`."""
    text = text.strip()
    if not text:
        raise ValueError("empty address: expected HOST:PORT, e.g. 127.0.0.1:7070")
    host, port_text = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"bad address {text!r}: unclosed '[' in an IPv6 address")
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"bad address {text!r}: expected ':PORT' after ']'")
        port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    if not port_text:
        return (host or "127.0.0.1", default_port)
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"bad address {text!r}: port {port_text!r} is not a number") from None
    if not 0 < port < 65536:
        raise ValueError(f"bad address {text!r}: port must be in 1..65535")
    return (host or "127.0.0.1", port)


def parse_addresses(text: str, default_port: int = DEFAULT_PORT) -> tuple[Address, ...]:
    """A comma-separated bootstrap list (`"h1:7070,h2:7170"`) as addresses."""
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise ValueError("empty address: expected HOST:PORT, e.g. 127.0.0.1:7070")
    return tuple(parse_address(part, default_port) for part in parts)


def format_address(address: Address) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition a keyed record goes to when the caller names none: the same
    key always lands in the same partition (while the count stays the same)."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    return int(xxhash.xxh64_intdigest(key)) % partitions


@dataclass(frozen=True, slots=True)
class Route:
    """Where one partition's requests go."""

    partition_id: int
    shard_id: int
    address: Address


@dataclass(slots=True)
class RouteHints:
    """What a client learned from answers, beyond the metadata (partition
    leaders named by NOT_LEADER answers, nodes recently unreachable), and where
    it prefers to read."""

    read_from_followers: bool = False
    """Fetches and offsets go to a follower replica when one is reachable."""
    leaders: dict[int, str] = field(default_factory=dict)
    """partition id -> the node last named its leader."""
    avoided: dict[str, float] = field(default_factory=dict)
    """node id -> monotonic time until which it is not routed to."""
    silent: dict[Address, float] = field(default_factory=dict)
    """address -> monotonic time until which metadata is asked there last: it
    gave no answer (kept by address as well: before any metadata, no node is
    known to be there)."""

    def avoid(self, node_id: str) -> None:
        self.avoided[node_id] = time.monotonic() + AVOID_S
        for pid, leader in list(self.leaders.items()):
            if leader == node_id:
                del self.leaders[pid]

    def unreachable(self, address: Address, nodes: Mapping[str, NodeInfo]) -> None:
        """A request to `address` got no answer: route around the node there (of
        `nodes`, the metadata's) for `AVOID_S`, while its partitions elect
        other leaders, and ask others for metadata first."""
        self.silent[address] = time.monotonic() + AVOID_S
        node_id = _node_at(address, nodes)
        if node_id is not None:
            self.avoid(node_id)

    def avoids(self, node_id: str, now: float) -> bool:
        """Whether `node_id` is being routed around at `now`."""
        return self.avoided.get(node_id, 0.0) > now

    def avoids_address(self, address: Address, nodes: Mapping[str, NodeInfo], now: float) -> bool:
        """Whether `address` (or the node there) is being routed around at `now`."""
        if self.silent.get(address, 0.0) > now:
            return True
        node_id = _node_at(address, nodes)
        return node_id is not None and self.avoids(node_id, now)


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The metadata a client routes by, indexed for lookups on every request."""

    metadata: MetadataResponse
    topics: dict[str, TopicInfo]
    shard_addresses: tuple[Address, ...]
    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    """Every node of a cluster (empty for a single node)."""
    hints: RouteHints = field(default_factory=lambda: RouteHints())
    """What failed requests taught (kept by the client across refreshes)."""

    @classmethod
    def from_metadata(
        cls,
        metadata: MetadataResponse,
        reached_at: Address,
        hints: RouteHints | None = None,
    ) -> ClusterView:
        """Index `metadata`, received from the node at `reached_at`."""
        shards = sorted(metadata.shards, key=lambda s: s.shard_id)
        if [s.shard_id for s in shards] != list(range(len(shards))):
            ids = [s.shard_id for s in shards]
            raise ValueError(f"metadata shard ids must be 0..N-1, got {ids}")
        addresses = tuple(_reachable(s, reached_at[0]) for s in shards)
        nodes = {n.node_id: n for n in metadata.nodes}
        hints = hints if hints is not None else RouteHints()
        for pid, leader in metadata.leaders:  # fresher than what answers taught earlier
            if leader in nodes:
                hints.leaders[pid] = leader
        return cls(
            metadata,
            {t.name: t for t in metadata.topics},
            addresses,
            nodes,
            hints,
        )

    @property
    def shard_count(self) -> int:
        return len(self.shard_addresses)

    @property
    def max_frame_bytes(self) -> int:
        """The largest request the node accepts (the default limit for a node
        whose metadata does not say)."""
        limit = self.metadata.max_frame_bytes
        return DEFAULT_MAX_FRAME_BYTES if limit is None else limit

    def with_topic(self, topic: TopicInfo) -> ClusterView:
        """This view plus a topic just created (no metadata round trip needed)."""
        topics = dict(self.topics)
        topics[topic.name] = topic
        return replace(self, topics=topics)

    def without_topic(self, name: str) -> ClusterView:
        topics = dict(self.topics)
        topics.pop(name, None)
        return replace(self, topics=topics)

    def topic(self, name: str) -> TopicInfo:
        info = self.topics.get(name)
        if info is None:
            raise UnknownTopicError(
                f"topic {name!r} does not exist (create it with `laminar topic create {name}`)",
                code=ErrorCode.UNKNOWN_TOPIC,
            )
        return info

    def route(self, topic: str, partition: int) -> Route:
        """The route of partition `partition` of `topic`; raises the typed error the
        node would answer with for an unknown topic or partition."""
        info = self.topic(topic)
        check_partition(info, partition)
        pid = partition_id(info.topic_id, partition)
        return self.route_pid(pid)

    def route_pid(self, pid: int) -> Route:
        if not self.nodes:
            shard = shard_for(pid, self.shard_count)
            return Route(pid, shard, self.shard_addresses[shard])
        group = self._group_of(pid)
        route = self.route_to(group, self.leader_of(group))
        return route if group == pid else Route(pid, route.shard_id, route.address)

    def _group_of(self, pid: int) -> int:
        """The Raft group whose leader serves requests for `pid` (the decisions
        group's for a commit's coordinator id)."""
        return DECISIONS_PID if self.nodes and coordinated_by_decisions(pid) else pid

    def route_read(self, topic: str, partition: int) -> Route:
        """Where reads of a partition go: its leader, or with
        `read_from_followers` one of its reachable followers (spread over them
        by partition), which serves what it has committed, possibly a little
        behind the leader."""
        route = self.route(topic, partition)
        if not self.nodes or not self.hints.read_from_followers:
            return route
        pid = route.partition_id
        leader = self.leader_of(pid)
        now = time.monotonic()
        followers = [n for n in self.replicas(pid) if n != leader and not self.hints.avoids(n, now)]
        return self.route_to(pid, followers[pid % len(followers)]) if followers else route

    def replicas(self, pid: int) -> list[str]:
        """The nodes placement puts `pid` on (the metadata partition: every
        node), best first; a decommissioned node is placement's for none."""
        leaving = self.metadata.decommissioned
        weights = {n.node_id: n.weight for n in self.nodes.values() if n.node_id not in leaving}
        pid = self._group_of(pid)
        rf = len(weights)
        if pid == DECISIONS_PID:
            rf = DECISION_REPLICAS
        elif pid:
            topic = next((t for t in self.topics.values() if t.topic_id == pid >> 32), None)
            rf = topic.replication_factor if topic is not None else 1
        return replica_nodes(pid, weights, rf)

    def leader_of(self, pid: int) -> str:
        """The node requests for `pid` go to: its known leader (a node a
        NOT_LEADER answer or the metadata named, also one placement does not
        name: a move puts the group on the nodes its committed membership
        names), else its first replica. Either way not a node that gave no
        answer lately (`RouteHints.avoided`), unless every replica did: the
        others still name a stopped leader until they elect another, and the
        request goes to one of them meanwhile, which redirects it once the new
        leader is known."""
        replicas = self.replicas(pid)
        now = time.monotonic()
        known = self.hints.leaders.get(self._group_of(pid))
        if known is not None and known in self.nodes and not self.hints.avoids(known, now):
            return known
        reachable = [n for n in replicas if not self.hints.avoids(n, now)]
        if reachable:
            return reachable[0]
        return known if known is not None and known in self.nodes else replicas[0]

    def learn(self, error: LaminarError) -> None:
        """Take note of what a failed request taught: a NOT_LEADER answer naming
        the partition's leader sends its next attempt there; NOT_ENOUGH_REPLICAS
        (the node is cut off from most replicas) sends it to the next replica."""
        if isinstance(error, NotLeaderError) and error.partition_id is not None:
            self.learn_leader(error.partition_id, error.leader)
        elif isinstance(error, NotEnoughReplicasError) and error.partition_id is not None:
            pid = error.partition_id
            replicas = self.replicas(pid)
            asked = self.leader_of(pid)
            after = replicas.index(asked) + 1 if asked in replicas else 0
            self.hints.leaders[self._group_of(pid)] = replicas[after % len(replicas)]

    def learn_leader(self, pid: int, leader: str | None) -> None:
        """A node named `leader` the leader of `pid`: route its writes there."""
        if leader is not None and leader in self.nodes:
            self.hints.leaders[self._group_of(pid)] = leader

    def route_to(self, pid: int, node_id: str) -> Route:
        """The route of `pid` on node `node_id` (its owning shard, when known)."""
        node = self.nodes[node_id]
        if not node.shard_ports:  # not learned yet: the node port forwards within the node
            return Route(pid, 0, (node.host, node.port))
        shard = shard_for(pid, len(node.shard_ports))
        return Route(pid, shard, (node.host, node.shard_ports[shard]))

    def node_addresses(self) -> list[Address]:
        """Every node's port (metadata can be fetched from any of them)."""
        return [(n.host, n.port) for n in self.nodes.values()]

    def node_route(self) -> Route:
        """Where node-level requests (metadata, topics) go: the shard that owns
        partition id 0, so that a node which routes them by partition id serves
        them without a hop, and any other node serves them anyway."""
        return self.route_pid(0)


def check_partition(topic: TopicInfo, partition: int) -> None:
    """Raise the `UnknownPartitionError` the node would answer with unless
    `topic` has a partition `partition`."""
    if not 0 <= partition < topic.partitions:
        raise UnknownPartitionError(
            f"topic {topic.name!r} has partitions 0..{topic.partitions - 1}, not {partition}",
            code=ErrorCode.UNKNOWN_PARTITION,
        )


def _reachable(shard: ShardInfo, node_host: str) -> Address:
    host = node_host if shard.host in _WILDCARD_HOSTS else shard.host
    return (host, shard.port)


def _node_at(address: Address, nodes: Mapping[str, NodeInfo]) -> str | None:
    """The node of `nodes` listening at `address` (its node port or a shard's)."""
    host, port = address
    for node in nodes.values():
        if host == node.host and (port == node.port or port in node.shard_ports):
            return node.node_id
    return None


def metadata_timeout_s(timeout_s: float, connect_timeout_s: float) -> float:
    """How long one address may take to answer metadata: a node answers it
    from memory, so no longer than a connect (a stopped node's kernel accepts
    connections, and the request, but nothing answers: the next address is
    asked after this), and never longer than any request."""
    return min(timeout_s, connect_timeout_s)


def metadata_candidates(
    bootstraps: tuple[Address, ...], view: ClusterView | None, hints: RouteHints
) -> list[Address]:
    """Where to ask for metadata, in order: the bootstrap addresses, then every
    node and shard the last metadata named (any of them answers); those that
    gave no answer lately (`RouteHints.unreachable`) last, so a stopped node
    costs a refresh nothing while the others answer."""
    candidates = list(bootstraps)
    nodes: Mapping[str, NodeInfo] = {}
    if view is not None:
        nodes = view.nodes
        for address in (*view.node_addresses(), *view.shard_addresses):
            if address not in candidates:
                candidates.append(address)
    now = time.monotonic()
    return sorted(candidates, key=lambda address: hints.avoids_address(address, nodes, now))
