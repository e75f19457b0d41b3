"""Kafka request framing and headers, sans I/O.

A Kafka connection carries frames: an int32 size, then a request (header,
then body) or a response (header, then body). This module turns one request
frame (without its size) into a `Request` and a response body into a whole
response frame (with its size); the listener owns the socket and the size
prefix of requests.

Facts it relies on:
- Request header v1 (api key, version, correlation id, nullable int16 client
  id) for non-flexible request versions, v2 (the same plus tagged fields;
  client id stays a non-compact string) for flexible ones. Response header v0
  (correlation id) or v1 (plus tagged fields) likewise, except ApiVersions,
  whose response header is always v0 so a client can read it before it knows
  what we serve (KIP-511).
- A request at a version we do not serve still has a readable api key,
  version and correlation id in its first 8 bytes: that is enough to answer.
- Bodies are the generated `messages`; `records` fields come back as views
  into the frame (no copy): the caller must not reuse or resize the frame's
  buffer while the request is in use.
"""

from __future__ import annotations

from dataclasses import dataclass
from struct import Struct
from typing import Any

from laminar.kafka import messages as m
from laminar.kafka.errors import ErrorCode
from laminar.kafka.primitives import WireError

API_KEYS: dict[str, int] = m.API_KEYS
"""Kafka's api key per API name (`API_KEYS["Produce"] == 0`), for every
vendored message, served or not."""

# Apache Kafka 3.0's ApiVersions answer for the APIs of the Kafka door (from
# kafka-python's BROKER_API_VERSIONS[(3, 0)]); advertised after intersection
# with the versions the vendored JSON still defines (Kafka 4 dropped old ones).
_KAFKA_3_0_ADVERTISED: dict[str, tuple[int, int]] = {
    "Produce": (0, 9),
    "Fetch": (0, 12),
    "ListOffsets": (0, 7),
    "Metadata": (0, 11),
    "OffsetCommit": (0, 8),
    "OffsetFetch": (0, 8),
    "FindCoordinator": (0, 4),
    "JoinGroup": (0, 7),
    "Heartbeat": (0, 4),
    "LeaveGroup": (0, 4),
    "SyncGroup": (0, 5),
    "DescribeGroups": (0, 5),
    "ListGroups": (0, 4),
    "ApiVersions": (0, 3),
    "CreateTopics": (0, 7),
    "DeleteTopics": (0, 6),
    "InitProducerId": (0, 4),
    "DescribeConfigs": (0, 4),
    "DescribeCluster": (0, 0),
    "SaslHandshake": (1, 1),  # v0's unframed tokens are not served (`laminar.kafka.sasl`)
    "SaslAuthenticate": (0, 2),
    "DescribeAcls": (0, 2),
    "CreateAcls": (0, 2),
    "DeleteAcls": (0, 2),
    "DescribeUserScramCredentials": (0, 0),
    "AlterUserScramCredentials": (0, 0),
}
# Decoded so that handlers can answer them with their documented error, but
# not advertised: transactions are out of scope.
_KAFKA_3_0_UNADVERTISED: dict[str, tuple[int, int]] = {
    "AddPartitionsToTxn": (0, 3),
    "EndTxn": (0, 3),
}


