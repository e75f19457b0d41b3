"""The classic group protocol's embedded payloads, sans I/O.

A classic member's JoinGroup carries, per assignment protocol it supports,
a `ConsumerProtocolSubscription` (its topics; from version 1 the partitions
it owns), and its SyncGroup answer carries a `ConsumerProtocolAssignment`:
each an int16 version, then the struct at that version (Kafka's
`ConsumerProtocol`). A newer version only adds fields at the end, so one we
do not know is read at the newest we do and the rest is ignored, as Kafka's
own readers do.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any, Final

from laminar.kafka import messages as m
from laminar.kafka.errors import ErrorCode, KafkaError
from laminar.kafka.primitives import WireError

COOPERATIVE: Final = frozenset({"cooperative-sticky"})
"""Assignors whose members keep their partitions across a rebalance (KIP-429)."""
_VERSION = struct.Struct(">h")
ASSIGNMENT_VERSION: Final = 0

TopicPartition = tuple[str, int]


def protocol_for(protocols: Sequence[Any]) -> tuple[str, bytes, bool]:
    """The member's preferred assignment protocol: (name, its subscription
    bytes, whether it is cooperative). The coordinator assigns on the server,
    so the name is only told back to the member; each member gets its own first
    choice (a name it offered, as a client checks)."""
    first = protocols[0]
    return first.name, first.metadata, first.name in COOPERATIVE


def decode_subscription(data: bytes) -> tuple[list[str], frozenset[TopicPartition]]:
    """(topics, owned partitions) of a ConsumerProtocolSubscription."""
    body = _versioned(m.ConsumerProtocolSubscription, data)
    owned = frozenset(
        (tp.topic, p) for tp in getattr(body, "owned_partitions", ()) for p in tp.partitions
    )
    return list(body.topics), owned


def assignment_bytes(partitions: Iterable[TopicPartition]) -> bytes:
    """A ConsumerProtocolAssignment of `partitions`, grouped by topic."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    body = m.ConsumerProtocolAssignment(
        assigned_partitions=[
            m.ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps)
            for t, ps in by_topic.items()
        ]
    )
    out = bytearray(_VERSION.pack(ASSIGNMENT_VERSION))
    m.encode(body, ASSIGNMENT_VERSION, out)
    return bytes(out)


def _versioned(cls: type[Any], data: bytes) -> Any:
    if len(data) < _VERSION.size:
        raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "empty member metadata")
    (version,) = _VERSION.unpack_from(data)
    low, high = cls.VALID_VERSIONS
    if version < low:
        raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"metadata version {version}")
    try:
        body, _ = m.decode(cls, min(version, high), memoryview(data), _VERSION.size)
    except WireError as exc:
        raise KafkaError(
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"member metadata does not decode: {exc}"
        ) from None
    return body
