"""A laminar node started by the harness on ephemeral ports in a fresh directory.

It runs `laminar-node` from this same interpreter (`python -m
laminar.cli.node`), so the node benchmarked is the code checked out here. With
`--port 0` every port is ephemeral (a cluster's nodes get a fixed node port
chosen free up front, since peers must know it) and the node reports the ones it got in
`<data-dir>/run/node.json` once every shard serves; the harness waits for
that file to name the supervisor's pid and for the node port to accept
connections.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from laminar.bench.servers.ports import accepts
from laminar.bench.servers.process import ManagedProcess, ServerStartError

FLUSH_POLICIES = ("always", "interval", "never")


class LaminarNode:
    """One `laminar-node` supervisor and its shards."""

    def __init__(
        self,
        workdir: Path,
        cores: int,
        flush: str = "always",
        runtime: str = "auto",
        extra_args: tuple[str, ...] = (),
        *,
        port: int = 0,
        name: str = "laminar-node",
        cpus: Sequence[int] | None = None,
    ) -> None:
        if flush not in FLUSH_POLICIES:
            raise ValueError(f"flush must be one of {', '.join(FLUSH_POLICIES)}")
        self.workdir = workdir
        self.cores = cores
        self.flush = flush
        self.runtime = runtime
        self.extra_args = extra_args
        self.port = port
        """The node port; 0: ephemeral (a cluster's nodes need theirs up front)."""
        self.name = name
        self.cpus = cpus
        """The CPUs its shards are pinned among (None: the harness's own)."""
        self.data_dir = workdir / ("laminar-data" if name == "laminar-node" else f"{name}-data")
        self.info: dict[str, Any] = {}
        self._proc: ManagedProcess | None = None

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "laminar.cli.node",
            "--cores",
            str(self.cores),
            "--data-dir",
            str(self.data_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--shard-port-base",
            "0",
            "--admin-port",
            "0",
            "--flush",
            self.flush,
            "--runtime",
            self.runtime,
            *self.extra_args,
        ]

    def start(self, timeout_s: float = 30.0) -> str:
        """Start it; the bootstrap address (host:port of the node port)."""
        self.launch()
        return self.wait_serving(timeout_s)

    def launch(self) -> None:
        """Start the process without waiting for it (a cluster starts all first)."""
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._proc = ManagedProcess(
            self.name, self.argv(), self.log_path, self.workdir, env, self.cpus
        )
        self._proc.start()

    def wait_serving(self, timeout_s: float) -> str:
        """Wait until every shard serves; the node port's host:port."""
        if self._proc is None:
            raise RuntimeError("launch() first")
        node_json = self.data_dir / "run" / "node.json"

        def ready() -> bool:
            if not node_json.exists():
                return False
            try:
                info = json.loads(node_json.read_text())
            except ValueError:
                return False  # being written
            if self._proc is None or info.get("pid") != self._proc.pid:
                return False  # written once every shard serves, naming the supervisor
            host, port = _node_address(info)
            if not accepts(host, port):
                return False
            self.info = info
            return True

        self._proc.wait_ready(ready, timeout_s)
        host, port = _node_address(self.info)
        return f"{host}:{port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (for CPU accounting)."""
        return None if self._proc is None else self._proc.pid

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.stop(grace_s=10.0)

    def signal_group(self, signum: int) -> None:
        """Send `signum` to the supervisor and its shards (SIGKILL: a crash)."""
        if self._proc is not None:
            self._proc.signal_group(signum)

    def log_tail(self) -> str:
        return "" if self._proc is None else self._proc.log_tail()


def _node_address(info: dict[str, Any]) -> tuple[str, int]:
    try:
        return str(info.get("host", "127.0.0.1")), int(info["port"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ServerStartError(f"node.json has no node port: {info!r}") from exc
