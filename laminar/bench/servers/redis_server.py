"""redis-server with an append-only file, on loopback, in a fresh directory.

`appendfsync always`: Redis 7.0 writes and fsyncs the AOF in `beforeSleep`,
before it writes the replies of that event-loop iteration, so an XADD is
acknowledged after fsync. `appendfsync everysec`: acknowledged after write(2),
fsynced by a background thread about once a second. RDB snapshots are off
(`save ""`) and so are automatic AOF rewrites: neither has a counterpart in the
other systems' write path, and either would land in one run and not another.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from pathlib import Path

from laminar.bench.servers.ports import free_port
from laminar.bench.servers.process import ManagedProcess

BINARY = "redis-server"
APPENDFSYNC = ("always", "everysec")


def redis_version(binary: str = BINARY) -> str | None:
    path = shutil.which(binary)
    if path is None:
        return None
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    match = re.search(r"v=(\S+)", out.stdout)
    return match.group(1) if match else out.stdout.strip()


def _pong(host: str, port: int) -> bool:
    with socket.create_connection((host, port), timeout=0.5) as sock:
        sock.sendall(b"PING\r\n")
        return sock.recv(64).startswith(b"+PONG")


class RedisServer:
    """One redis-server process with AOF persistence set to `appendfsync`."""

    def __init__(self, workdir: Path, appendfsync: str = "always", binary: str = BINARY) -> None:
        if appendfsync not in APPENDFSYNC:
            raise ValueError(f"appendfsync must be one of {', '.join(APPENDFSYNC)}")
        self.workdir = workdir
        self.appendfsync = appendfsync
        self.binary = binary
        self.host = "127.0.0.1"
        self.port = 0
        self._proc: ManagedProcess | None = None

    def config_text(self) -> str:
        return "\n".join(
            [
                f"bind {self.host}",
                f"port {self.port}",
                "daemonize no",
                'logfile ""',
                f'dir "{self.workdir}"',
                'save ""',
                "appendonly yes",
                f"appendfsync {self.appendfsync}",
                "auto-aof-rewrite-percentage 0",
                "",
            ]
        )

    def start(self, timeout_s: float = 20.0) -> str:
        binary = shutil.which(self.binary)
        if binary is None:
            raise FileNotFoundError(f"{self.binary} is not installed (make bench installs it)")
        self.port = free_port(self.host)
        conf = self.workdir / "redis.conf"
        conf.write_text(self.config_text())
        self._proc = ManagedProcess(
            "redis-server", [binary, str(conf)], self.workdir / "redis.log", cwd=self.workdir
        )
        self._proc.start()
        self._proc.wait_ready(lambda: _pong(self.host, self.port), timeout_s)
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
