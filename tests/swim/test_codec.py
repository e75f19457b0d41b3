"""The membership codec: exact sizes, round trips, and no malformed input gets through."""

from __future__ import annotations

import contextlib

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar.swim import (
    Ack,
    Alive,
    Dead,
    Gossip,
    MalformedPacket,
    Member,
    MemberState,
    Nack,
    Packet,
    Ping,
    PingReq,
    PushPull,
    Suspect,
)
from laminar.swim.codec import (
    ARRAY_GROWTH_BYTES,
    SwimOp,
    decode_packet,
    encode_packet,
    member_size,
    packet_size,
    update_size,
)
from laminar.wire.codec import encode_frame
from laminar.wire.ops import MEMBERSHIP_OPS

UPDATES = (
    Alive("n1", 3, "10.0.0.1:7946", 2.5),
    Suspect("n2", 0, "n1"),
    Dead("n3", 7, "n3"),
)
MESSAGES = (
    Ping(1, "n2", "n1", "10.0.0.1:7946"),
    Ack(0xFFFF_FFFF, "n2"),
    PingReq(5, "n3", "10.0.0.3:7946", "n1", "10.0.0.1:7946"),
    Nack(5, "n2"),
    PushPull("n1", "10.0.0.1:7946", (Member("n1", "a:1", MemberState.LEFT, 2, 1.0),), True),
    Gossip(),
)


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips_in_the_membership_op_range(message) -> None:
    packet = Packet(message, UPDATES)
    data = encode_packet(packet, trailer_bytes=32)
    assert data[6] in MEMBERSHIP_OPS
    assert decode_packet(data, trailer_bytes=32) == packet


def test_sizes_add_up_exactly() -> None:
    base = Packet(Ping(1, "n2", "n1", "a:1"))
    updates = tuple(Suspect(f"n{i}", i, "n1") for i in range(20))
    expected = packet_size(base) + sum(update_size(u) for u in updates) + ARRAY_GROWTH_BYTES
    assert packet_size(Packet(base.message, updates)) == expected
    few = updates[:15]
    assert packet_size(Packet(base.message, few)) == packet_size(base) + sum(map(update_size, few))
    member = Member("n1", "a:1", MemberState.ALIVE, 1, 1.0)
    pushed = Packet(PushPull("n1", "a:1", (member,), False))
    empty = Packet(PushPull("n1", "a:1", (), False))
    assert packet_size(pushed) == packet_size(empty) + member_size(member)


def _frame(op: int, header: dict, payload: bytes = b"") -> bytes:
    return encode_frame(op, 0, 0, header, payload)


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        (b"\x00\x01", "not a laminar frame"),
        (_frame(1, {"b": [], "u": []}), "outside the membership range"),
        (_frame(127, {"b": [], "u": []}), "unknown membership op"),
        (_frame(SwimOp.GOSSIP, {"b": []}), "exactly b and u"),
        (_frame(SwimOp.GOSSIP, {"b": [], "u": [], "x": 1}), "exactly b and u"),
        (_frame(SwimOp.GOSSIP, {"b": [], "u": {}}), "must be an array"),
        (_frame(SwimOp.ACK, {"b": [1], "u": []}), "ack has 1 fields"),
        (_frame(SwimOp.ACK, {"b": [-1, "n"], "u": []}), "not a u32"),
        (_frame(SwimOp.ACK, {"b": [2**32, "n"], "u": []}), "not a u32"),
        (_frame(SwimOp.ACK, {"b": [True, "n"], "u": []}), "not a u32"),
        (_frame(SwimOp.ACK, {"b": [1, ""], "u": []}), "1-255 bytes"),
        (_frame(SwimOp.ACK, {"b": [1, "x" * 256], "u": []}), "1-255 bytes"),
        (_frame(SwimOp.ACK, {"b": [1, b"n"], "u": []}), "1-255 bytes"),
        (_frame(SwimOp.GOSSIP, {"b": [], "u": [[0, "n", 1, "a", float("nan")]]}), "weight"),
        (_frame(SwimOp.GOSSIP, {"b": [], "u": [[0, "n", 1, "a", 0.0]]}), "weight"),
        (_frame(SwimOp.GOSSIP, {"b": [], "u": [[0, "n", 1, "a", 1]]}), "weight"),
        (_frame(SwimOp.GOSSIP, {"b": [], "u": [[9, "n", 1, "a"]]}), "unknown update kind"),
        (_frame(SwimOp.GOSSIP, {"b": [], "u": [[]]}), "starts with its kind"),
        (_frame(SwimOp.PUSH_PULL, {"b": ["n", "a", 1, []], "u": []}), "reply flag"),
        (
            _frame(SwimOp.PUSH_PULL, {"b": ["n", "a", True, [["n", "a", 9, 0, 1.0]]], "u": []}),
            "not a state",
        ),
        (_frame(SwimOp.GOSSIP, {"b": [], "u": []}, b"x"), "trailer"),
        (encode_frame(SwimOp.GOSSIP, 5, 0, {"b": [], "u": []}), "no flags, correlation"),
    ],
)
def test_malformed_datagrams_are_refused_with_a_reason(data: bytes, complaint: str) -> None:
    with pytest.raises(MalformedPacket, match=complaint):
        decode_packet(data)


@given(st.binary(max_size=200))
def test_random_bytes_never_raise_anything_but_malformed(data: bytes) -> None:
    with contextlib.suppress(MalformedPacket):
        decode_packet(data)


@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**64 - 1)
        | st.floats()
        | st.text(max_size=4),
        lambda children: st.lists(children, max_size=5),
        max_leaves=12,
    ),
    st.sampled_from(list(SwimOp)),
)
def test_random_headers_never_raise_anything_but_malformed(body, op) -> None:
    for header in ({"b": body, "u": []}, {"b": [], "u": [body]}):
        with contextlib.suppress(MalformedPacket):
            decode_packet(_frame(op, header))


def test_msgpack_of_the_header_is_what_the_docstring_says() -> None:
    data = encode_packet(Packet(Ack(9, "n2"), (Suspect("n3", 1, "n2"),)))
    header = msgpack.unpackb(data[24:], strict_map_key=False)
    assert header == {"b": [9, "n2"], "u": [[1, "n3", 1, "n2"]]}
