"""`laminar` (the CLI) as a subprocess against a real node."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

from laminar.client import AuthenticationFailedError, Client
from tests.support import free_port, wait_until
from tests.support.processes import interruptible, wait_or_show

from .nodes import RunningNode

LAMINAR = [sys.executable, "-m", "laminar.cli.main"]
REPO = Path(__file__).resolve().parents[2]


def laminar(node: RunningNode, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LAMINAR, *args, "--bootstrap", node.bootstrap],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "LAMINAR_BOOTSTRAP"},
    )


def test_create_produce_consume_status(node: RunningNode) -> None:
    created = laminar(node, "topic", "create", "events", "--partitions", "8")
    assert created.returncode == 0, created.stderr
    lines = [f"event {i}" for i in range(300)]
    produced = laminar(node, "produce", "events", "--partition", "5", stdin="\n".join(lines))
    assert produced.returncode == 0, produced.stderr
    assert "produced 300 records to events/5" in produced.stderr
    consumed = laminar(node, "consume", "events", "--partition", "5", "--from-beginning")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == lines
    everything = laminar(node, "consume", "events", "--json")
    records = [json.loads(line) for line in everything.stdout.splitlines()]
    assert {r["partition"] for r in records} == {5} and len(records) == 300

    described = json.loads(laminar(node, "topic", "describe", "events", "--json").stdout)
    assert sum(p["records"] for p in described["partition_details"]) == 300
    assert {p["port"] for p in described["partition_details"]} == set(node.shard_ports)

    admin = f"{node.admin_host}:{node.admin_port}"
    status = laminar(node, "status", "--json", "--admin", admin)
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert doc["routing_mode"] == node.routing_mode
    assert [s["port"] for s in doc["shards"]] == node.shard_ports
    assert all(s["reachable"] and s["up"] for s in doc["shards"])
    assert all(s["core"] is not None for s in doc["shards"])  # from /metrics
    assert doc["admin"]["reachable"] is True
    assert sum(s["records"] for s in doc["shards"]) == 300
    assert sum(s["requests"] for s in doc["shards"]) > 0
    human = laminar(node, "status", "--admin", admin)
    assert f"routing {node.routing_mode}" in human.stdout
    # Without --admin, the metadata names the admin port (ephemeral here).
    found = json.loads(laminar(node, "status", "--json").stdout)
    assert found["admin"] == {"address": admin, "reachable": True}


def test_exit_codes_against_a_real_node(node: RunningNode) -> None:
    assert laminar(node, "topic", "create", "t").returncode == 0
    missing = laminar(node, "consume", "missing")
    assert missing.returncode == 1 and "UNKNOWN_TOPIC" in missing.stderr
    exists = laminar(node, "topic", "create", "t")
    assert exists.returncode == 1 and "--if-not-exists" in exists.stderr
    assert laminar(node, "produce", "t", "--header", "oops", "-v", "x").returncode == 2
    node.terminate()
    down = laminar(node, "topic", "list")
    assert down.returncode == 3
    assert "cannot reach" in down.stderr and "make run" in down.stderr


def test_consume_follow_prints_new_records(node: RunningNode) -> None:
    assert laminar(node, "topic", "create", "live", "--partitions", "4").returncode == 0
    follower = subprocess.Popen(
        [*LAMINAR, "consume", "live", "--follow", "--max", "3", "--json", "-b", node.bootstrap],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The follower starts at the end: keep producing until it has seen three.
        for i in range(200):
            if follower.poll() is not None:
                break
            laminar(node, "produce", "live", "--partition", str(i % 4), "--value", f"v{i}")
        out, err = follower.communicate(timeout=30)
    finally:
        follower.kill()
    assert follower.returncode == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) == 3
    assert all(r["value"].startswith("v") for r in records)


def test_a_pipe_of_large_lines_and_a_value_over_the_limit(node: RunningNode) -> None:
    """512 lines of 20 KB (10 MiB) go in requests under the node's frame limit,
    each line once; one 9 MiB value is refused with the limit named, and the
    node stays healthy (it was reported as "stopped answering", exit 3)."""
    assert laminar(node, "topic", "create", "big", "--partitions", "2").returncode == 0
    lines = [f"{i:03d}".ljust(20_000, "x") for i in range(512)]
    produced = laminar(node, "produce", "big", stdin="\n".join(lines))
    assert produced.returncode == 0, produced.stderr
    refused = laminar(node, "produce", "big", stdin="v" * (9 << 20))
    assert refused.returncode == 1, refused.stderr
    assert "8388608 bytes" in refused.stderr and "--max-frame-bytes" in refused.stderr
    consumed = laminar(node, "consume", "big")
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.splitlines()) == lines  # each once, nothing else


class Follower:
    """`laminar consume TOPIC --follow --from-beginning --json` in a subprocess,
    its records and notices read as they come."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        flags = ["--follow", "--from-beginning", "--json", "--bootstrap", bootstrap]
        self.proc = subprocess.Popen(
            [*LAMINAR, "consume", topic, *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=interruptible,
        )
        self.values: list[str] = []
        self.notices: list[str] = []
        self.stderr: list[str] = []
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self._record)),
            threading.Thread(target=self._read, args=(self.proc.stderr, self._notice)),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: IO[str], take: Callable[[str], None]) -> None:
        for line in stream:
            take(line)

    def _record(self, line: str) -> None:
        self.values.append(json.loads(line)["value"])

    def _notice(self, line: str) -> None:
        self.stderr.append(line)
        with contextlib.suppress(ValueError, KeyError, TypeError):
            self.notices.append(json.loads(line)["notice"])

    def stop(self) -> int:
        """Ctrl-C, the way to stop a follower (exit 0)."""
        self.proc.send_signal(signal.SIGINT)
        try:
            code = wait_or_show(self.proc, 30)
        finally:
            self.proc.kill()
            for reader in self._readers:
                reader.join(10)
        return code


