"""Malformed requests become MalformedRequest, never another exception, and
never a large allocation: truncations at every byte, trailing bytes, counts
and lengths past the end, bad UTF-8, over-long varints, random bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laminar.kafka import codec
from laminar.kafka import messages as m
from laminar.kafka.primitives import WireError

CORRELATION_ID = 4711


def frame(body: object, key: int, version: int, client_id: str | None = "client") -> bytes:
    """A request frame (no size prefix) written by our own encoder."""
    out = bytearray()
    flexible = m.REQUESTS[key].FLEXIBLE_VERSIONS
    header_version = 2 if flexible and flexible[0] <= version <= flexible[1] else 1
    header = m.RequestHeader(
        request_api_key=key,
        request_api_version=version,
        correlation_id=CORRELATION_ID,
        client_id=client_id,
    )
    m.encode(header, header_version, out)
    m.encode(body, version, out)
    return bytes(out)


def produce(name: str = "events") -> m.ProduceRequest:
    partition = m.ProduceRequest.TopicProduceData.PartitionProduceData(index=3, records=b"r" * 40)
    topic = m.ProduceRequest.TopicProduceData(name=name, partition_data=[partition])
    return m.ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[topic])


def real_frames() -> dict[str, bytes]:
    fetch_partition = m.FetchRequest.FetchTopic.FetchPartition(partition=1, fetch_offset=10)
    fetch = m.FetchRequest(
        topics=[m.FetchRequest.FetchTopic(topic="t", partitions=[fetch_partition])]
    )
    metadata = m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name="a")])
    protocol = m.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")
    join = m.JoinGroupRequest(group_id="g", protocol_type="consumer", protocols=[protocol])
    versions = m.ApiVersionsRequest(client_software_name="x", client_software_version="1")
    return {
        "produce v3": frame(produce(), 0, 3),
        "produce v9": frame(produce(), 0, 9),
        "fetch v12": frame(fetch, 1, 12),
        "metadata v11": frame(metadata, 3, 11),
        "join group v7": frame(join, 11, 7),
        "api versions v3": frame(versions, 18, 3),
    }


def malformed(data: bytes) -> codec.MalformedRequest:
    with pytest.raises(codec.MalformedRequest) as caught:
        codec.decode_request(data)
    return caught.value


def test_the_real_frames_decode() -> None:
    for data in real_frames().values():
        assert codec.decode_request(data).correlation_id == CORRELATION_ID


@pytest.mark.parametrize("name", sorted(real_frames()))
def test_every_truncation_is_malformed(name: str) -> None:
    data = real_frames()[name]
    for cut in range(len(data)):
        err = malformed(data[:cut])
        assert err.correlation_id == (CORRELATION_ID if cut >= 8 else None)


@pytest.mark.parametrize("name", sorted(real_frames()))
def test_trailing_bytes_are_malformed(name: str) -> None:
    assert "trailing" in str(malformed(real_frames()[name] + b"\x00"))


def test_a_huge_array_count_is_refused_before_allocating() -> None:
    # Produce v3 ends in transactional_id (null), acks, timeout and the topic count.
    head = frame(m.ProduceRequest(), 0, 3)[:-12]
    assert "count past the end" in str(
        malformed(head + struct.pack(">hhii", -1, -1, 1000, 2**31 - 1))
    )
    # Flexible (v9): a compact count of 2**31 - 1, a 5-byte varint, then the tags byte.
    head = frame(m.ProduceRequest(), 0, 9)[:-2]
    assert "count past the end" in str(malformed(head + b"\xff\xff\xff\xff\x07\x00"))
    # An array of int32: one topic whose partition count is 2**31 - 1.
    assignment = struct.pack(">ih1si", 1, 1, b"t", 2**31 - 1) + b"\x00" * 64
    with pytest.raises(WireError, match="count past the end"):
        m.decode(m.ConsumerProtocolAssignment, 0, memoryview(assignment))


def test_a_string_past_the_end_is_malformed() -> None:
    data = frame(produce("abcdef"), 0, 3)
    at = data.index(b"\x00\x06abcdef")
    assert "past the end" in str(malformed(data[:at] + b"\x7f\xff" + data[at + 2 :]))


def test_a_negative_length_where_not_nullable_is_malformed() -> None:
    data = frame(produce("abcdef"), 0, 3)
    at = data.index(b"\x00\x06abcdef")
    assert "negative length" in str(malformed(data[:at] + b"\xff\xfe" + data[at + 2 :]))


def test_bad_utf8_is_malformed() -> None:
    data = frame(produce("abcdef"), 0, 9, client_id="cccc")
    assert "utf-8" in str(malformed(data.replace(b"abcdef", b"ab\xff\xfeef"))).lower()
    assert "utf-8" in str(malformed(data.replace(b"cccc", b"c\xc3\x28c"))).lower()


def test_an_over_long_varint_is_malformed() -> None:
    head = frame(m.ProduceRequest(), 0, 9)[:-2]
    assert "varint" in str(malformed(head + b"\x81\x80\x80\x80\x80\x80\x01"))


@given(key=st.sampled_from(sorted(codec.SERVED)), tail=st.binary(max_size=64))
def test_random_bodies_never_raise_anything_else(key: int, tail: bytes) -> None:
    version = codec.SERVED[key][1]
    header = struct.pack(">hhih", key, version, CORRELATION_ID, 1) + b"c"
    try:
        codec.decode_request(header + tail)
    except codec.MalformedRequest as err:
        assert err.correlation_id == CORRELATION_ID


@given(data=st.data())
def test_flipped_bytes_never_raise_anything_else(data: st.DataObject) -> None:
    frames = real_frames()
    original = frames[data.draw(st.sampled_from(sorted(frames)))]
    at = data.draw(st.integers(8, len(original) - 1))
    byte = data.draw(st.integers(0, 255))
    try:
        codec.decode_request(original[:at] + bytes([byte]) + original[at + 1 :])
    except codec.MalformedRequest as err:
        assert err.correlation_id == CORRELATION_ID
