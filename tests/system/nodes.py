"""Real `laminar-node` processes for tests: start, find their ports, kill them.

    from tests.system.nodes import start_node

    with start_node(tmp_path, cores=2) as node:       # ready when this returns
        node.bootstrap                                 # "127.0.0.1:<port>"
        node.shard_ports, node.admin_port, node.shard_pids()
        node.kill_shard(1)                             # SIGKILL one shard
        node.kill()                                    # SIGKILL the whole node
        code = node.terminate()                        # SIGTERM, wait, exit code
    node = node.restart()                              # same data dir, new ports

`start_node(tmp, prefix=["ip", "netns", "exec", ns])` runs it under a command
that execs it (a network namespace, `setpriv`).

The node runs with `--port 0` (every port ephemeral) in its own session, so
`kill()` takes the supervisor and every shard down at once, like a machine
crash. Readiness is `<data-dir>/run/node.json` naming the node's pid, which
the supervisor writes once every shard serves. The node's log (stderr and
stdout) goes to `<tmp>/node-<n>.log`; `node.log_text()` reads it, and a
node that fails to start raises `NodeStartError` with the log's tail.

Keyword flags become command-line flags: `start_node(tmp, cores=2,
runtime="asyncio", flush="never", idle_timeout=1)` runs `laminar-node --cores 2
--runtime asyncio --flush never --idle-timeout 1`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 40.0
_counter = itertools.count()


class NodeStartError(RuntimeError):
    """The node exited or did not become ready; the message has its log's tail."""


def _flag_args(flags: dict[str, Any]) -> list[str]:
    args: list[str] = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        args.append("--" + name.replace("_", "-"))
        if value is not True:
            args.append(str(value))
    return args


