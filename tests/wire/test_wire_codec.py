"""The frame codec: layout, incremental decoding, and every protocol error."""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar.placement import pid_bytes
from laminar.wire import (
    MAGIC,
    MIN_FRAME_BYTES,
    NEED_DATA,
    REQUEST_HEADER_LIMITS,
    VERSION,
    BadMagic,
    Frame,
    FrameDecoder,
    FrameTooLarge,
    HeaderLimits,
    MalformedFrame,
    ProtocolError,
    ReceiveBufferFull,
    UnsupportedVersion,
    WireUsageError,
    decode_frame,
    encode_frame,
    encode_frame_buffers,
)
from laminar.wire.errors import ErrorCode

header_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
frames = st.builds(
    Frame,
    op=st.integers(0, 255),
    flags=st.integers(0, 255),
    correlation_id=st.integers(0, 2**32 - 1),
    partition_id=st.integers(0, 2**64 - 1),
    header=st.dictionaries(st.text(max_size=10), header_values, max_size=5),
    payload=st.binary(max_size=300),
)


def raw_frame(
    *,
    magic: int = MAGIC,
    version: int = VERSION,
    header: bytes = b"\x80",
    payload: bytes = b"",
    header_len: int | None = None,
    frame_len: int | None = None,
    correlation_id: int = 9,
) -> bytes:
    """A frame built by hand, so that every field can be made wrong."""
    hl = len(header) if header_len is None else header_len
    body = struct.pack(">BBBBIQI", magic, version, 1, 0, correlation_id, 77, hl) + header + payload
    fl = len(body) if frame_len is None else frame_len
    return struct.pack(">I", fl) + body


def decode_all(decoder: FrameDecoder) -> list[Frame]:
    out = []
    while (frame := decoder.next_frame()) is not NEED_DATA:
        assert isinstance(frame, Frame)
        out.append(frame)
    return out


# --- layout ----------------------------------------------------------------------


def test_prefix_layout_is_big_endian_at_fixed_offsets() -> None:
    data = encode_frame(8, 0x01020304, (5 << 32) | 6, {"k": 1}, b"PAY", flags=1)
    frame_len, magic, version, op, flags, corr = struct.unpack_from(">IBBBBI", data)
    assert (magic, version, op, flags, corr) == (0xA7, 1, 8, 1, 0x01020304)
    assert frame_len == len(data) - 4
    assert data[12:20] == pid_bytes((5 << 32) | 6)
    (header_len,) = struct.unpack_from(">I", data, 20)
    assert msgpack.unpackb(data[24 : 24 + header_len]) == {"k": 1}
    assert data[24 + header_len :] == b"PAY"


def test_smallest_frame() -> None:
    data = encode_frame(8, 0, 0, {})
    assert len(data) == MIN_FRAME_BYTES == 25
    assert decode_frame(data) == Frame(8, 0, 0, 0, {}, b"")


@given(frames)
def test_round_trip(frame: Frame) -> None:
    data = frame.encode()
    assert decode_frame(data) == frame
    decoder = FrameDecoder()
    decoder.feed(data)
    assert decode_all(decoder) == [frame]
    assert decoder.buffered_bytes == 0


@given(frames, st.lists(st.binary(max_size=50), max_size=4))
def test_buffers_join_to_the_same_bytes(frame: Frame, chunks: list[bytes]) -> None:
    payload = b"".join(chunks)
    buffers = encode_frame_buffers(
        frame.op, frame.correlation_id, frame.partition_id, frame.header, chunks, flags=frame.flags
    )
    joined = encode_frame(
        frame.op, frame.correlation_id, frame.partition_id, frame.header, payload, flags=frame.flags
    )
    assert b"".join(buffers) == joined
    assert all(a is b for a, b in zip(buffers[1:], chunks, strict=True))  # not copied


# --- incremental decoding -----------------------------------------------------------


@given(st.lists(frames, min_size=1, max_size=5))
def test_byte_by_byte(frame_list: list[Frame]) -> None:
    data = b"".join(f.encode() for f in frame_list)
    decoder = FrameDecoder()
    got: list[Frame] = []
    for i in range(len(data)):
        decoder.feed(data[i : i + 1])
        got += decode_all(decoder)
    assert got == frame_list


@given(st.lists(frames, min_size=1, max_size=6), st.data())
def test_random_chunking(frame_list: list[Frame], data: st.DataObject) -> None:
    stream = b"".join(f.encode() for f in frame_list)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = FrameDecoder()
    got: list[Frame] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        decoder.feed(stream[start:end])
        got += decode_all(decoder)
    assert got == frame_list


def test_pipelined_frames_in_one_buffer() -> None:
    sent = [Frame(op, 0, i, i * 3, {"i": i}, bytes([i]) * i) for i, op in enumerate(range(1, 40))]
    decoder = FrameDecoder()
    decoder.feed(b"".join(f.encode() for f in sent) + sent[0].encode()[:10])
    assert decode_all(decoder) == sent
    assert decoder.buffered_bytes == 10  # the start of the next frame waits


