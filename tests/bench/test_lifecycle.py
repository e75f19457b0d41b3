"""Every server the harness starts is stopped, on every exit path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from laminar.bench.config import RunConfig
from laminar.bench.progress import SilentProgress
from laminar.bench.runner import RunPlan, run_once
from laminar.bench.servers.process import ManagedProcess, live_pids
from laminar.bench.targets import Durability, Endpoint, System
from tests.support.processes import interruptible, wait_or_show

ROOT = Path(__file__).resolve().parents[2]


def _gone(pid: int, within_s: float = 15.0) -> bool:
    """True once `pid` no longer runs (a zombie counts as gone)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ", 1)[1][0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def _child(mode: str) -> tuple[subprocess.Popen[str], int, int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.lifecycle_child", mode],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.strip():
        proc.wait(10)
        pytest.fail(f"child did not start its server: {proc.stderr.read() if proc.stderr else ''}")
    server, generator = line.split()
    return proc, int(server), int(generator)


@pytest.mark.parametrize("mode", ["return", "raise", "exit"])
def test_server_stops_when_the_harness_ends(mode: str) -> None:
    proc, server_pid, generator_pid = _child(mode)
    proc.wait(30)
    assert _gone(server_pid), f"server {server_pid} outlived a harness that did {mode!r}"
    assert _gone(generator_pid), f"generator {generator_pid} outlived a harness that did {mode!r}"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL])
def test_server_stops_when_the_harness_is_signalled(signum: int) -> None:
    proc, server_pid, generator_pid = _child("wait")
    os.kill(proc.pid, signum)
    wait_or_show(proc, 30)
    assert _gone(server_pid), f"server {server_pid} outlived signal {signum} to the harness"
    assert _gone(generator_pid), f"generator {generator_pid} outlived signal {signum}"
    if signum != signal.SIGKILL:
        assert proc.returncode != 0


class _SleeperSystem(System):
    """A 'server' that starts fine and an endpoint no client can use, so the
    run breaks right after the server started."""

    name = "sleeper"

    def __init__(self) -> None:
        self.proc: ManagedProcess | None = None

    def start(self, workdir: Path) -> Endpoint:
        self.proc = ManagedProcess(
            "sleeper", [sys.executable, "-c", "import time; time.sleep(300)"], workdir / "log"
        )
        self.proc.start()
        return Endpoint("no-such-client", "127.0.0.1:1")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def durability(self) -> Durability:
        return Durability(False, "none", "a test stand-in")

    def versions(self) -> dict[str, str]:
        return {}


def test_a_failing_run_is_reported_and_its_server_stopped(tmp_path: Path) -> None:
    system = _SleeperSystem()
    plan = RunPlan(RunConfig(duration_s=1, warmup_s=0), tmp_path)
    result = run_once(system, plan, 1, 1, SilentProgress())
    assert result.status == "failed"
    assert "no-such-client" in (result.error or "")
    assert system.proc is not None and system.proc.pid is not None
    assert _gone(system.proc.pid)
    assert system.proc.pid not in live_pids()
