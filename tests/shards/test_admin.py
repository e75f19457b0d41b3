"""The admin endpoint's HTTP side (`laminar.node.admin`), on a real socket:
what POST /weight accepts and refuses, and who may ask at all (the token, no
Origin, a local Host). The pages' content is the supervisor's."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
from pathlib import Path
from typing import Any

import pytest

from laminar.node.admin import AdminRefusal, AdminServer, AdminSource, create_token_file

TOKEN = "t0k3n" * 8


async def _page() -> dict[str, Any]:
    return {}


async def _exchange(
    request: bytes, weights: list[float], host: str = "127.0.0.1"
) -> tuple[int, dict[str, Any]]:
    async def set_weight(weight: float) -> dict[str, Any]:
        if weight == 13:
            raise AdminRefusal(409, "membership is off")
        weights.append(weight)
        return {"weight": weight}

    async def health() -> tuple[bool, dict[str, Any]]:
        return True, {}

    async def metrics() -> str:
        return ""

    sock = socket.socket()
    sock.bind((host, 0))
    sock.listen()
    server = AdminServer(sock, AdminSource(health, metrics, _page, set_weight), TOKEN)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection(*sock.getsockname())
        writer.write(request)
        answer = await reader.read()
        writer.close()
    finally:
        await server.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body.startswith(b"{") else {}


def _post(body: bytes, length: int | None = None, token: str = TOKEN, extra: bytes = b"") -> bytes:
    size = len(body) if length is None else length
    auth = b"Authorization: Bearer %s\r\n" % token.encode() if token else b""
    head = b"POST /weight HTTP/1.1\r\nHost: 127.0.0.1:9644\r\n%s%s" % (auth, extra)
    return b"%sContent-Length: %d\r\n\r\n%s" % (head, size, body)


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (_post(b"2.5"), 200),
        (_post(b"abc"), 400),
        (_post(b""), 400),
        (_post(b"1" * 65), 400),  # bounded: no huge bodies
        (b"POST /weight HTTP/1.1\r\nAuthorization: Bearer %s\r\n\r\n" % TOKEN.encode(), 400),
        (_post(b"13"), 409),
        (b"POST /status HTTP/1.1\r\n\r\n", 405),
    ],
)
def test_post_weight_takes_a_bounded_number_and_passes_refusals_on(
    request_: bytes, code: int
) -> None:
    weights: list[float] = []
    got, body = asyncio.run(_exchange(request_, weights))
    assert got == code, body
    if code == 200:
        assert weights == [float(request_.rsplit(b"\n", 1)[1])]
    else:
        assert not weights and ("error" in body or code == 405)


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (_post(b"2", token=""), 401),  # loopback alone is not a permission
        (_post(b"2", token="wrong" * 8), 401),
        (_post(b"2", token=TOKEN[:-1]), 401),
        (
            _post(b"2", extra=b"Origin: https://evil.example\r\n"),
            403,
        ),  # a web page, even with the token
        (_post(b"2", extra=b"Host: rebind.evil.example\r\n"), 403),
    ],
)
def test_a_write_needs_the_token_and_no_web_page_may_ask(request_: bytes, code: int) -> None:
    weights: list[float] = []
    got, body = asyncio.run(_exchange(request_, weights, host="127.0.0.9"))
    assert got == code and "error" in body and not weights


@pytest.mark.parametrize(
    ("host", "code"),
    [
        (b"127.0.0.1:9644", 200),
        (b"localhost", 200),
        (b"[::1]:9644", 200),
        (b"10.1.2.3", 200),
        (None, 200),
        (b"rebind.evil.example:9644", 403),  # DNS rebinding: the page's own name
        (b"127.0.0.1.evil.example", 403),
        (b"localhost.evil.example", 403),
    ],
)
def test_pages_answer_only_a_local_host(host: bytes | None, code: int) -> None:
    field = b"Host: %s\r\n" % host if host is not None else b""
    got, _ = asyncio.run(_exchange(b"GET /status HTTP/1.1\r\n%s\r\n" % field, []))
    assert got == code


def test_a_get_with_an_origin_is_refused() -> None:
    request = b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: null\r\n\r\n"
    got, _ = asyncio.run(_exchange(request, []))
    assert got == 403


def test_the_token_file_is_owner_only_and_fresh_each_time(tmp_path: Path) -> None:
    first = create_token_file(str(tmp_path))
    path = tmp_path / "admin-token"
    assert path.read_text().strip() == first and len(first) == 64
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    os.chmod(path, 0o644)
    assert create_token_file(str(tmp_path)) != first
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
