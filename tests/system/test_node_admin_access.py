"""Who may use a real node's admin endpoint, and who may read its files.

The attacks (issue 24, finding 5 and part of 7): a web page in a local browser
changed a node's weight with a cross-site `POST /weight`, a DNS-rebinding page
could read `/status`, any local process could post from 127.0.0.9, and every
record was readable by every local user (0755/0644)."""

from __future__ import annotations

import http.client
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.system.nodes import RunningNode, start_node
from tests.system.wireclient import NodeClient


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningNode]:
    with start_node(tmp_path_factory.mktemp("admin"), cores=1) as running:
        yield running


def _ask(node: RunningNode, method: str, path: str, headers: dict[str, str]) -> tuple[int, dict]:
    connection = http.client.HTTPConnection(node.admin_host, node.admin_port, timeout=10)
    try:
        connection.request(method, path, body=b"2" if method == "POST" else None, headers=headers)
        reply = connection.getresponse()
        body = reply.read()
    finally:
        connection.close()
    return reply.status, json.loads(body) if body.startswith(b"{") else {}


def _token(node: RunningNode) -> str:
    _, status = _ask(node, "GET", "/status", {})
    return Path(status["admin_token_file"]).read_text().strip()


def test_a_cross_site_post_cannot_change_the_weight(node: RunningNode) -> None:
    """What a browser sends for a page's `fetch(..., {method: "POST", mode: "no-cors"})`."""
    browser = {"Origin": "https://evil.example", "Content-Type": "text/plain"}
    assert _ask(node, "POST", "/weight", browser)[0] == 403
    rebound = {"Host": f"evil.example:{node.admin_port}", "Content-Type": "text/plain"}
    assert _ask(node, "POST", "/weight", rebound)[0] == 403
    assert _ask(node, "GET", "/status", rebound)[0] == 403


def test_a_write_needs_the_token_the_node_wrote(node: RunningNode) -> None:
    assert _ask(node, "POST", "/weight", {})[0] == 401
    assert _ask(node, "POST", "/weight", {"Authorization": "Bearer " + "0" * 64})[0] == 401
    code, body = _ask(node, "POST", "/weight", {"Authorization": f"Bearer {_token(node)}"})
    assert code == 409 and "membership is off" in body["error"]  # past the door: no membership


def test_data_and_runtime_files_are_owner_only(node: RunningNode) -> None:
    with NodeClient(node.host, node.port) as client:
        client.create_topic("private", 1)
        client.produce("private", 0, [b"secret record"])
    data = Path(node.info["data_dir"])
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    for root, dirs, files in os.walk(data):
        for name in dirs + files:
            mode = stat.S_IMODE(os.lstat(os.path.join(root, name)).st_mode)
            assert not mode & 0o077, (os.path.join(root, name), oct(mode))