def test_memoryview_and_bytearray_input() -> None:
    data = encode_frame(2, 1, 2, {"a": b"b"}, b"xyz")
    decoder = FrameDecoder()
    decoder.feed(memoryview(data)[:7])
    decoder.feed(bytearray(data[7:]))
    (frame,) = decode_all(decoder)
    assert type(frame.payload) is bytes and frame.payload == b"xyz"


# --- bounds -------------------------------------------------------------------------


def test_oversized_frame_is_rejected_from_its_prefix() -> None:
    decoder = FrameDecoder(max_frame_bytes=1000)
    big = encode_frame(1, 5, 6, {}, b"x" * 2000)
    decoder.feed(big[:20])  # the prefix alone decides
    with pytest.raises(FrameTooLarge) as info:
        decoder.next_frame()
    err = info.value
    assert (err.code, err.fatal, err.correlation_id, err.op, err.partition_id) == (
        ErrorCode.FRAME_TOO_LARGE,
        True,
        5,
        1,
        6,
    )
    assert "2025 bytes exceeds the limit of 1000" in str(err)


def test_frame_at_the_limit_is_accepted() -> None:
    data = encode_frame(1, 0, 0, {}, b"x" * 100)
    decoder = FrameDecoder(max_frame_bytes=len(data))
    decoder.feed(data)
    assert len(decode_all(decoder)) == 1


def test_receive_buffer_is_bounded_and_full_feed_takes_nothing() -> None:
    data = encode_frame(1, 0, 0, {}, b"x" * 75)  # 100 bytes
    decoder = FrameDecoder(max_frame_bytes=100, max_buffer_bytes=250)
    decoder.feed(data + data)
    assert decoder.room == 50
    with pytest.raises(ReceiveBufferFull):
        decoder.feed(data)
    assert decoder.buffered_bytes == 200
    assert len(decode_all(decoder)) == 2
    decoder.feed(data)  # room again once frames are taken
    assert len(decode_all(decoder)) == 1


def test_decoder_arguments_are_checked() -> None:
    with pytest.raises(WireUsageError):
        FrameDecoder(max_frame_bytes=10)
    with pytest.raises(WireUsageError):
        FrameDecoder(max_frame_bytes=1000, max_buffer_bytes=999)


# --- protocol errors ------------------------------------------------------------------

BAD_STREAMS: list[tuple[str, bytes, type[ProtocolError], ErrorCode]] = [
    ("bad magic", raw_frame(magic=0x47), BadMagic, ErrorCode.MALFORMED_FRAME),
    ("http", b"GET / HTTP/1.1\r\n\r\n", BadMagic, ErrorCode.MALFORMED_FRAME),
    ("wrong version", raw_frame(version=2), UnsupportedVersion, ErrorCode.UNSUPPORTED_VERSION),
    ("frame_len below minimum", raw_frame(frame_len=20), MalformedFrame, ErrorCode.MALFORMED_FRAME),
    ("header_len zero", raw_frame(header_len=0), MalformedFrame, ErrorCode.MALFORMED_FRAME),
    (
        "header runs past frame",
        raw_frame(header=b"\x81\xa1a\x01", header_len=50),
        MalformedFrame,
        ErrorCode.MALFORMED_FRAME,
    ),
    (
        "truncated msgpack",
        raw_frame(header=b"\x82\xa1a\x01"),
        MalformedFrame,
        ErrorCode.MALFORMED_FRAME,
    ),
    ("invalid msgpack byte", raw_frame(header=b"\xc1"), MalformedFrame, ErrorCode.MALFORMED_FRAME),
    (
        "header is not a map",
        raw_frame(header=msgpack.packb([1, 2])),
        MalformedFrame,
        ErrorCode.MALFORMED_FRAME,
    ),
    (
        "trailing bytes inside header",
        raw_frame(header=b"\x80\x80"),
        MalformedFrame,
        ErrorCode.MALFORMED_FRAME,
    ),
    (
        "invalid utf-8 key",
        raw_frame(header=b"\x81\xa2\xff\xfe\x01"),
        MalformedFrame,
        ErrorCode.MALFORMED_FRAME,
    ),
]


@pytest.mark.parametrize(
    ("name", "data", "exc", "code"), BAD_STREAMS, ids=[b[0] for b in BAD_STREAMS]
)
def test_protocol_errors(name: str, data: bytes, exc: type[ProtocolError], code: ErrorCode) -> None:
    decoder = FrameDecoder()
    decoder.feed(data)
    with pytest.raises(exc) as info:
        decoder.next_frame()
    assert info.value.code is code and info.value.fatal
    # The decoder stays failed: the stream is out of step.
    with pytest.raises(exc):
        decoder.next_frame()
    with pytest.raises(exc):
        decoder.feed(encode_frame(1, 0, 0, {}))
    assert decoder.error is info.value
    # A datagram with the same bytes fails the same way.
    with pytest.raises(exc):
        decode_frame(data)


