"""The admin endpoint's HTTP side (`laminar.shards.admin`), on a real socket:
what POST /weight accepts and refuses. The pages' content is the supervisor's."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest

from laminar.shards.admin import AdminRefusal, AdminServer, AdminSource, _loopback


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
    server = AdminServer(sock, AdminSource(health, metrics, _page, set_weight))
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


def _post(body: bytes, length: int | None = None) -> bytes:
    size = len(body) if length is None else length
    return b"POST /weight HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (size, body)


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (_post(b"2.5"), 200),
        (_post(b"abc"), 400),
        (_post(b""), 400),
        (_post(b"1" * 65), 400),  # bounded: no huge bodies
        (b"POST /weight HTTP/1.1\r\n\r\n", 400),  # no length
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


def _outward_address() -> str | None:
    """This host's address on its default route (no packet is sent), if any."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))  # documentation range: never sent
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_a_peer_on_another_address_cannot_set_the_weight() -> None:
    address = _outward_address()
    if address is None:
        pytest.skip("this host has no address besides loopback")
    weights: list[float] = []
    code, body = asyncio.run(_exchange(_post(b"2"), weights, host=address))
    assert code == 403 and "loopback" in body["error"] and not weights


def test_only_loopback_peers_may_set_the_weight() -> None:
    assert _loopback(("127.0.0.1", 5)) and _loopback(("::1", 5, 0, 0))
    for peer in (("10.0.0.1", 5), ("192.168.1.2", 5), None, "", ("not an ip", 1)):
        assert not _loopback(peer)