@dataclass
class RunningNode:
    """A started node process (see the module docstring)."""

    proc: subprocess.Popen[bytes]
    data_dir: Path
    log_path: Path
    cores: int
    flags: dict[str, Any]
    prefix: tuple[str, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)

    # -- what tests use ---------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def host(self) -> str:
        return str(self.info["host"])

    @property
    def port(self) -> int:
        return int(self.info["port"])

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def shard_ports(self) -> list[int]:
        return [int(p) for p in self.info["shard_ports"]]

    @property
    def admin_port(self) -> int:
        return int(self.info["admin_port"])

    @property
    def kafka_ports(self) -> list[int]:
        """Each shard's Kafka port (shard 0's is the bootstrap)."""
        return [int(p) for p in self.info.get("kafka_ports", [])]

    @property
    def kafka_bootstrap(self) -> str:
        return f"{self.host}:{self.kafka_ports[0]}"

    @property
    def admin_host(self) -> str:
        return str(self.info.get("admin_host", self.host))

    @property
    def admin_url(self) -> str:
        scheme = "https" if self.flags.get("tls_cert_file") else "http"
        return f"{scheme}://{self.admin_host}:{self.admin_port}"

    @property
    def admin_tls(self) -> ssl.SSLContext | None:
        """How to reach the admin endpoint of a node with TLS (its own --tls-ca-file)."""
        if not self.flags.get("tls_cert_file"):
            return None
        return ssl.create_default_context(cafile=self.flags.get("tls_ca_file"))

    @property
    def routing_mode(self) -> str:
        return str(self.info["routing_mode"])

    def admin_get(self, path: str) -> tuple[int, str]:
        """GET `path` of the admin endpoint: (HTTP status, body), errors included."""
        try:
            with urllib.request.urlopen(
                self.admin_url + path, timeout=10, context=self.admin_tls
            ) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def node_file(self) -> dict[str, Any] | None:
        """The current contents of node.json (None while it is being written)."""
        try:
            with open(self.data_dir / "run" / "node.json") as f:
                data: dict[str, Any] = json.load(f)
                return data
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def shard_pids(self) -> list[int]:
        """The shards' current pids (re-read: a restarted shard has a new one)."""
        info = self.node_file() or self.info
        return [int(p) for p in info["shard_pids"]]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # -- stopping ---------------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL the supervisor and every shard at once (a crash)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(STOP_TIMEOUT_S)
        self._reap_group()

    def kill_shard(self, shard_id: int, *, wait_restart: bool = True) -> int:
        """SIGKILL one shard; with `wait_restart`, wait until the supervisor has a
        new one ready. Returns the killed pid."""
        old = self.shard_pids()[shard_id]
        os.kill(old, signal.SIGKILL)
        if wait_restart:
            self.wait_shard_restarted(shard_id, old)
        return old

    def wait_shard_restarted(self, shard_id: int, old_pid: int) -> int:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            info = self.node_file()
            if info is not None and info["shard_pids"][shard_id] != old_pid:
                self.info = info
                return int(info["shard_pids"][shard_id])
            if not self.alive():
                raise NodeStartError(
                    f"node exited while shard {shard_id} restarted\n{self._tail()}"
                )
            time.sleep(0.02)
        raise NodeStartError(f"shard {shard_id} was not restarted\n{self._tail()}")

    def terminate(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> int:
        """Send `sig` (a graceful drain) to the supervisor; return its exit code."""
        if self.alive():
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self._reap_group()
        return code

    def _reap_group(self) -> None:
        """Make sure no shard outlives the test (it dies with the supervisor anyway)."""
        deadline = time.monotonic() + 10
        for pid in (self.info or {}).get("shard_pids", []):
            while time.monotonic() < deadline and _pid_alive(pid):
                time.sleep(0.01)

    def restart(self, **changes: Any) -> RunningNode:
        """A new node on the same data dir (stop this one first). A node first
        started on ephemeral ports and now given a fixed one keeps its Kafka
        door off unless `kafka_port` is given: the ports a fixed `--port`
        implies for it (port+2022+i) may be anyone's ephemeral ports by now."""
        if self.alive():
            self.terminate()
        flags = {**self.flags, **changes}
        if changes.get("port") and not self.flags.get("port") and "kafka_port" not in flags:
            flags["kafka_port"] = 0
        return _start(self.data_dir, self.log_path.parent, self.cores, flags, self.prefix)

    # -- context manager ----------------------------------------------------------

    def __enter__(self) -> RunningNode:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.alive():
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.terminate()

    def _tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of ours is dead for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def node_command(data_dir: Path, cores: int, flags: dict[str, Any]) -> list[str]:
    """The command line that runs a node (tests may run it themselves).

    `--xdp off` unless a test asks otherwise: test nodes listen on 127.0.0.1, and
    nothing may attach to the host's `lo` (XDP tests run their node in a network
    namespace of their own, see test_routing_xdp.py)."""
    all_flags = {"port": 0, "log_level": "INFO", "xdp": "off", **flags}
    return [
        sys.executable,
        "-m",
        "laminar.cli.node",
        "--cores",
        str(cores),
        "--data-dir",
        str(data_dir),
        *_flag_args(all_flags),
    ]


def _start(
    data_dir: Path,
    log_dir: Path,
    cores: int,
    flags: dict[str, Any],
    prefix: Sequence[str] = (),
) -> RunningNode:
    log_path = log_dir / f"node-{next(_counter)}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*prefix, *node_command(data_dir, cores, flags)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    node = RunningNode(proc, data_dir, log_path, cores, dict(flags), tuple(prefix))
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        info = node.node_file()
        if info is not None and info.get("pid") == proc.pid:
            node.info = info
            return node
        if proc.poll() is not None:
            raise NodeStartError(
                f"laminar-node exited with code {proc.returncode} before it was ready:\n"
                + node._tail()
            )
        time.sleep(0.02)
    node.kill()
    raise NodeStartError(f"laminar-node was not ready in {START_TIMEOUT_S:.0f} s:\n{node._tail()}")


def shard_stats(node: RunningNode, shard_id: int = 0) -> dict[str, Any]:
    """One shard's counters, as the admin endpoint's /status shows them."""
    status, body = node.admin_get("/status")
    assert status == 200, body
    shards = json.loads(body)["shards"]
    stats: dict[str, Any] = next(s for s in shards if s["shard_id"] == shard_id)["stats"]
    return stats


def bytes_in(node: RunningNode) -> int:
    """What the node's shards have read from clients so far (a test waits on it
    to know its requests are in the node's hands)."""
    return sum(shard_stats(node, s)["bytes_in"] for s in range(len(node.shard_ports)))


def rss_bytes(pid: int) -> int:
    """A process's resident set size (from /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def start_node(
    tmp_path: Path,
    cores: int = 2,
    *,
    data_dir: Path | None = None,
    prefix: Sequence[str] = (),
    **flags: Any,
) -> RunningNode:
    """Start `laminar-node --cores N --port 0` on `data_dir` (default
    `tmp_path/data`) and return it once ready (see the module docstring).

    `prefix` runs the node under a command that then execs it, keeping the pid
    (`ip netns exec NS`, `setpriv ... --`)."""
    data_dir = data_dir or tmp_path / "data"
    return _start(Path(data_dir), Path(tmp_path), cores, flags, prefix)
