"""Start-up errors, signals, pinning and the admin endpoint of a real node."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from laminar.client import Client
from laminar.wire import FetchRequest, FetchResponse
from tests.support import wait_until
from tests.system.bpf_env import AUTO_ROUTING
from tests.system.nodes import (
    NodeStartError,
    RunningNode,
    bytes_in,
    node_command,
    start_node,
)
from tests.system.wireclient import NodeClient


def run_node(tmp_path: Path, *args: str, cores: int = 1) -> subprocess.CompletedProcess[str]:
    """Run laminar-node expecting it to fail at start-up."""
    cmd = node_command(tmp_path / "data", cores, {})
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=60)


def test_port_in_use_is_a_clear_startup_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_node(tmp_path, "--port", str(port))
    assert result.returncode == 2
    assert f"node port 127.0.0.1:{port} is already in use" in result.stderr


def test_unusable_data_dir_and_too_many_cores(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = run_node(tmp_path, "--data-dir", str(blocker / "data"))
    assert result.returncode == 2
    assert "is not usable" in result.stderr and "--data-dir" in result.stderr
    result = run_node(tmp_path, cores=(os.cpu_count() or 1) + 1)
    assert result.returncode == 2
    assert "--cores" in result.stderr and "this machine has" in result.stderr


def test_one_node_per_data_dir(node: RunningNode, tmp_path: Path) -> None:
    with pytest.raises(NodeStartError, match="in use by another laminar-node"):
        start_node(tmp_path, cores=1, data_dir=node.data_dir)
    assert node.alive()


def test_sigint_drains_like_sigterm(tmp_path: Path) -> None:
    node = start_node(tmp_path, cores=2, runtime="asyncio")
    with Client(node.bootstrap) as client:
        assert client.metadata().routing_mode == AUTO_ROUTING
        client.create_topic("t", partitions=2)
        client.produce("t", 1, [b"kept"])
    assert node.info["runtime"] == "asyncio"
    assert node.terminate(signal.SIGINT) == 0
    with node.restart() as again, Client(again.bootstrap) as client:
        assert [r.value for r in client.fetch("t", 1, 0)] == [b"kept"]


def test_shards_are_pinned_one_per_core(node: RunningNode) -> None:
    for shard, pid in enumerate(node.shard_pids()):
        assert psutil.Process(pid).cpu_affinity() == [shard]


def _get(node: RunningNode, path: str) -> tuple[int, str]:
    return node.admin_get(path)


def test_metrics_count_requests_forwards_and_fsyncs(node: RunningNode) -> None:
    with NodeClient(node.host, node.port, via_node_port=True) as client:
        client.create_topic("m", 8)
        for p in range(8):
            client.produce("m", p, [b"v"] * 4)
            client.fetch("m", p, 0)
    code, text = _get(node, "/metrics")
    assert code == 200
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    assert samples[f'laminar_routing_mode{{mode="{AUTO_ROUTING}"}}'] == 1
    assert samples['laminar_shard_up{shard="0"}'] == samples['laminar_shard_up{shard="1"}'] == 1
    produced = sum(
        v
        for k, v in samples.items()
        if k.startswith("laminar_requests_total") and 'op="produce"' in k
    )
    assert produced == 8
    assert (
        sum(v for k, v in samples.items() if k.startswith("laminar_records_produced_total")) == 32
    )
    # Every request came in on the one node-port connection, so about half went
    # to the other shard and the counters say so.
    forwarded_out = sum(
        v for k, v in samples.items() if k.startswith("laminar_forwarded_out_total")
    )
    forwarded_in = sum(v for k, v in samples.items() if k.startswith("laminar_forwarded_in_total"))
    assert forwarded_out == forwarded_in > 0
    assert (
        sum(v for k, v in samples.items() if k.startswith("laminar_fsync_latency_seconds_count"))
        > 0
    )
    assert samples['laminar_shard_core{shard="1"}'] == 1
    for name in (
        "laminar_partitions_owned",
        "laminar_flushes_total",
        "laminar_received_bytes_total",
    ):
        assert f'{name}{{shard="0"}}' in samples

    code, body = _get(node, "/status")
    status = json.loads(body)
    assert code == 200 and status["routing_mode"] == AUTO_ROUTING and status["cores"] == 2
    owned = [s["stats"]["partitions_owned"] for s in status["shards"]]
    assert sum(owned) == 8
    assert _get(node, "/nope")[0] == 404


def test_health_reports_a_shard_down(tmp_path: Path) -> None:
    """A shard that cannot even be started again (here: the supervisor is out of
    file descriptors) is retried with backoff for as long as it takes, and
    /health says 503, which shard and why, until it is back. A single failed
    start used to end the restart loop for good."""
    with start_node(tmp_path, cores=2) as node:
        assert _get(node, "/health")[0] == 200
        os.kill(node.shard_pids()[1], signal.SIGSTOP)  # alive but not answering
        try:
            # Stopped, not dead: the supervisor still counts it up; /metrics still answers
            # within its stats timeout and reports what it can.
            code, text = _get(node, "/metrics")
            assert code == 200 and 'laminar_shard_up{shard="0"} 1' in text
        finally:
            os.kill(node.shard_pids()[1], signal.SIGCONT)
        limits = resource.prlimit(node.pid, resource.RLIMIT_NOFILE)
        # Every descriptor the supervisor has open now: once the shard's two are
        # closed, an admin connection fits, a new shard's socketpair and pipes do not.
        resource.prlimit(node.pid, resource.RLIMIT_NOFILE, (_open_fds(node.pid), limits[1]))
        try:
            old = node.kill_shard(1, wait_restart=False)
            body: dict[str, object] = {}
            deadline = time.monotonic() + 30
            while "start_errors" not in body:
                assert time.monotonic() < deadline, f"no start error reported: {body}"
                time.sleep(0.2)
                code, text = _get(node, "/health")
                body = json.loads(text)
                assert code == 503 and body["shards_down"] == [1], (code, body)
            assert "Too many open files" in str(body["start_errors"])
            failed = node.log_text().count("cannot start shard 1")
            wait_until(  # a few more failed starts: the loop must survive them
                lambda: node.log_text().count("cannot start shard 1") >= failed + 2,
                "two more failed starts of shard 1",
            )
        finally:
            resource.prlimit(node.pid, resource.RLIMIT_NOFILE, limits)
        node.wait_shard_restarted(1, old)
        code, text = _get(node, "/health")
        assert code == 200 and "start_errors" not in json.loads(text)
        assert "cannot start shard 1" in node.log_text()


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_drain_ends_long_polls_with_an_answer(tmp_path: Path) -> None:
    node = start_node(tmp_path, cores=2)
    with NodeClient(node.host, node.port) as client:
        client.create_topic("polls", 4)
        pids = [client.pid("polls", p) for p in range(4)]
        conns = [client.conn_for(pid) for pid in pids]
        # Longer than the test may run: an answer can only come from the drain.
        polls = [FetchRequest(pid, 0, max_wait_ms=3_600_000) for pid in pids]
        sent = bytes_in(node) + sum(len(poll.encode(0)) for poll in polls)
        for conn, poll in zip(conns, polls, strict=True):
            conn.send(poll)
        # The fetches are at the node, waiting at the end of their logs.
        wait_until(lambda: bytes_in(node) >= sent, "the four long polls at the node")
        node.proc.send_signal(signal.SIGTERM)
        for conn in conns:
            response = conn.read_response()
            assert isinstance(response, FetchResponse) and response.records == ()
        assert node.proc.wait(20) == 0


def test_the_admin_endpoint_stays_on_loopback_unless_asked(tmp_path: Path) -> None:
    """`--host 0.0.0.0` exposes the node and shard ports; the admin endpoint
    (status, metrics) stays on loopback unless `--admin-host` says otherwise."""

    def admin_address(node: RunningNode) -> str:
        listening = [
            c.laddr
            for c in psutil.Process(node.pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == node.admin_port
        ]
        assert len(listening) == 1, listening
        return str(listening[0].ip)

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    with start_node(tmp_path / "a", cores=1, host="0.0.0.0", insecure=True) as node:
        assert admin_address(node) == "127.0.0.1"
        assert _get(node, "/health")[0] == 200
    with start_node(
        tmp_path / "b", cores=1, host="0.0.0.0", admin_host="0.0.0.0", insecure=True
    ) as node:
        assert admin_address(node) == "0.0.0.0"
