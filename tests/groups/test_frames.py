"""The group ops' frames refuse a hostile header with `InvalidMessage`, never
another exception (their round trips are in tests/wire/test_wire_messages.py;
the answer to a leave, whose epochs random round trips rarely draw, here)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar.groups import frames as frames  # registers the group ops
from laminar.groups.errors import GroupError
from laminar.groups.messages import LEAVE, LEAVE_STATIC, HeartbeatAnswer
from laminar.wire import Flags, Op, decode_request, decode_response
from laminar.wire.codec import Frame
from laminar.wire.errors import InvalidMessage

GROUP_OPS = [op for op in Op if op.name.startswith("GROUP_") or op is Op.FIND_COORDINATOR]
hostile = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.text(max_size=5)
    | st.binary(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
keys = st.sampled_from(
    [
        "group",
        "member_id",
        "epoch",
        "revision",
        "topics",
        "owned",
        "session_ms",
        "positions",
        "partitions",
        "error",
        "results",
        "assignment",
        "interval_ms",
        "members",
        "topic",
        "partition",
        "assignor",
        "instance_id",
    ]
)


@settings(max_examples=200)
@given(st.sampled_from(GROUP_OPS), st.booleans(), st.dictionaries(keys, hostile, max_size=8))
def test_a_hostile_header_is_an_invalid_message(
    op: Op, response: bool, header: dict[str, Any]
) -> None:
    frame = Frame(op, Flags.RESPONSE if response else 0, 1, 5, header, b"")
    with contextlib.suppress(InvalidMessage):
        (decode_response if response else decode_request)(frame)


def test_a_commit_names_each_position_as_topic_partition_index() -> None:
    frame = Frame(
        Op.GROUP_COMMIT,
        0,
        1,
        5,
        {"group": "g", "member_id": "m", "epoch": 1, "positions": [["t", 0]]},
        b"",
    )
    with pytest.raises(InvalidMessage, match="3 items"):
        decode_request(frame)


@pytest.mark.parametrize("epoch", [LEAVE, LEAVE_STATIC])
def test_the_answer_to_a_leave_round_trips(epoch: int) -> None:
    """It echoes the leave's epoch (below 0): a decoder that wanted 0 and up
    turned every Kafka LeaveGroup into INVALID_REQUEST."""
    answer = HeartbeatAnswer(GroupError.NONE, 0, "m1", epoch, 3, frozenset(), 0.0)
    message = frames.HeartbeatAnswerFrame(7, answer)
    assert decode_response(message.to_frame(5)) == message
