"""Framing and headers: requests kafka-python frames decode, our responses
parse in kafka-python, unsupported keys and versions get an answer, and the
advertised versions are one coherent Kafka 3.0."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from kafka.protocol.broker_version_data import (
    BROKER_API_VERSIONS,
    infer_broker_version_from_api_versions,
)

from laminar.kafka import codec
from laminar.kafka import messages as m
from laminar.kafka.errors import ErrorCode
from tests.kafka.oracle import SCHEMAS, kp_class, to_kp

UNSUPPORTED = ErrorCode.UNSUPPORTED_VERSION


def decoded_versions() -> list[tuple[int, int]]:
    return [(key, v) for key, (lo, hi) in sorted(codec.DECODED.items()) for v in range(lo, hi + 1)]


def kp_request_frame(key: int, version: int, correlation_id: int, client_id: str | None) -> bytes:
    """A request frame (size prefix dropped) as kafka-python writes it."""
    cls = m.REQUESTS[key]
    theirs = to_kp(cls(), SCHEMAS[cls.__name__].root, kp_class(cls.__name__), version)
    theirs.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(theirs.encode(header=True))


def kp_response(key: int, version: int, frame: bytes) -> Any:
    """kafka-python's reading of a whole response frame."""
    size = struct.unpack_from(">i", frame)[0]
    assert size == len(frame) - 4
    theirs = kp_class(m.RESPONSES[key].__name__)
    return theirs.decode(frame, version=version, header=True, framed=True)


@pytest.mark.parametrize(("key", "version"), decoded_versions())
def test_request_frames_of_kafka_python_decode(key: int, version: int) -> None:
    frame = kp_request_frame(key, version, 123456, "the-client")
    request = codec.decode_request(frame)
    assert (request.api_key, request.api_version) == (key, version)
    assert request.correlation_id == 123456
    assert request.client_id == "the-client"
    assert type(request.body) is m.REQUESTS[key]
    null_client = codec.decode_request(kp_request_frame(key, version, -5, None))
    assert null_client.client_id is None and null_client.correlation_id == -5


@pytest.mark.parametrize(("key", "version"), decoded_versions())
def test_responses_parse_in_kafka_python(key: int, version: int) -> None:
    request = codec.Request(key, version, 77, "c", m.REQUESTS[key]())
    frame = codec.encode_response(request, m.RESPONSES[key]())
    assert kp_response(key, version, frame).header.correlation_id == 77


def test_api_versions_response_header_is_always_v0() -> None:
    request = codec.Request(18, 3, 9, "c", m.ApiVersionsRequest())
    body = m.ApiVersionsResponse(api_keys=codec.advertised_versions())
    frame = codec.encode_response(request, body)
    # size, correlation id, then the body's error code: no tagged-fields byte.
    assert frame[4:8] == struct.pack(">i", 9)
    assert frame[8:10] == b"\x00\x00"
    assert kp_response(18, 3, frame).api_keys[0].api_key == 0


def test_a_response_of_another_api_is_refused() -> None:
    request = codec.Request(0, 9, 1, None, m.ProduceRequest())
    with pytest.raises(TypeError):
        codec.encode_response(request, m.FetchResponse())


def test_served_is_kafka_3_0_cut_to_the_json() -> None:
    kafka_3_0 = BROKER_API_VERSIONS[(3, 0)]
    assert codec.SERVED[0] == (3, 9)
    assert codec.API_KEYS["Produce"] == 0
    handshake = codec.API_KEYS["SaslHandshake"]
    assert codec.SERVED[handshake] == (1, 1)  # v0's unframed tokens are not served
    for key, (lo, hi) in codec.SERVED.items():
        json_lo, json_hi = m.REQUESTS[key].VALID_VERSIONS
        kafka_lo = 1 if key == handshake else kafka_3_0[key][0]
        assert (lo, hi) == (max(kafka_lo, json_lo), kafka_3_0[key][1])
        assert json_lo <= lo <= hi <= json_hi
        assert m.RESPONSES[key].VALID_VERSIONS == m.REQUESTS[key].VALID_VERSIONS
    unadvertised = {"AddPartitionsToTxn", "EndTxn"}
    assert not {codec.API_KEYS[name] for name in unadvertised} & codec.SERVED.keys()
    assert {codec.API_KEYS[name] for name in unadvertised} <= codec.DECODED.keys()


def test_kafka_python_infers_kafka_3_0_from_our_api_versions() -> None:
    request = codec.Request(18, 3, 1, "c", m.ApiVersionsRequest())
    body = m.ApiVersionsResponse(api_keys=codec.advertised_versions())
    answer = kp_response(18, 3, codec.encode_response(request, body))
    advertised = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert advertised == codec.SERVED
    assert infer_broker_version_from_api_versions(advertised) == (3, 0)


@pytest.mark.parametrize(
    ("key", "version"),
    [(0, 2), (0, 10), (1, 13), (3, 12), (18, 4), (18, 99), (24, 4), (4242, 0), (-1, 0)],
)
def test_unserved_key_or_version_raises_unsupported(key: int, version: int) -> None:
    frame = struct.pack(">hhih", key, version, 31, -1) + b"\x00" * 8
    with pytest.raises(codec.UnsupportedVersion) as caught:
        codec.decode_request(frame)
    assert (caught.value.api_key, caught.value.api_version) == (key, version)
    assert caught.value.correlation_id == 31


def test_unsupported_api_versions_answers_v0_with_the_served_list() -> None:
    answer = codec.unsupported_response(codec.UnsupportedVersion(18, 4, 1234))
    theirs = kp_response(18, 0, answer)  # what the client reads (KIP-511)
    assert theirs.header.correlation_id == 1234
    assert theirs.error_code == UNSUPPORTED
    assert {k.api_key: (k.min_version, k.max_version) for k in theirs.api_keys} == codec.SERVED


@pytest.mark.parametrize(
    ("key", "asked", "answered", "has_error_code"),
    [(1, 13, 12, True), (1, 3, 4, False), (0, 2, 3, False), (11, 10, 7, True), (22, 9, 4, True)],
)
def test_unsupported_version_answers_at_the_nearest_version(
    key: int, asked: int, answered: int, has_error_code: bool
) -> None:
    answer = codec.unsupported_response(codec.UnsupportedVersion(key, asked, 55))
    theirs = kp_response(key, answered, answer)
    assert theirs.header.correlation_id == 55
    if has_error_code:
        assert theirs.error_code == UNSUPPORTED


def test_unknown_key_answers_correlation_id_and_error() -> None:
    answer = codec.unsupported_response(codec.UnsupportedVersion(4242, 0, 8))
    assert answer == struct.pack(">iih", 6, 8, UNSUPPORTED)