def check_follow_goes_on_across_an_outage(
    bootstrap: str, topic: str, outage: Callable[[Follower], None]
) -> None:
    """Records produced before and after `outage` (a restart, a leader killed)
    are each printed once by one `consume --follow`, and every notice that it
    lost the node is followed by one that it reconnected. `topic` exists."""
    follower = Follower(bootstrap, topic)
    try:
        before = [f"before-{i}" for i in range(20)]
        with Client(bootstrap) as client:
            for i in range(0, 20, 5):
                client.send(topic, [v.encode() for v in before[i : i + 5]])
        wait_until(lambda: len(follower.values) >= 20, "the records before the outage")
        outage(follower)
        after = [f"after-{i}" for i in range(20)]
        with Client(bootstrap) as client:
            for i in range(0, 20, 5):
                client.send(topic, [v.encode() for v in after[i : i + 5]])
        wait_until(lambda: len(follower.values) >= 40, "the records after the outage")
    finally:
        code = follower.stop()
    assert code == 0, follower.stderr
    assert Counter(follower.values) == Counter(before + after), follower.stderr
    assert follower.notices == ["lost", "reconnected"] * (len(follower.notices) // 2)


def test_consume_follow_goes_on_across_a_restart(node: RunningNode) -> None:
    assert laminar(node, "topic", "create", "f", "--partitions", "3").returncode == 0
    restarted: list[RunningNode] = []

    def restart(follower: Follower) -> None:
        node.terminate()
        wait_until(lambda: "lost" in follower.notices, "the follower to notice")
        restarted.append(node.restart(port=node.port, shard_port_base=0, admin_port=0))

    try:
        check_follow_goes_on_across_an_outage(node.bootstrap, "f", restart)
    finally:
        for again in restarted:
            again.terminate()
    assert restarted  # the outage happened


def _cluster_ports(count: int) -> list[int]:
    """Node ports for `make cluster` whose shard (+1) and admin (+2000) ports
    are free too."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        near = [q for p in ports for q in (p, p + 1, p + 2000)]
        if port + 2000 < 65536 and not {port, port + 1, port + 2000} & set(near):
            with contextlib.suppress(OSError):
                for other in (port + 1, port + 2000):
                    with socket.socket() as probe:
                        probe.bind(("127.0.0.1", other))
                ports.append(port)
    return ports


@contextlib.contextmanager
def _make_cluster(data: Path, **env: str) -> Iterator[list[int]]:
    """`make cluster` on free ports with its data in `data`: yields the ports once
    every node is ready; then SIGTERM to make must stop every node."""
    ports = _cluster_ports(3)
    env = {
        **os.environ,
        "LAMINAR_CLUSTER_PORTS": " ".join(map(str, ports)),
        "LAMINAR_CLUSTER_DIR": str(data),
        **env,
    }
    make = subprocess.Popen(
        ["make", "--no-print-directory", "cluster"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # one group to clean up whatever a failure leaves
    )

    def node_pids() -> list[int] | None:
        pids = []
        for node_id in ("n1", "n2", "n3"):
            try:
                pids.append(
                    int(json.loads((data / node_id / "run" / "node.json").read_text())["pid"])
                )
            except (OSError, ValueError, KeyError):
                return None
        return pids

    try:
        pids = wait_until(node_pids, "the three nodes to be ready")
        yield ports
        make.send_signal(signal.SIGTERM)
        make.wait(60)
        wait_until(lambda: not any(_alive(pid) for pid in pids), "every node to stop", 30)
        # ... and none was started again meanwhile (scripts/cluster restarts a
        # node that stops cleanly on its own while the cluster is not stopping):
        assert not _nodes_on(data), "make cluster left nodes running after its SIGTERM"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(make.pid, signal.SIGKILL)
        make.wait(10)


def _nodes_on(data: Path) -> list[int]:
    """Pids of laminar-node processes whose data dir is under `data`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(b"laminar-node" in a for a in argv) and any(str(data).encode() in a for a in argv):
            found.append(int(proc.name))
    return found


def test_sigterm_to_make_cluster_stops_every_node(tmp_path: Path) -> None:
    """`kill -TERM` of `make cluster` (make passes it to scripts/cluster) stops
    the three nodes; it used to stop only the log prefixers and leave them."""
    with _make_cluster(tmp_path / "cluster"):
        pass


def test_make_certs_then_make_cluster_runs_it_on_mutual_tls(tmp_path: Path) -> None:
    """`make certs` makes owner-only certificates and the admin login in one
    step; `make cluster` then runs every node on TLS with its own certificate
    and logins, the admin logs in, and records go through with replication
    factor 3; a client without a login is refused."""
    certs = tmp_path / "certs"
    subprocess.run(
        ["make", "--no-print-directory", "certs", f"CERTS_DIR={certs}"],
        cwd=REPO, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    names = {"ca.crt", "ca.key", "ca.srl", "admin.crt", "admin.key", "admin.cred", "admin.pw"}
    names |= {f"n{i}.{ext}" for i in (1, 2, 3) for ext in ("crt", "key")}
    assert {p.name for p in certs.iterdir()} == names
    assert stat.S_IMODE(certs.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in certs.iterdir()} == {0o600}
    data = tmp_path / "cluster"
    with _make_cluster(data, LAMINAR_CLUSTER_CERTS=str(certs)) as ports:
        for node_id in ("n1", "n2", "n3"):
            info = json.loads((data / node_id / "run" / "node.json").read_text())
            assert info["peer_auth"] == "certificates" and info["udp"] is False
        assert not (data / "cluster.secret").exists()  # membership is signed by certificate
        bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports)
        values = [b"m%03d" % i for i in range(20)]
        tls = {"tls": True, "ca_file": str(certs / "ca.crt")}
        with pytest.raises(AuthenticationFailedError):
            Client(bootstrap, **tls).create_topic("refused", 1)
        password = (certs / "admin.pw").read_text().strip()
        with wait_until(
            lambda: Client(bootstrap, **tls, username="admin", password=password),
            "the admin logs in (made on the first start)",
        ) as client:
            client.create_topic("made", 1, replication_factor=3)
            for value in values:
                client.produce("made", 0, [value])
            assert [r.value for r in client.fetch("made", 0, 0)] == values


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
