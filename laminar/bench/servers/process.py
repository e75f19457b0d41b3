"""Server processes the harness starts, and the guarantee that they stop.

Every server is started through `ManagedProcess`, which registers it until it
is stopped. Exit paths and what covers them:

- normal return and exceptions: the runner stops its server in `finally`;
- `sys.exit`, an uncaught exception, the end of the interpreter: `atexit`;
- SIGTERM, SIGHUP (and SIGINT, which Python turns into KeyboardInterrupt):
  `install_signal_handlers` turns them into `SystemExit`, so the `finally`
  blocks and `atexit` run;
- SIGKILL of the harness, which runs no code at all: the server is started
  under `setpriv --pdeathsig KILL`, so the kernel kills it when the harness
  dies.

A server runs in its own session (process group); stopping sends SIGTERM to
the server, waits, then SIGKILLs the whole group, which also takes children
such as laminar's shard processes.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from types import FrameType

_live: dict[int, ManagedProcess] = {}
_live_lock = threading.Lock()
_installed = False


def _await_exec(pid: int, launcher: str, timeout_s: float = 5.0) -> None:
    """Wait until `pid` runs past `launcher` (its command line changed): only
    then has setpriv set the death signal, so a harness killed from here on
    takes the server with it (killed sooner, the server would outlive it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().split(b"\0", 1)[0] != launcher.encode():
                    return
        except FileNotFoundError:
            return  # gone already: `wait_ready` reports it
        time.sleep(0.001)


class ServerStartError(RuntimeError):
    """A server did not come up; the message carries the end of its log."""


class ManagedProcess:
    """One server process with its log file; registered while it may be alive."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        cpus: Collection[int] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.cwd = cwd
        self.env = env
        self.cpus = None if cpus is None else frozenset(cpus)
        """The CPUs the process (and what it starts) may run on; None: any."""
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def start(self) -> None:
        _install_atexit()
        argv = self.argv
        setpriv = shutil.which("setpriv")
        if setpriv is not None:
            argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env=self.env,
                start_new_session=True,
                preexec_fn=None if self.cpus is None else self._restrict,
            )
        with _live_lock:
            _live[self._proc.pid] = self
        if setpriv is not None:
            _await_exec(self._proc.pid, setpriv)

    def _restrict(self) -> None:
        """In the child, before exec: the affinity its own children inherit."""
        assert self.cpus is not None
        os.sched_setaffinity(0, self.cpus)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def wait_ready(self, probe: Callable[[], bool], timeout_s: float) -> None:
        """Poll `probe` until it is true; fail early if the process exits."""
        deadline = time.monotonic() + timeout_s
        while True:
            if not self.alive():
                code = None if self._proc is None else self._proc.returncode
                raise ServerStartError(
                    f"{self.name} exited during start-up (code {code}); "
                    f"its log ends:\n{self.log_tail()}"
                )
            with contextlib.suppress(OSError):
                if probe():
                    return
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"{self.name} not ready after {timeout_s:g} s; its log ends:\n{self.log_tail()}"
                )
            time.sleep(0.02)

    def signal_group(self, signum: int) -> None:
        """Send `signum` to the server's whole process group (it may be gone)."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signum)

    def stop(self, grace_s: float = 5.0) -> int | None:
        """SIGTERM, wait up to `grace_s`, then SIGKILL the group; the exit code."""
        proc = self._proc
        if proc is None:
            return None
        try:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(grace_s)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # stragglers in its group too
            proc.wait()
            return proc.returncode
        finally:
            with _live_lock:
                _live.pop(proc.pid, None)

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def live_pids() -> list[int]:
    """Pids of servers started and not yet stopped (for tests)."""
    with _live_lock:
        return list(_live)


def stop_all() -> None:
    """Stop every registered server (atexit, signal handlers)."""
    with _live_lock:
        procs = list(_live.values())
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.stop(grace_s=2.0)


def _install_atexit() -> None:
    global _installed
    if not _installed:
        atexit.register(stop_all)
        _installed = True


def _exit_on_signal(signum: int, _frame: FrameType | None) -> None:
    # Restore the default first: a second signal while stopping ends the process.
    signal.signal(signum, signal.SIG_DFL)
    raise SystemExit(128 + signum)


def install_signal_handlers() -> None:
    """Make SIGTERM and SIGHUP unwind like an exception (main thread only)."""
    _install_atexit()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _exit_on_signal)