def _with_json(table: dict[str, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """Kafka 3.0's ranges cut to the versions the vendored JSON defines."""
    out = {}
    for name, (lo, hi) in table.items():
        key = API_KEYS[name]
        json_lo, json_hi = m.REQUESTS[key].VALID_VERSIONS
        out[key] = (max(lo, json_lo), min(hi, json_hi))
    return out


SERVED: dict[int, tuple[int, int]] = _with_json(_KAFKA_3_0_ADVERTISED)
"""The (min, max) version advertised per api key: Apache Kafka 3.0's table,
cut to the vendored JSON (Produce 3-9, Fetch 4-12, ...)."""

DECODED: dict[int, tuple[int, int]] = SERVED | _with_json(_KAFKA_3_0_UNADVERTISED)
"""What `decode_request` accepts: SERVED plus the unadvertised APIs the
handlers answer with an error (AddPartitionsToTxn, EndTxn)."""

_API_VERSIONS_KEY = API_KEYS["ApiVersions"]
_EXTRA_EMPTY_TAGS: frozenset[int] = frozenset({API_KEYS["AlterUserScramCredentials"]})
"""Requests whose body may end with one more empty tagged-field section than
the schema has: librdkafka (confluent-kafka 2.x) writes AlterUserScramCredentials
so, and Kafka, which ignores bytes after a request's body, accepts it."""
_REQUEST_HEAD = Struct(">hhi")  # api key, api version, correlation id
_INT32 = Struct(">i")
_UNKNOWN_KEY_ANSWER = Struct(">iih")  # size, correlation id, error code


@dataclass(slots=True)
class Request:
    """One decoded Kafka request: its header fields and its body, an
    instance of the generated request class of `api_key` (`messages.REQUESTS`)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: object


class UnsupportedVersion(Exception):
    """The header decoded, but this api key or version is not served: answer
    with `unsupported_response`, then carry on with the connection."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"api key {api_key} version {api_version} is not served")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class MalformedRequest(Exception):
    """The bytes of a request do not parse (a remote protocol violation);
    `correlation_id` is None when not even the header's first 8 bytes are there."""

    def __init__(self, message: str, correlation_id: int | None) -> None:
        super().__init__(message)
        self.correlation_id = correlation_id


def _flexible(cls: type[Any], version: int) -> bool:
    flex: tuple[int, int] | None = cls.FLEXIBLE_VERSIONS
    return flex is not None and flex[0] <= version <= flex[1]


def decode_request(frame: bytes | memoryview) -> Request:
    """Decode one request frame (without its 4-byte size prefix).

    Raises UnsupportedVersion for an api key or version outside `DECODED`,
    MalformedRequest for bytes that do not parse, trailing bytes included."""
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    if len(buf) < _REQUEST_HEAD.size:
        raise MalformedRequest(f"request header truncated at {len(buf)} bytes", None)
    api_key, api_version, correlation_id = _REQUEST_HEAD.unpack_from(buf, 0)
    versions = DECODED.get(api_key)
    if versions is None or not versions[0] <= api_version <= versions[1]:
        raise UnsupportedVersion(api_key, api_version, correlation_id)
    cls = m.REQUESTS[api_key]
    header_version = 2 if _flexible(cls, api_version) else 1
    try:
        header, pos = m.decode(m.RequestHeader, header_version, buf)
        body, pos = m.decode(cls, api_version, buf, pos)
    except WireError as exc:
        raise MalformedRequest(str(exc), correlation_id) from exc
    if pos == len(buf) - 1 and api_key in _EXTRA_EMPTY_TAGS and buf[pos] == 0:
        pos += 1
    if pos != len(buf):
        raise MalformedRequest(
            f"{cls.__name__} v{api_version}: {len(buf) - pos} trailing bytes", correlation_id
        )
    return Request(api_key, api_version, correlation_id, header.client_id, body)


def _response_frame(
    correlation_id: int, flexible_header: bool, body: object, version: int
) -> bytes:
    out = bytearray(4)  # the size, filled in last
    out += _INT32.pack(correlation_id)
    if flexible_header:
        out.append(0)  # response header v1: no tagged fields
    m.encode(body, version, out)
    _INT32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_response(request: Request, body: object) -> bytes:
    """The whole response to `request` (size prefix, header of the request's
    version, `body` at the request's version)."""
    cls = m.RESPONSES[request.api_key]
    if type(body) is not cls:
        raise TypeError(f"answer to api key {request.api_key} must be {cls.__name__}")
    flexible = request.api_key != _API_VERSIONS_KEY and _flexible(cls, request.api_version)
    return _response_frame(request.correlation_id, flexible, body, request.api_version)


def advertised_versions() -> list[m.ApiVersionsResponse.ApiVersion]:
    """The api_keys list of an ApiVersionsResponse: `SERVED`, by api key."""
    return [
        m.ApiVersionsResponse.ApiVersion(api_key=key, min_version=lo, max_version=hi)
        for key, (lo, hi) in sorted(SERVED.items())
    ]


def unsupported_response(err: UnsupportedVersion) -> bytes:
    """The answer to a request at a key or version we do not serve.

    ApiVersions: the v0 response with UNSUPPORTED_VERSION and the served list,
    so the client retries at a version we serve (KIP-511). Another known key:
    the default response at the nearest decoded version, with
    UNSUPPORTED_VERSION in its top-level error_code where that version has one
    (the body was not decoded, so there are no topics or partitions to carry
    it otherwise). An unknown key: the correlation id and an int16 error code."""
    code = ErrorCode.UNSUPPORTED_VERSION
    if err.api_key == _API_VERSIONS_KEY:
        body = m.ApiVersionsResponse(error_code=code, api_keys=advertised_versions())
        return _response_frame(err.correlation_id, False, body, 0)
    return error_response(err.api_key, err.api_version, err.correlation_id, code)


def error_response(api_key: int, api_version: int, correlation_id: int, code: ErrorCode) -> bytes:
    """The default response of `api_key` at the nearest decoded version, with
    `code` in its top-level error_code where that version has one (a request
    whose body was not decoded, or whose handler failed, has no topics or
    partitions to carry it otherwise); for an unknown key, the correlation
    id and an int16 error code."""
    versions = DECODED.get(api_key)
    if versions is None:
        return _UNKNOWN_KEY_ANSWER.pack(6, correlation_id, code)
    version = min(max(api_version, versions[0]), versions[1])
    cls = m.RESPONSES[api_key]
    answer = cls()
    if hasattr(answer, "error_code"):
        answer.error_code = code
    flexible = api_key != _API_VERSIONS_KEY and _flexible(cls, version)
    return _response_frame(correlation_id, flexible, answer, version)
