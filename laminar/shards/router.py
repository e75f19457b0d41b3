"""Where a request is served: a pure decision from the frame's routing prefix.

Rules, and why:

- Partition requests (produce, fetch, list offsets, ping) are served only by the
  shard that owns the partition, `shard_for(pid, shard_count)`: the single
  writer of each log. Any other shard forwards the frame, byte for byte, to the
  owner over the inter-shard channel. This holds whatever the kernel steering
  does (eBPF, cBPF or none): correctness never depends on BPF.
- A forwarded frame is never forwarded again: if the receiving shard does not
  own the partition (the two shards disagree on the shard count, a bug), it
  answers NOT_OWNER instead of bouncing the frame around.
- Topic creation, deletion and changes, node decommissions, users and ACLs,
  and finding a group's coordinator (which may make the positions topic), go to the owner
  of the metadata partition, the one shard that appends to the metadata log
  and assigns topic ids.
- Metadata and topic listing are answered by whichever shard received them:
  every shard holds the applied metadata (the owner waits for the other shards
  to apply a change before acknowledging it).
- Internal ops (FORWARD, METADATA_TAIL) are accepted only on the inter-shard
  channel, never unwrapped from a FORWARD; a client that sends one gets
  INVALID_REQUEST (it would otherwise pose as a shard). The metadata tail is
  sent straight to the metadata owner's channel, so it is served where it
  arrives (a non-owner answers NOT_OWNER).
- The write protocol's ops are served by the owner of the frame's partition
  id: staging and the internal check/publish/drop/append by the partition's
  owner, commit/abort/status by the owner of the commit's coordinator id (on a
  clustered node: of `DECISIONS_PID`, whose Raft group decides every commit).
  The internal ones (`INTERNAL_WRITE_OPS`) only from another shard, this one,
  or another node over an authenticated peer session (`PEER_OPS` are all a
  peer session serves): a client that could publish staged data would bypass
  the commit decision.
- Everything else (unknown ops, Raft and membership ops that have no server
  yet, response frames) is handled locally, where decoding answers it with the
  right error.

Only the first 20 bytes of a frame are looked at, so this is what a forwarder
can decide before decoding anything else.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from laminar.placement import shard_for
from laminar.replication.metadata import METADATA_PID
from laminar.wire import ErrorCode, Flags, Op
from laminar.wire.writes import DECISIONS_PID

PARTITION_OPS: Final = frozenset({Op.PRODUCE, Op.FETCH, Op.LIST_OFFSETS, Op.PING})
WRITE_OPS: Final = frozenset(
    {
        Op.STAGE,
        Op.COMMIT_WRITE,
        Op.ABORT_WRITE,
        Op.WRITE_STATUS,
        Op.CHECK_STAGED,
        Op.PUBLISH_STAGED,
        Op.DROP_STAGED,
        Op.APPEND_STAGED,
    }
)
GROUP_OPS: Final = frozenset(
    {
        Op.GROUP_HEARTBEAT,
        Op.GROUP_COMMIT,
        Op.GROUP_POSITIONS,
        Op.GROUP_DESCRIBE,
        Op.GROUP_LIST,
        Op.GROUP_RESET,
        Op.GROUP_DELETE,
    }
)
"""Served by the owner of the frame's partition: the positions partition
holding the group (`laminar.groups.service`)."""
COORDINATOR_OPS: Final = frozenset({Op.COMMIT_WRITE, Op.ABORT_WRITE, Op.WRITE_STATUS})
INTERNAL_WRITE_OPS: Final = frozenset(
    {Op.CHECK_STAGED, Op.PUBLISH_STAGED, Op.DROP_STAGED, Op.APPEND_STAGED}
)
PEER_OPS: Final = INTERNAL_WRITE_OPS | {
    Op.WRITE_STATUS,
    Op.LIST_OFFSETS,
    Op.FIND_COORDINATOR,
    Op.CREATE_TOPIC,
    Op.DELETE_TOPIC,
    Op.USERS,
    Op.ACLS,
    Op.METADATA,
}
"""What another node may ask over an authenticated peer session: the write
protocol's internal ops, a commit's state (a staging node's expiry asks), a
partition's range (a group coordinator checks a commit against its end), and
where a group lives (the Kafka door asks the metadata leader, which makes the
positions topic on the first ask), topic, user and ACL changes (the Kafka
door takes its clients' ones to the metadata leader, having checked their rights),
and the metadata (the partition leaders a node knows: the Kafka door asks the
nodes that hold a partition it does not; a client's metadata needs a login)."""
NODE_OPS: Final = frozenset({Op.METADATA, Op.LIST_TOPICS})
METADATA_WRITE_OPS: Final = frozenset(
    {
        Op.CREATE_TOPIC,
        Op.DELETE_TOPIC,
        Op.ALTER_TOPIC,
        Op.DECOMMISSION_NODE,
        Op.FIND_COORDINATOR,
        Op.USERS,
        Op.ACLS,
    }
)
"""FIND_COORDINATOR is one: a group's first makes the positions topic. USERS
and ACLS are, lists included (the router sees only the op): the owner shard
answers a list from its applied state."""
INTERNAL_OPS: Final = frozenset({Op.FORWARD, Op.METADATA_TAIL})


class Action(enum.Enum):
    LOCAL = "local"
    """Serve it on this shard."""
    FORWARD = "forward"
    """Send it to `Decision.target` over the inter-shard channel."""
    REJECT = "reject"
    """Answer with `Decision.code` and `Decision.message`."""


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    target: int = -1
    code: ErrorCode = ErrorCode.NONE
    message: str = ""


LOCAL: Final = Decision(Action.LOCAL)


def owner_of(op: int, partition_id: int, shard_count: int, clustered: bool = False) -> int | None:
    """The shard that must serve `op` on `partition_id`; None if any shard may."""
    if clustered and op in COORDINATOR_OPS:
        return shard_for(DECISIONS_PID, shard_count)
    if op in PARTITION_OPS or op in WRITE_OPS or op in GROUP_OPS:
        return shard_for(partition_id, shard_count)
    if op in METADATA_WRITE_OPS:
        return shard_for(METADATA_PID, shard_count)
    return None


def route(
    op: int,
    flags: int,
    partition_id: int,
    *,
    shard_id: int,
    shard_count: int,
    forwarded: bool = False,
    internal: bool = False,
    clustered: bool = False,
) -> Decision:
    """Decide where a request frame is served.

    `forwarded`: the frame came wrapped in a FORWARD from another shard;
    `internal`: it arrived on the inter-shard channel or a peer session (not
    from a client); `clustered`: this node is one of a cluster's.
    """
    if flags & (Flags.RESPONSE | Flags.ERROR):
        return LOCAL  # decoding answers "expected a request"
    if op in INTERNAL_OPS:
        if internal and not forwarded:
            return LOCAL
        return Decision(
            Action.REJECT,
            code=ErrorCode.INVALID_REQUEST,
            message=f"{Op(op).name} is an internal op, accepted only between shards",
        )
    if op in INTERNAL_WRITE_OPS and not internal:
        return Decision(
            Action.REJECT,
            code=ErrorCode.INVALID_REQUEST,
            message=f"op {op} is internal to the cluster (a coordinator's publish); "
            "clients commit with COMMIT_WRITE",
        )
    owner = owner_of(op, partition_id, shard_count, clustered)
    if owner is None or owner == shard_id:
        return LOCAL
    if forwarded:
        return Decision(
            Action.REJECT,
            code=ErrorCode.NOT_OWNER,
            message=(
                f"shard {shard_id} was forwarded a request for partition {partition_id}, "
                f"which shard {owner} owns; refresh metadata"
            ),
        )
    return Decision(Action.FORWARD, target=owner)
