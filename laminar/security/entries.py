"""The msgpack form the users' and ACLs' metadata entries share with the topic
entries (`laminar.replication.metadata`): a map with an `op`."""

from __future__ import annotations

from typing import Any

import msgpack


def pack(body: dict[str, Any]) -> bytes:
    packed: bytes = msgpack.packb(body, use_bin_type=True)
    return packed


def unpack(value: bytes) -> Any:
    """The unpacked body, or None for bytes that are not msgpack."""
    try:
        return msgpack.unpackb(value)
    except Exception:  # damaged or foreign bytes: skip them, never crash a replay
        return None
