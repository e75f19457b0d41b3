"""Membership packets <-> bytes, as laminar frames in the membership op range.

A membership datagram is one ordinary laminar frame (`laminar.wire.codec`), so
the XDP classifier and the SK_REUSEPORT program recognise it from the op byte
alone (96-127, `MEMBERSHIP_OPS`) on the node port:

    op       96 + kind (`SwimOp`); flags, correlation id, partition id are 0
    header   a msgpack map {"b": body, "u": updates}
             body     the message's fields as an array (layouts below)
             updates  an array of [kind, node_id, incarnation, ...]:
                      [0, node, inc, address, weight]  alive
                      [1, node, inc, accuser]          suspect
                      [2, node, inc, accuser]          dead (left if accuser == node)
    payload  `trailer_bytes` bytes the transport owns (the authentication tag), else empty

Bodies: ping [seq, target, source, source_address]; ack [seq, source];
ping-req [seq, target, target_address, source, source_address]; nack [seq,
source]; push-pull [source, source_address, reply, [[node, address, state,
incarnation, weight], ...]]; gossip [].

Sizes are exact: the core bounds each packet by `packet_bytes_max` from the
sizes this module computes (`packet_size`, `update_size`, `member_size`), and a
msgpack array's header grows from 1 to 3 bytes past 15 elements, which
`ARRAY_GROWTH_BYTES` accounts for. Decoding validates every field (types,
ranges, lengths) and raises `MalformedPacket`: nothing a peer sends can make
the core hold a malformed value.
"""

from __future__ import annotations

import math
from enum import IntEnum
from typing import Any, Final

import msgpack

from laminar.swim.errors import MalformedPacket, SwimUsageError
from laminar.swim.messages import (
    Ack,
    Alive,
    Dead,
    Gossip,
    Member,
    MemberState,
    Message,
    Nack,
    Packet,
    Ping,
    PingReq,
    PushPull,
    Suspect,
    Update,
)
from laminar.wire.codec import decode_frame, encode_frame
from laminar.wire.errors import ProtocolError, WireUsageError
from laminar.wire.ops import MEMBERSHIP_OPS

NAME_BYTES_MAX: Final = 255
"""A node id or an address is at most this many UTF-8 bytes."""
U32_MAX: Final = 0xFFFF_FFFF
WEIGHT_MAX: Final = 1e9
DATAGRAM_BYTES_MAX: Final = 65_507
"""The largest UDP payload over IPv4: no membership datagram may be larger."""
ARRAY_GROWTH_BYTES: Final = 2
"""A msgpack array header is 1 byte up to 15 elements, 3 bytes up to 65535."""

_packb = msgpack.Packer(use_bin_type=True).pack


class SwimOp(IntEnum):
    """The frame op of each message kind, inside the reserved membership range."""

    PING = MEMBERSHIP_OPS.start
    ACK = MEMBERSHIP_OPS.start + 1
    PING_REQ = MEMBERSHIP_OPS.start + 2
    NACK = MEMBERSHIP_OPS.start + 3
    PUSH_PULL = MEMBERSHIP_OPS.start + 4
    GOSSIP = MEMBERSHIP_OPS.start + 5


_ALIVE, _SUSPECT, _DEAD = 0, 1, 2


# --- encoding ------------------------------------------------------------------------


def encode_packet(packet: Packet, trailer_bytes: int = 0) -> bytes:
    """The frame for `packet`, ending in `trailer_bytes` zero bytes for the transport."""
    op, body = _body(packet.message)
    header = {"b": body, "u": [_update_fields(u) for u in packet.updates]}
    try:
        return encode_frame(op, 0, 0, header, bytes(trailer_bytes))
    except WireUsageError as exc:
        raise SwimUsageError(f"membership packet cannot be encoded: {exc}") from None


def packet_size(packet: Packet) -> int:
    """Bytes of `encode_packet(packet)` without a trailer."""
    return len(encode_packet(packet))


def update_size(update: Update) -> int:
    """Bytes one update adds to a packet's update array."""
    return len(_packb(_update_fields(update)))


def member_size(member: Member) -> int:
    """Bytes one member record adds to a push-pull chunk."""
    return len(_packb(_member_fields(member)))


def _body(message: Message) -> tuple[int, list[Any]]:
    if isinstance(message, Ping):
        return SwimOp.PING, [message.seq, message.target, message.source, message.source_address]
    if isinstance(message, Ack):
        return SwimOp.ACK, [message.seq, message.source]
    if isinstance(message, PingReq):
        return SwimOp.PING_REQ, [
            message.seq,
            message.target,
            message.target_address,
            message.source,
            message.source_address,
        ]
    if isinstance(message, Nack):
        return SwimOp.NACK, [message.seq, message.source]
    if isinstance(message, PushPull):
        return SwimOp.PUSH_PULL, [
            message.source,
            message.source_address,
            message.reply,
            [_member_fields(m) for m in message.members],
        ]
    return SwimOp.GOSSIP, []


def _update_fields(update: Update) -> list[Any]:
    if isinstance(update, Alive):
        return [_ALIVE, update.node_id, update.incarnation, update.address, float(update.weight)]
    if isinstance(update, Suspect):
        return [_SUSPECT, update.node_id, update.incarnation, update.accuser]
    return [_DEAD, update.node_id, update.incarnation, update.accuser]


