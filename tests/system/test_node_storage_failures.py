"""A real node whose storage fails: a partition recovery refuses to repair is
taken offline and the node says so (/health, /metrics, `laminar status`); a
partition that runs out of space mid-write is reopened from disk and serves
again once there is room, every acknowledged record intact."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from laminar.log.partitions import MAX_REOPENS
from laminar.wire import ErrorCode
from tests.system.nodes import RunningNode, start_node
from tests.system.test_cli_system import laminar
from tests.system.wireclient import NodeClient, ServerError


def health(node: RunningNode) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(node.admin_url + "/health", timeout=10) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_damaged_partition_is_offline_and_the_node_says_so(tmp_path: Path) -> None:
    with start_node(tmp_path, cores=2) as node:
        with NodeClient(node.host, node.port) as client:
            topic_id = client.create_topic("events", 2).topic_id
            client.produce("events", 0, [b"zero"])
            client.produce("events", 1, [b"one"])
        node.terminate()
    index = node.data_dir / "partitions" / f"{topic_id}-0" / f"{0:020d}.index"
    with index.open("r+b") as f:  # the header and every entry lost; the store intact
        f.truncate(16)
        f.write(bytes(16))

    with node.restart() as node, NodeClient(node.host, node.port) as client:
        with pytest.raises(ServerError) as refused:
            client.produce("events", 0, [b"refused"])
        assert refused.value.code == ErrorCode.STORAGE_ERROR
        assert "offline" in str(refused.value) and "header is lost" in str(refused.value)
        assert client.produce("events", 1, [b"served"]).first_index == 1  # the rest works

        code, body = health(node)
        assert code == 503 and body["status"] == "degraded"
        (offline,) = body["partitions_offline"]
        assert (offline["topic_id"], offline["partition"]) == (topic_id, 0)
        assert "header is lost" in offline["reason"]

        status = laminar(node, "status", "--json")
        assert status.returncode == 0, status.stderr
        doc = json.loads(status.stdout)
        assert [(p["topic_id"], p["partition"]) for p in doc["partitions_offline"]] == [
            (topic_id, 0)
        ]
        human = laminar(node, "status")
        assert "OFFLINE partitions" in human.stdout and "header is lost" in human.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_partition_out_of_space_is_reopened_and_serves_again(tmp_path: Path) -> None:
    """A real ENOSPC: the data directory on a 4 MiB tmpfs, filled up. Writers
    retrying against the full disk (more often than a damaged log may fail
    before it is taken offline) do not take the records already durable
    offline."""
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    try:
        with start_node(tmp_path, cores=1, data_dir=mount / "data") as node:
            with NodeClient(node.host, node.port) as client:
                client.create_topic("full", 1)
                filler = mount / "filler"
                free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
                filler.write_bytes(b"\0" * max(0, free - (256 << 10)))
                acked: list[bytes] = []
                for n in range(10_000):
                    value = f"record {n} ".encode() * 100
                    try:
                        client.produce("full", 0, [value])
                    except ServerError as exc:
                        assert exc.code == ErrorCode.STORAGE_ERROR
                        assert "No space left on device" in str(exc)
                        break
                    acked.append(value)
                else:
                    pytest.fail("the disk never filled up")
                assert acked, "some records should fit"
                for _ in range(MAX_REOPENS + 2):  # writers retrying: the log fails each time
                    with pytest.raises(ServerError, match="No space left on device"):
                        client.produce("full", 0, [b"r" * (1 << 20)])
                assert client.fetch_all("full", 0) == acked  # still served, all of them
                filler.unlink()
                client.produce("full", 0, [b"after"])  # reopened from disk
                assert client.fetch_all("full", 0) == [*acked, b"after"]
            code, body = health(node)
            assert code == 200 and body["partitions_offline"] == []
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
