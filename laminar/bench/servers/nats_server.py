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

import re
import shutil
import subprocess
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


class NatsServer:
    """One nats-server process with JetStream; `sync` is None (the server's
    default) or a `sync_interval` value such as "always"."""

    def __init__(self, workdir: Path, sync: str | None = None, binary: str = BINARY) -> None:
        self.workdir = workdir
        self.sync = sync
        self.binary = binary
        self.host = "127.0.0.1"
        self.port = 0
        self._proc: ManagedProcess | None = None

    def config_text(self) -> str:
        store = self.workdir / "jetstream"
        lines = [
            f"listen: {self.host}:{self.port}",
            'server_name: "laminar-bench"',
            "jetstream {",
            f'  store_dir: "{store}"',
            "  max_memory_store: 64MB",
        ]
        if self.sync is not None:
            lines.append(f"  sync_interval: {self.sync}")
        lines += ["}", ""]
        return "\n".join(lines)

    def start(self, timeout_s: float = 20.0) -> str:
        """Start it; the address clients connect to (host:port)."""
        binary = shutil.which(self.binary)
        if binary is None:
            raise FileNotFoundError(f"{self.binary} is not installed (make bench installs it)")
        self.port = free_port(self.host)
        conf = self.workdir / "nats.conf"
        conf.write_text(self.config_text())
        self._proc = ManagedProcess(
            "nats-server", [binary, "-c", str(conf)], self.workdir / "nats.log", cwd=self.workdir
        )
        self._proc.start()
        log = self.workdir / "nats.log"
        self._proc.wait_ready(
            lambda: (
                "Server is ready" in log.read_text(errors="replace")
                and accepts(self.host, self.port)
            ),
            timeout_s,
        )
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (for CPU accounting)."""
        return None if self._proc is None else self._proc.pid

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.stop()

    def log_tail(self) -> str:
        return "" if self._proc is None else self._proc.log_tail()