def _member_fields(member: Member) -> list[Any]:
    return [
        member.node_id,
        member.address,
        int(member.state),
        member.incarnation,
        float(member.weight),
    ]


# --- decoding ------------------------------------------------------------------------


def decode_packet(data: bytes | bytearray | memoryview, trailer_bytes: int = 0) -> Packet:
    """The packet in one datagram, whose last `trailer_bytes` bytes the transport owns.

    Raises `MalformedPacket` for anything that is not a valid membership packet.
    """
    try:
        frame = decode_frame(data, DATAGRAM_BYTES_MAX)
    except ProtocolError as exc:
        raise MalformedPacket(f"not a laminar frame: {exc.message}") from None
    if frame.op not in MEMBERSHIP_OPS:
        raise MalformedPacket(f"op {frame.op} is outside the membership range")
    try:
        op = SwimOp(frame.op)
    except ValueError:
        raise MalformedPacket(f"unknown membership op {frame.op}") from None
    if frame.flags or frame.correlation_id or frame.partition_id:
        raise MalformedPacket("membership frames carry no flags, correlation id or partition id")
    if len(frame.payload) != trailer_bytes:
        raise MalformedPacket(
            f"payload of {len(frame.payload)} bytes, expected a {trailer_bytes}-byte trailer"
        )
    header = frame.header
    if set(header) != {"b", "u"}:
        keys = sorted(map(str, header))
        raise MalformedPacket(f"header keys must be exactly b and u, got {keys}")
    body = _list(header["b"], "body")
    updates = _list(header["u"], "updates")
    return Packet(_message(op, body), tuple(_update(_list(u, "update")) for u in updates))


def _message(op: SwimOp, body: list[Any]) -> Message:
    if op is SwimOp.PING:
        _arity(body, 4, "ping")
        return Ping(_u32(body[0]), _name(body[1]), _name(body[2]), _name(body[3]))
    if op is SwimOp.ACK:
        _arity(body, 2, "ack")
        return Ack(_u32(body[0]), _name(body[1]))
    if op is SwimOp.PING_REQ:
        _arity(body, 5, "ping-req")
        return PingReq(
            _u32(body[0]), _name(body[1]), _name(body[2]), _name(body[3]), _name(body[4])
        )
    if op is SwimOp.NACK:
        _arity(body, 2, "nack")
        return Nack(_u32(body[0]), _name(body[1]))
    if op is SwimOp.PUSH_PULL:
        _arity(body, 4, "push-pull")
        if type(body[2]) is not bool:
            raise MalformedPacket("push-pull reply flag must be a bool")
        records = tuple(_member(_list(r, "member")) for r in _list(body[3], "members"))
        return PushPull(_name(body[0]), _name(body[1]), records, body[2])
    _arity(body, 0, "gossip")
    return Gossip()


def _update(fields: list[Any]) -> Update:
    if not fields or type(fields[0]) is not int:
        raise MalformedPacket("an update starts with its kind")
    kind = fields[0]
    if kind == _ALIVE:
        _arity(fields, 5, "alive")
        return Alive(_name(fields[1]), _u32(fields[2]), _name(fields[3]), _weight(fields[4]))
    if kind in (_SUSPECT, _DEAD):
        _arity(fields, 4, "suspect" if kind == _SUSPECT else "dead")
        node, incarnation, accuser = _name(fields[1]), _u32(fields[2]), _name(fields[3])
        if kind == _SUSPECT:
            return Suspect(node, incarnation, accuser)
        return Dead(node, incarnation, accuser)
    raise MalformedPacket(f"unknown update kind {kind}")


def _member(fields: list[Any]) -> Member:
    _arity(fields, 5, "member")
    state = fields[2]
    if type(state) is not int or state not in MemberState._value2member_map_:
        raise MalformedPacket(f"member state {state!r} is not a state")
    return Member(
        _name(fields[0]), _name(fields[1]), MemberState(state), _u32(fields[3]), _weight(fields[4])
    )


def _list(value: object, what: str) -> list[Any]:
    if type(value) is not list:
        raise MalformedPacket(f"{what} must be an array, got {type(value).__name__}")
    return value


def _arity(fields: list[Any], count: int, what: str) -> None:
    if len(fields) != count:
        raise MalformedPacket(f"{what} has {len(fields)} fields, expected {count}")


def _name(value: object) -> str:
    if type(value) is not str or not value or len(value.encode()) > NAME_BYTES_MAX:
        raise MalformedPacket(f"a node id or address must be 1-{NAME_BYTES_MAX} bytes of text")
    return value


def _u32(value: object) -> int:
    if type(value) is not int or not 0 <= value <= U32_MAX:
        raise MalformedPacket(f"{value!r} is not a u32")
    return value


def _weight(value: object) -> float:
    if type(value) is not float or not math.isfinite(value) or not 0 < value <= WEIGHT_MAX:
        raise MalformedPacket(f"weight {value!r} must be a finite number in (0, {WEIGHT_MAX:g}]")
    return value