def test_errors_after_the_prefix_name_the_request() -> None:
    decoder = FrameDecoder()
    decoder.feed(raw_frame(header=b"\xc1", correlation_id=1234))
    with pytest.raises(MalformedFrame) as info:
        decoder.next_frame()
    assert (info.value.correlation_id, info.value.op, info.value.partition_id) == (1234, 1, 77)


def test_bad_magic_is_seen_from_five_bytes() -> None:
    decoder = FrameDecoder()
    decoder.feed(raw_frame(magic=0)[:5])
    with pytest.raises(BadMagic):
        decoder.next_frame()


def test_bad_version_is_seen_from_six_bytes() -> None:
    decoder = FrameDecoder()
    decoder.feed(raw_frame(version=9)[:6])
    with pytest.raises(UnsupportedVersion, match="version 9"):
        decoder.next_frame()


def test_incomplete_frames_wait() -> None:
    data = raw_frame(payload=b"abc")
    for cut in range(len(data)):
        decoder = FrameDecoder()
        decoder.feed(data[:cut])
        assert decoder.next_frame() is NEED_DATA


@pytest.mark.parametrize(
    "data",
    [b"", raw_frame()[:19], raw_frame()[:-1], raw_frame() + b"\x00", raw_frame(frame_len=100)],
    ids=["empty", "short", "truncated", "trailing", "frame_len too long"],
)
def test_datagram_must_be_exactly_one_frame(data: bytes) -> None:
    with pytest.raises(MalformedFrame):
        decode_frame(data)


# --- local misuse -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "header"),
    [
        ((256, 0, 0), {}),
        ((1, 2**32, 0), {}),
        ((1, 0, 2**64), {}),
        ((1, -1, 0), {}),
        ((1, 0, 0), {"x": object()}),
        ((1, 0, 0), {"x": 2**64}),
    ],
)
def test_encoding_errors_are_usage_errors(
    args: tuple[int, int, int], header: dict[str, Any]
) -> None:
    with pytest.raises(WireUsageError):
        encode_frame(*args, header)


def test_header_must_be_a_mapping() -> None:
    with pytest.raises(WireUsageError, match="mapping"):
        encode_frame(1, 0, 0, [1, 2])  # type: ignore[arg-type]


# --- header limits --------------------------------------------------------------------


def limited(data: bytes) -> Frame:
    decoder = FrameDecoder(16 << 20, header_limits=REQUEST_HEADER_LIMITS)
    decoder.feed(data)
    frame = decoder.next_frame()
    assert isinstance(frame, Frame)
    return frame


def test_an_amplifying_header_is_refused_under_request_limits() -> None:
    # 64 KiB of empty arrays in one array: 65k Python lists from 64 KiB of bytes.
    junk = b"\x81\xa1a\xdc\xff\xff" + b"\x90" * 0xFFFF
    data = raw_frame(header=junk[: 64 << 10])
    with pytest.raises(MalformedFrame, match="exceeds max_array_len"):
        limited(data)
    # The same header a trusting side (a client reading its node) still decodes.
    assert len(decode_frame(raw_frame(header=junk)).header["a"]) == 0xFFFF


def test_a_header_over_the_cap_is_refused_before_it_is_decoded() -> None:
    header = msgpack.packb({"name": "x" * (70 << 10)})
    with pytest.raises(FrameTooLarge, match="header of 71") as info:
        limited(raw_frame(header=header))
    assert info.value.fatal and info.value.correlation_id == 9


def test_containers_may_nest_one_level_below_the_header() -> None:
    pad = "p" * 300  # past SMALL_HEADER_BYTES, so the checks apply
    ok = {"name": pad, "config": {"retention.ms": 5}, "remove": ["segment.ms"]}
    assert limited(raw_frame(header=msgpack.packb(ok))).header == ok
    for deep in ({"name": pad, "a": [[1]]}, {"name": pad, "a": {"b": {}}}):
        with pytest.raises(MalformedFrame, match="nest more than 1 deep"):
            limited(raw_frame(header=msgpack.packb(deep)))
    # A short header cannot amplify, and skips the checks (one comparison).
    assert limited(raw_frame(header=msgpack.packb({"a": [[1]]}))).header == {"a": [[1]]}


def test_datagrams_take_header_limits_too() -> None:
    data = raw_frame(header=msgpack.packb({"a": [list(range(70))], "p": "p" * 300}))
    assert decode_frame(data).header["a"][0] == list(range(70))
    with pytest.raises(MalformedFrame, match="max_array_len"):
        decode_frame(data, header_limits=REQUEST_HEADER_LIMITS)


def test_header_limits_are_checked() -> None:
    with pytest.raises(WireUsageError):
        HeaderLimits(max_header_bytes=0, max_items=1, max_depth=0)
    with pytest.raises(WireUsageError):
        FrameDecoder(frame_limits=[100])
