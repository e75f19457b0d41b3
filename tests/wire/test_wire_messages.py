"""Every message type round-trips through bytes, and bad fields are named."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar.wire import (
    NEED_DATA,
    AlterTopicRequest,
    AlterTopicResponse,
    CreateTopicRequest,
    CreateTopicResponse,
    DecommissionNodeRequest,
    DecommissionNodeResponse,
    DeleteTopicRequest,
    DeleteTopicResponse,
    ErrorCode,
    ErrorResponse,
    FetchedRecord,
    FetchRequest,
    FetchResponse,
    Flags,
    ForwardRequest,
    ForwardResponse,
    Frame,
    FrameDecoder,
    FrameTooLarge,
    InvalidMessage,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    Message,
    MetadataRequest,
    MetadataResponse,
    MetadataTailRequest,
    MetadataTailResponse,
    Op,
    Ping,
    Pong,
    ProduceRequest,
    ProduceResponse,
    ProtocolError,
    ShardInfo,
    TopicInfo,
    UnknownOp,
    WireUsageError,
    decode_frame,
    decode_record,
    decode_request,
    decode_response,
    encode_frame,
    encode_record,
    request_frame_limits,
)
from laminar.wire import writes as w
from laminar.wire.ops import RAFT_OPS
from tests.groups import frame_strategies as group_frames
from tests.security import frame_strategies as security_frames

u16 = st.integers(0, 2**16 - 1)
u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
names = st.text(max_size=30)
configs = st.dictionaries(
    st.text(max_size=10), st.integers(-(2**63), 2**64 - 1) | names, max_size=3
)
blobs = st.builds(
    encode_record,
    st.binary(max_size=100),
    st.none() | st.binary(max_size=10),
    st.none() | st.dictionaries(st.text(max_size=5), st.binary(max_size=5), max_size=2),
)
topics = st.builds(TopicInfo, names, u32, st.integers(0, 2**32), configs)
shards = st.builds(ShardInfo, u16, names, u16)
nodes = st.text(max_size=40).filter(lambda n: len(n.encode()) <= w.NODE_BYTES_MAX)
parts = st.builds(w.StagedPart, u64, u64, u32, u64, u32, u64, nodes)
parts_tuple = st.lists(parts, max_size=4).map(tuple)
states = st.sampled_from(sorted(w.WriteState.ALL))


def _partition_parts(cls: type[Any], *more: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """An internal per-partition request whose parts are all of its partition."""
    return st.builds(
        lambda pid, commit, ps, *rest: cls(
            pid, commit, tuple(p._replace(partition_id=pid) for p in ps), *rest
        ),
        u64,
        u64,
        parts_tuple,
        *more,
    )


REQUESTS: list[st.SearchStrategy[Any]] = [
    st.builds(ProduceRequest, u64, st.lists(blobs, max_size=10).map(tuple)),
    st.builds(FetchRequest, u64, u64, u32, u32, u32, st.booleans()),
    st.builds(ListOffsetsRequest, u64, st.none() | u64, st.booleans()),
    st.builds(MetadataRequest, st.booleans()),
    st.builds(DecommissionNodeRequest, names, st.booleans()),
    st.builds(CreateTopicRequest, names, st.integers(0, 2**32), configs),
    st.builds(DeleteTopicRequest, names),
    st.builds(ListTopicsRequest),
    st.builds(Ping, u64),
    st.builds(AlterTopicRequest, names, configs, st.lists(names, max_size=3).map(tuple)),
    st.builds(ForwardRequest, u64, u16, st.binary(max_size=100)),
    st.builds(w.StageRequest, u64, u64, u32, u64, u32, st.lists(blobs, max_size=5).map(tuple), u32),
    st.builds(w.CommitWriteRequest, u64, parts_tuple),
    st.builds(w.AbortWriteRequest, u64, st.booleans(), parts_tuple),
    st.builds(w.WriteStatusRequest, u64),
    _partition_parts(w.CheckStagedRequest),
    _partition_parts(w.PublishStagedRequest, st.integers(0, w.SLOTS_MAX - 1)),
    _partition_parts(w.DropStagedRequest),
    st.builds(
        w.AppendStagedRequest,
        u64,
        u64,
        st.integers(0, w.SLOTS_MAX - 1),
        st.integers(0, w.CHUNKS_MAX - 1),
        u32,
        st.none() | u64,
        st.lists(blobs, min_size=1, max_size=5).map(tuple),
    ),
    st.builds(MetadataTailRequest, u64, u16, u32),
    *group_frames.REQUESTS,
    *security_frames.REQUESTS,
]
RESPONSES: list[st.SearchStrategy[Any]] = [
    st.builds(ProduceResponse, u64, u64, u32, u64),
    st.builds(
        FetchResponse,
        u64,
        st.lists(st.builds(FetchedRecord, u64, u64, blobs), max_size=10).map(tuple),
        u64,
        u64,
        u64,
    ),
    st.builds(
        ListOffsetsResponse,
        u64,
        u64,
        u64,
        u64,
        st.none() | u64,
        st.none() | names,
        st.lists(names, max_size=3).map(tuple),
        st.lists(names, max_size=2).map(tuple),
    ),
    st.builds(
        MetadataResponse,
        names,
        names,
        u16,
        st.sampled_from(["ebpf", "cbpf", "userspace"]),
        st.lists(shards, max_size=4).map(tuple),
        st.lists(topics, max_size=4).map(tuple),
        st.none() | u16,
        st.just(()),
        st.lists(st.tuples(u64, names), max_size=4).map(tuple),
        st.none() | u32,
        st.lists(names, max_size=2).map(tuple),
    ),
    st.builds(CreateTopicResponse, topics),
    st.builds(DeleteTopicResponse, names, u32),
    st.builds(ListTopicsResponse, st.lists(topics, max_size=4).map(tuple)),
    st.builds(Pong, u64, names, u16, u16),
    st.builds(AlterTopicResponse, topics),
    st.builds(DecommissionNodeResponse, st.lists(names, max_size=3).map(tuple)),
    st.builds(ForwardResponse, u64, st.binary(max_size=100)),
    st.builds(w.StageResponse, u64, u32, u32, st.booleans(), nodes),
    st.builds(
        w.CommitWriteResponse,
        u64,
        st.booleans(),
        st.lists(st.builds(w.Published, u64, u64, u64), max_size=4).map(tuple),
    ),
    st.builds(w.AbortWriteResponse, u64, states),
    st.builds(w.WriteStateResponse, u64, states),
    st.builds(w.CheckStagedResponse, u64, u64, u64),
    st.builds(w.PublishStagedResponse, u64, u64, u64),
    st.builds(w.DropStagedResponse, u64, u64, u64),
    st.builds(w.AppendStagedResponse, u64, u64, st.booleans()),
    st.builds(
        MetadataTailResponse,
        st.just(0),
        st.lists(st.builds(FetchedRecord, u64, u64, blobs), max_size=3).map(tuple),
        u64,
        u64,
        u64,
    ),
    *group_frames.RESPONSES,
    *security_frames.RESPONSES,
    st.builds(ErrorResponse, st.integers(0, 255), st.sampled_from(ErrorCode), names, u64),
]


def through_the_decoder(data: bytes) -> Frame:
    decoder = FrameDecoder()
    decoder.feed(data)
    frame = decoder.next_frame()
    assert isinstance(frame, Frame)
    assert decoder.next_frame() is NEED_DATA
    return frame


@given(st.one_of(REQUESTS), u32)
def test_requests_round_trip(message: Message, correlation_id: int) -> None:
    frame = through_the_decoder(message.encode(correlation_id))
    assert frame.correlation_id == correlation_id
    assert not frame.is_response
    assert decode_request(frame) == message
    assert type(message).from_frame(message.to_frame(correlation_id)) == message
    assert b"".join(message.encode_buffers(correlation_id)) == message.encode(correlation_id)


@given(st.one_of(RESPONSES), u32)
def test_responses_round_trip(message: Message, correlation_id: int) -> None:
    frame = through_the_decoder(message.encode(correlation_id))
    assert frame.correlation_id == correlation_id and frame.is_response
    assert frame.is_error == isinstance(message, ErrorResponse)
    assert decode_response(frame) == message
    assert type(message).from_frame(message.to_frame(correlation_id)) == message


def test_every_op_has_a_request_and_a_response() -> None:
    assert len(REQUESTS) == len(Op)
    assert len(RESPONSES) == len(Op) + 1  # plus ErrorResponse


def test_partition_id_travels_in_the_prefix() -> None:
    pid = (3 << 32) | 4
    for message in (
        ProduceRequest(pid, ()),
        FetchRequest(pid, 0),
        ListOffsetsRequest(pid),
        Ping(pid),
        ProduceResponse(pid, 1, 1, 1),
        ErrorResponse(Op.FETCH, ErrorCode.NOT_OWNER, "no", pid),
    ):
        assert message.encode(1)[12:20] == pid.to_bytes(8, "big")
    assert MetadataRequest().encode(1)[12:20] == bytes(8)


def test_produce_from_values() -> None:
    req = ProduceRequest.from_values(
        5, [b"a", b"b"], keys=[b"k", None], headers=[None, {"h": b"v"}]
    )
    assert [decode_record(b) for b in req.blobs] == [(b"a", b"k", None), (b"b", None, {"h": b"v"})]
    assert ProduceRequest.from_values(5, [b"x"]).blobs == (b"\x00x",)
    with pytest.raises(WireUsageError):
        ProduceRequest.from_values(5, [b"a"], keys=[])
    with pytest.raises(WireUsageError):
        ProduceRequest.from_values(5, [b"a"], headers=[None, None])


def test_produce_payload_blobs_are_not_copied() -> None:
    blob = b"\x00" + b"v" * 100
    buffers = ProduceRequest(1, (blob, blob)).encode_buffers(1)
    assert buffers[2] is blob and buffers[3] is blob


# --- errors ------------------------------------------------------------------------


def frame_with(op: int, header: dict[str, Any], flags: int = 0, payload: bytes = b"") -> Frame:
    return decode_frame(encode_frame(op, 42, 7, header, payload, flags=flags))


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        (frame_with(Op.FETCH, {}), "'index' is missing"),
        (frame_with(Op.FETCH, {"index": -1}), "'index' must be an unsigned int"),
        (frame_with(Op.FETCH, {"index": "3"}), "'index' must be an unsigned int"),
        (
            frame_with(
                Op.FETCH, {"index": 0, "max_bytes": 2**32, "max_records": 1, "max_wait_ms": 0}
            ),
            "'max_bytes'",
        ),
        (
            frame_with(Op.CREATE_TOPIC, {"name": b"bytes", "partitions": 1}),
            "'name' must be a string",
        ),
        (frame_with(Op.CREATE_TOPIC, {"name": "t", "partitions": 1, "config": [1]}), "'config'"),
        (frame_with(Op.LIST_OFFSETS, {"timestamp_ms": 1.5}), "'timestamp_ms'"),
        (frame_with(Op.PRODUCE, {}, payload=b"\x00\x00\x00\x09"), "longer than its payload"),
        (frame_with(Op.PING, {}, flags=Flags.RESPONSE), "expected a request"),
    ],
)
def test_bad_requests_are_invalid_and_name_the_request(frame: Frame, match: str) -> None:
    with pytest.raises(InvalidMessage, match=match) as info:
        decode_request(frame)
    err = info.value
    assert err.code is ErrorCode.INVALID_REQUEST and not err.fatal
    assert (err.correlation_id, err.op, err.partition_id) == (42, frame.op, 7)
    reply = ErrorResponse.from_error(err)
    assert reply == ErrorResponse(frame.op, ErrorCode.INVALID_REQUEST, err.message, 7)


def test_a_payload_on_an_op_without_one_is_refused() -> None:
    frame = frame_with(
        Op.FETCH,
        {"index": 0, "max_bytes": 1, "max_records": 1, "max_wait_ms": 0},
        payload=b"junk",
    )
    with pytest.raises(InvalidMessage, match="carries no payload; this one has 4 bytes"):
        decode_request(frame)
    assert decode_request(frame._replace(payload=b"")) == FetchRequest(7, 0, 1, 1, 0)


def test_request_frame_limits_leave_room_for_a_header_only_without_a_payload() -> None:
    limits = request_frame_limits(8 << 20, 64 << 10)
    assert limits[Op.PRODUCE] == limits[Op.FORWARD] == 8 << 20
    assert limits[Op.FETCH] == limits[Op.PING] == limits[Op.METADATA_TAIL] == 24 + (64 << 10)
    assert limits[200] == 8 << 20  # unknown ops are answered UNKNOWN_OP, not closed
    decoder = FrameDecoder(8 << 20, frame_limits=limits)
    decoder.feed(encode_frame(Op.FETCH, 3, 9, {}, b"x" * (100 << 10))[:20])
    with pytest.raises(FrameTooLarge, match="for op 2, which carries no payload") as info:
        decoder.next_frame()
    assert info.value.correlation_id == 3 and info.value.fatal


@pytest.mark.parametrize("op", [0, 30, 31, 34, RAFT_OPS[0], 200, 255])
def test_unknown_ops(op: int) -> None:
    with pytest.raises(UnknownOp) as info:
        decode_request(frame_with(op, {}))
    assert info.value.code is ErrorCode.UNKNOWN_OP and not info.value.fatal
    assert info.value.op == op and info.value.correlation_id == 42
    with pytest.raises(UnknownOp):
        decode_response(frame_with(op, {}, flags=Flags.RESPONSE))


def test_bad_responses() -> None:
    with pytest.raises(InvalidMessage, match="expected a response"):
        decode_response(frame_with(Op.PING, {}))
    with pytest.raises(InvalidMessage, match="'topics'"):
        decode_response(frame_with(Op.LIST_TOPICS, {"topics": [1]}, flags=Flags.RESPONSE))
    with pytest.raises(InvalidMessage, match="'topic'"):
        decode_response(frame_with(Op.CREATE_TOPIC, {}, flags=Flags.RESPONSE))
    with pytest.raises(InvalidMessage, match="'message'"):
        decode_response(frame_with(Op.FETCH, {"code": 1}, flags=Flags.RESPONSE | Flags.ERROR))
    with pytest.raises(InvalidMessage, match="not a Pong"):
        Pong.from_frame(frame_with(Op.FETCH, {}, flags=Flags.RESPONSE))


def test_error_codes_from_a_newer_peer_read_as_internal() -> None:
    frame = frame_with(
        Op.FETCH, {"code": 4000, "message": "new"}, flags=Flags.RESPONSE | Flags.ERROR
    )
    assert decode_response(frame) == ErrorResponse(Op.FETCH, ErrorCode.INTERNAL, "new", 7)


def test_every_error_code_has_a_message() -> None:
    for code in ErrorCode:
        assert code.default_message
    assert ErrorCode.NOT_OWNER.retriable and not ErrorCode.UNKNOWN_TOPIC.retriable
    reply = ErrorResponse.for_code(Op.PRODUCE, ErrorCode.USE_TCP)
    assert reply.message == ErrorCode.USE_TCP.default_message


def test_protocol_error_defaults() -> None:
    err = ProtocolError()
    assert err.code is ErrorCode.MALFORMED_FRAME and err.fatal
    assert str(err) == ErrorCode.MALFORMED_FRAME.default_message
    assert ErrorResponse.from_error(err) == ErrorResponse(0, ErrorCode.MALFORMED_FRAME, str(err), 0)


@pytest.mark.parametrize(
    "leaders", [{}, [[1]], [[1, 2]], [["1", "n1"]], [[-1, "n1"]], [[2**64, "n1"]], "n1"]
)
def test_metadata_leaders_must_be_pairs_of_partition_and_node(leaders: object) -> None:
    frame = MetadataResponse("n", "h", 1, "userspace", (), (), None, (), ((5, "n1"),)).to_frame(1)
    frame.header["leaders"] = leaders
    with pytest.raises(InvalidMessage, match="leaders"):
        MetadataResponse.from_frame(frame)
