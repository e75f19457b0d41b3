"""nats-server with JetStream on file storage, on loopback, in a fresh directory.

Durability, as established for the Debian package (nats-server 2.9.10): a
JetStream publish is acknowledged once the message is written to the stream's
block file, i.e. to the OS page cache; the file store calls fsync on a timer
(observed with strace: no fsync during 3,000 acknowledged publishes, then
fsyncs of the block files about two minutes after the stream was created).
The `sync_interval` option (`always`: fsync before every acknowledgement)
arrived in 2.10; 2.9.10 rejects it as an unknown field. So on 2.9 JetStream
cannot be made to acknowledge after fsync, and the harness says so; with a
server >= 2.10 the `sync-always` variant configures `sync_interval: always`.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from laminar.bench.servers.ports import accepts, free_port
from laminar.bench.servers.process import ManagedProcess

BINARY = "nats-server"


def nats_version(binary: str = BINARY) -> tuple[int, int, int] | None:
    """The installed server's version, or None when it is not installed."""
    path = shutil.which(binary)
    if path is None:
        return None
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    match = re.search(r"v(\d+)\.(\d+)\.(\d+)", out.stdout + out.stderr)
    if match is None:
        return None
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def supports_sync_always(version: tuple[int, int, int]) -> bool:
    """`jetstream { sync_interval: always }` exists from 2.10.0 on."""
    return version >= (2, 10, 0)


@dataclass(frozen=True, slots=True)
class ClusterRole:
    """A server's place in a JetStream cluster: the cluster's name, the port
    its routes listen on, and the other servers' route ports."""

    name: str
    route_port: int
    route_ports: tuple[int, ...]


class NatsServer:
    """One nats-server process with JetStream; `sync` is None (the server's
    default) or a `sync_interval` value such as "always"; `cluster` makes it one
    server of a JetStream cluster (`NatsCluster`)."""

    def __init__(
        self,
        workdir: Path,
        sync: str | None = None,
        binary: str = BINARY,
        *,
        name: str = "laminar-bench",
        cluster: ClusterRole | None = None,
    ) -> None:
        self.workdir = workdir
        self.sync = sync
        self.binary = binary
        self.name = name
        self.cluster = cluster
        self.host = "127.0.0.1"
        self.port = 0
        self._proc: ManagedProcess | None = None
        single = cluster is None
        self.store_dir = workdir / ("jetstream" if single else f"jetstream-{name}")
        self.log_path = workdir / ("nats.log" if single else f"nats-{name}.log")
        self.conf_path = workdir / ("nats.conf" if single else f"nats-{name}.conf")

    def config_text(self) -> str:
        lines = [
            f"listen: {self.host}:{self.port}",
            f'server_name: "{self.name}"',
            "jetstream {",
            f'  store_dir: "{self.store_dir}"',
            "  max_memory_store: 64MB",
        ]
        if self.sync is not None:
            lines.append(f"  sync_interval: {self.sync}")
        lines.append("}")
        if self.cluster is not None:
            routes = ", ".join(f"nats-route://{self.host}:{p}" for p in self.cluster.route_ports)
            lines += [
                "cluster {",
                f'  name: "{self.cluster.name}"',
                f"  listen: {self.host}:{self.cluster.route_port}",
                f"  routes: [{routes}]",
                "}",
            ]
        lines.append("")
        return "\n".join(lines)

    def start(self, timeout_s: float = 20.0) -> str:
        """Start it; the address clients connect to (host:port)."""
        self.launch()
        self.wait_ready(timeout_s)
        return self.address

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def launch(self) -> None:
        """Start the process without waiting (a cluster starts every server first)."""
        binary = shutil.which(self.binary)
        if binary is None:
            raise FileNotFoundError(f"{self.binary} is not installed (make bench installs it)")
        if self.port == 0:
            self.port = free_port(self.host)
        self.conf_path.write_text(self.config_text())
        self._proc = ManagedProcess(
            self.name, [binary, "-c", str(self.conf_path)], self.log_path, cwd=self.workdir
        )
        self._proc.start()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_ready(self, timeout_s: float, marker: str = "Server is ready") -> None:
        """Wait until the log shows `marker` and the client port accepts."""
        if self._proc is None:
            raise RuntimeError("launch() first")
        self._proc.wait_ready(
            lambda: marker in self.log_text() and accepts(self.host, self.port), timeout_s
        )

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (for CPU accounting)."""
        return None if self._proc is None else self._proc.pid

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.stop()

    def log_tail(self) -> str:
        return "" if self._proc is None else self._proc.log_tail()


META_LEADER_MARKER = "metadata leader"
"""Part of what a 2.9 server logs once the cluster's JetStream meta group has a
leader ("JetStream cluster new metadata leader: ...", or "Self is new JetStream
cluster metadata leader"); before that, creating a stream fails with
"JetStream system temporarily unavailable"."""


class NatsCluster:
    """`count` nats-servers routed to each other as one JetStream cluster."""

    def __init__(self, workdir: Path, count: int, sync: str | None = None) -> None:
        host = "127.0.0.1"
        route_ports = tuple(free_port(host) for _ in range(count))
        self.servers = [
            NatsServer(
                workdir,
                sync,
                name=f"nats-{i + 1}",
                cluster=ClusterRole(
                    "laminar-bench",
                    route_ports[i],
                    tuple(p for j, p in enumerate(route_ports) if j != i),
                ),
            )
            for i in range(count)
        ]

    def start(self, timeout_s: float = 60.0) -> str:
        """Start every server; the client URLs (host:port,...) once the cluster's
        JetStream has a meta leader."""
        for server in self.servers:
            server.launch()
        for server in self.servers:
            server.wait_ready(timeout_s)
        for server in self.servers:  # each learns the meta leader (or is it)
            server.wait_ready(timeout_s, marker=META_LEADER_MARKER)
        return ",".join(server.address for server in self.servers)

    def pids(self) -> dict[str, int]:
        return {server.name: pid for server in self.servers if (pid := server.pid)}

    def stop(self) -> None:
        for server in self.servers:
            with contextlib.suppress(Exception):
                server.stop()

    def log_tail(self) -> str:
        return "\n".join(f"--- {s.name}\n{s.log_tail()}" for s in self.servers)
