"""Kafka request framing and headers, sans I/O (skeleton: filled in on i27-codec)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Apache Kafka 3.0's advertised (min, max) per api key, intersected with the vendored JSON.
SERVED: dict[int, tuple[int, int]] = {
    0: (3, 9),
}

API_KEYS: dict[str, int] = {"Produce": 0}


@dataclass(slots=True)
class Request:
    """One decoded Kafka request: its header and its body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any


class UnsupportedVersion(Exception):
    """The header decoded, but this api key or version is not served."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"api key {api_key} version {api_version} is not served")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class MalformedRequest(Exception):
    """The bytes of a request do not parse."""

    def __init__(self, message: str, correlation_id: int | None) -> None:
        super().__init__(message)
        self.correlation_id = correlation_id


def decode_request(frame: bytes | memoryview) -> Request:
    """Decode one request (without its 4-byte size prefix)."""
    raise NotImplementedError


def encode_response(request: Request, body: Any) -> bytes:
    """The whole response to `request`, size prefix included."""
    raise NotImplementedError


def unsupported_response(err: UnsupportedVersion) -> bytes:
    """The answer to a request at a key or version we do not serve."""
    raise NotImplementedError
