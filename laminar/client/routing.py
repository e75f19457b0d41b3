"""Where a request goes: addresses, the cluster view from metadata, and routes.

Shard-direct routing is pure computation: the partition id comes from the
topic id in the metadata, the shard from `laminar.placement.shard_for`, and the
address from that shard's entry in the metadata. No request asks the node
where a partition lives, and the same code serves the sync and async clients.
"""

from __future__ import annotations

from dataclasses import dataclass

import xxhash

from laminar.client.errors import UnknownPartitionError, UnknownTopicError
from laminar.placement import partition_id, shard_for
from laminar.wire import ErrorCode, MetadataResponse, ShardInfo, TopicInfo

Address = tuple[str, int]
"""(host, port) of a TCP endpoint."""

DEFAULT_PORT = 7070

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


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The metadata a client routes by, indexed for lookups on every request."""

    metadata: MetadataResponse
    topics: dict[str, TopicInfo]
    shard_addresses: tuple[Address, ...]

    @classmethod
    def from_metadata(cls, metadata: MetadataResponse, reached_at: Address) -> ClusterView:
        """Index `metadata`, received from the node at `reached_at`."""
        shards = sorted(metadata.shards, key=lambda s: s.shard_id)
        if [s.shard_id for s in shards] != list(range(len(shards))):
            ids = [s.shard_id for s in shards]
            raise ValueError(f"metadata shard ids must be 0..N-1, got {ids}")
        addresses = tuple(_reachable(s, reached_at[0]) for s in shards)
        return cls(metadata, {t.name: t for t in metadata.topics}, addresses)

    @property
    def shard_count(self) -> int:
        return len(self.shard_addresses)

    def with_topic(self, topic: TopicInfo) -> ClusterView:
        """This view plus a topic just created (no metadata round trip needed)."""
        topics = dict(self.topics)
        topics[topic.name] = topic
        return ClusterView(self.metadata, topics, self.shard_addresses)

    def without_topic(self, name: str) -> ClusterView:
        topics = dict(self.topics)
        topics.pop(name, None)
        return ClusterView(self.metadata, topics, self.shard_addresses)

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
        if not 0 <= partition < info.partitions:
            raise UnknownPartitionError(
                f"topic {topic!r} has partitions 0..{info.partitions - 1}, not {partition}",
                code=ErrorCode.UNKNOWN_PARTITION,
            )
        pid = partition_id(info.topic_id, partition)
        return self.route_pid(pid)

    def route_pid(self, pid: int) -> Route:
        shard = shard_for(pid, self.shard_count)
        return Route(pid, shard, self.shard_addresses[shard])

    def node_route(self) -> Route:
        """Where node-level requests (metadata, topics) go: the shard that owns
        partition id 0, so that a node which routes them by partition id serves
        them without a hop, and any other node serves them anyway."""
        return self.route_pid(0)


def _reachable(shard: ShardInfo, node_host: str) -> Address:
    host = node_host if shard.host in _WILDCARD_HOSTS else shard.host
    return (host, shard.port)
