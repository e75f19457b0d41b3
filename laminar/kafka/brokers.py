"""Who the Kafka door says its brokers are: pure functions of the node layout.

Every shard is a broker (its own Kafka port), so a Kafka client that sends a
partition's requests to the partition's leader broker reaches the one core
that owns the partition: shard-direct, as laminar's own client is. Broker ids
are int32 in Kafka and node ids are strings here, so a broker id is made from
a hash of the node id and the shard id (`broker_id`); the same node and shard
always get the same broker id, on every node and across restarts.
"""

from __future__ import annotations

import struct
from typing import Final

import xxhash

SHARD_BITS: Final = 8
"""Up to 256 shards per node."""
NODE_BITS: Final = 22
"""The node hash's width: a broker id stays a positive int32 (< 2**30)."""
_TOPIC_UUID: Final = struct.Struct(">QQ")
_UUID_PREFIX: Final = int.from_bytes(b"laminar\x01", "big")


def broker_id(node_id: str, shard_id: int) -> int:
    """The Kafka broker id of shard `shard_id` of node `node_id`."""
    if not 0 <= shard_id < 1 << SHARD_BITS:
        raise ValueError(f"shard id {shard_id} is outside 0..{(1 << SHARD_BITS) - 1}")
    node = xxhash.xxh32_intdigest(node_id.encode()) & ((1 << NODE_BITS) - 1)
    return node << SHARD_BITS | shard_id


def topic_uuid(topic_id: int) -> bytes:
    """The Kafka topic id (a UUID, never the zero one) of laminar topic `topic_id`:
    ids are never reused, so neither are these."""
    return _TOPIC_UUID.pack(_UUID_PREFIX, topic_id)


def topic_id_of(uuid: bytes) -> int | None:
    """The laminar topic id a `topic_uuid` names (None: not one of ours)."""
    if len(uuid) != _TOPIC_UUID.size:
        return None
    prefix, topic_id = _TOPIC_UUID.unpack(uuid)
    return topic_id if prefix == _UUID_PREFIX else None
