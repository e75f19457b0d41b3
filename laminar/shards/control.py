"""The control channel between the supervisor and one shard process.

A Unix stream socketpair made by the supervisor for each shard process it
starts; the shard inherits one end. It carries laminar frames (the same codec
as the network) with the node-private ops below, in the internal op range
32-63 of `laminar.wire.ops` (which names only FORWARD so far):

- `READY` (shard -> supervisor, once): the shard serves, its metadata is caught
  up. Header: {shard_id, pid, runtime, routing_mode}.
- `STATS` (supervisor -> shard, request; the shard answers with the same op and
  the RESPONSE flag): header {} -> header {"stats": <ShardStats as a map>}.
- `VIEW` (supervisor -> shard, after READY and whenever membership changes):
  header {"self_id", "version", "members": [<MembershipView.to_json() entries>]}.

Draining is a signal (SIGTERM), not a message: it must work even when the
shard's loop is too busy to read. End of stream on the control socket tells a
shard its supervisor is gone; it then drains and exits.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from laminar.swim import MembershipView
from laminar.wire import Flags, encode_frame

CONTROL_READY: Final = 48
CONTROL_STATS: Final = 49
CONTROL_VIEW: Final = 50
CONTROL_MAX_FRAME_BYTES: Final = 16 << 20

_PREFIX = struct.Struct(">I")


def ready_frame(info: dict[str, Any]) -> bytes:
    return encode_frame(CONTROL_READY, 0, 0, info)


def stats_request(correlation_id: int) -> bytes:
    return encode_frame(CONTROL_STATS, correlation_id, 0, {})


def stats_response(correlation_id: int, stats: dict[str, Any]) -> bytes:
    return encode_frame(CONTROL_STATS, correlation_id, 0, {"stats": stats}, flags=Flags.RESPONSE)


def view_frame(view: MembershipView) -> bytes:
    header = {"self_id": view.self_id, "version": view.version, "members": view.to_json()}
    return encode_frame(CONTROL_VIEW, 0, 0, header)


def view_from_header(header: dict[str, Any]) -> MembershipView:
    """The view a VIEW frame carries; ValueError when the header is not one."""
    return MembershipView.from_json(
        header.get("self_id"), header.get("version"), header.get("members")
    )
