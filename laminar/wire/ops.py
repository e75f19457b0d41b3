"""Op codes and flag bits: bytes 6 and 7 of every frame.

A response carries the op of its request with the RESPONSE flag set; an error
response also sets ERROR (its header is then an `ErrorResponse`, whatever the
op). Op codes are grouped so that routers can classify a frame from one byte:

- 1-31: client requests (this module names them all);
- 32-63: internal node traffic between shards (FORWARD, METADATA_TAIL), accepted
  only on the inter-shard channel;
- 64-95: reserved for Raft (`RAFT_OPS`), defined by `laminar.raft`;
- 96-127: reserved for membership (`MEMBERSHIP_OPS`), defined by `laminar.swim`;
- 0 and 128-255: never sent.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final


class Op(IntEnum):
    """What a frame asks for (byte 6)."""

    PRODUCE = 1
    FETCH = 2
    LIST_OFFSETS = 3
    METADATA = 4
    CREATE_TOPIC = 5
    DELETE_TOPIC = 6
    LIST_TOPICS = 7
    PING = 8
    # The atomic write protocol (`laminar.wire.writes`); 13-15 and 17 are internal
    # (shard to shard, or node to node over an authenticated peer session).
    STAGE = 9
    COMMIT_WRITE = 10
    ABORT_WRITE = 11
    WRITE_STATUS = 12
    CHECK_STAGED = 13
    PUBLISH_STAGED = 14
    DROP_STAGED = 15
    ALTER_TOPIC = 16
    APPEND_STAGED = 17
    DECOMMISSION_NODE = 18
    # Consumer groups (`laminar.groups.frames`).
    FIND_COORDINATOR = 19
    GROUP_HEARTBEAT = 20
    GROUP_COMMIT = 21
    GROUP_POSITIONS = 22
    GROUP_DESCRIBE = 23
    GROUP_LIST = 24
    GROUP_RESET = 25
    GROUP_DELETE = 26
    # Client security (`laminar.security.frames`): a connection's login, and
    # the users and ACLs of the cluster.
    AUTHENTICATE = 27
    USERS = 28
    ACLS = 29
    FORWARD = 32
    METADATA_TAIL = 33


CLIENT_OPS: Final = range(1, 32)
INTERNAL_OPS: Final = range(32, 64)
RAFT_OPS: Final = range(64, 96)
MEMBERSHIP_OPS: Final = range(96, 128)


class Flags:
    """Flag bits (byte 7). Plain ints, not an IntFlag: they are tested per frame.

    Unknown bits must be sent as zero and are ignored on receipt.
    """

    RESPONSE: Final = 0x01
    ERROR: Final = 0x02
