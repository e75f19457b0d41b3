"""Facts about the machine and the software, recorded with every result.

Numbers from a benchmark mean little without the box they came from: cores
(and how many this process may use), kernel, CPU model, memory, the load
average when the run started (the machines are shared), the filesystem the
servers wrote to (fsync on tmpfs costs nothing, which would make durability
comparisons meaningless), Python and library versions, and the commit.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Final

LIBRARIES = ("laminar", "nats-py", "redis", "hdrhistogram", "rich", "matplotlib")


def loadavg() -> tuple[float, float, float]:
    one, five, fifteen = os.getloadavg()
    return (one, five, fifteen)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def filesystem_of(path: Path) -> dict[str, str]:
    """Device, mount point and type of the filesystem holding `path`."""
    best: tuple[str, str, str] = ("?", "/", "?")
    resolved = str(path.resolve())
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        mounts = []
    for line in mounts:
        parts = line.split()
        if len(parts) < 3:
            continue
        device, mount, fstype = parts[0], parts[1], parts[2]
        inside = resolved == mount or resolved.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best[1]):
            best = (device, mount, fstype)
    return {"device": best[0], "mount": best[1], "type": best[2]}


def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    dirty = subprocess.run(
        ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        timeout=5,
    )
    return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def library_versions() -> dict[str, str]:
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def machine_facts(workdir: Path) -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "cpu_model": _cpu_model(),
        "mem_total_bytes": _mem_total_bytes(),
        "kernel": platform.release(),
        "os": platform.platform(),
        "loadavg_at_start": list(loadavg()),
        "python": sys.version.split()[0],
        "libraries": library_versions(),
        "laminar_commit": _git_commit(),
        "workdir": str(workdir),
        "workdir_filesystem": filesystem_of(workdir),
    }


class ProcessTreeCpu:
    """CPU used by named processes and their descendants between `start()` and
    `stop()`, in cores (CPU seconds per wall second), per process and in total.
    Descendants are looked up at both ends: a laminar node's shards are
    children of its supervisor. A process that died in between (a node the
    failover probe killed) counts what it used up to its last sample."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)
        self._start: tuple[float, dict[str, float]] | None = None
        self.by_process: dict[str, float] | None = None
        """Set by `stop()`: each named process's cores."""
        self.cpu_s: dict[str, float] | None = None
        """Set by `stop()`: each named process's CPU seconds."""

    @property
    def cores(self) -> float | None:
        """All the processes together (None before `stop()` or with none)."""
        if not self.by_process:
            return None
        return sum(self.by_process.values())

    def _sample(self) -> tuple[float, dict[str, float]]:
        now = time.monotonic()
        return now, {name: tree_cpu_s(pid) for name, pid in self.pids.items()}

    @property
    def started(self) -> bool:
        return self._start is not None

    def start(self) -> None:
        self._start = self._sample()

    def stop(self) -> None:
        if self._start is None or not self.pids or self.by_process is not None:
            return
        wall, cpu = self._sample()
        began, cpu0 = self._start
        elapsed = wall - began
        self.cpu_s = {name: max(0.0, cpu[name] - cpu0[name]) for name in self.pids}
        if elapsed > 0:
            self.by_process = {name: used / elapsed for name, used in self.cpu_s.items()}


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of `pid` and its descendants (0 if gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


FLOOR_SECONDS: Final = 0.5


def fsync_floor_us(directory: Path, seconds: float = FLOOR_SECONDS) -> dict[str, float]:
    """The bare durable-append floor of the disk right now: 1 KiB `pwritev` +
    `fdatasync` appends in `directory` for `seconds`; p50 and p99 in
    microseconds. This VM's fdatasync latency flips between ~0.1 ms and 4 ms
    within minutes (PLATFORM.md), so every run records the floor it ran on."""
    path = directory / "fsync-floor.tmp"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    latencies: list[float] = []
    try:
        block = [os.urandom(1024)]
        offset = 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            os.pwritev(fd, block, offset)
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - t0)
            offset += 1024
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    latencies.sort()
    n = len(latencies)
    return {
        "p50_us": latencies[n // 2] * 1e6,
        "p99_us": latencies[min(n - 1, int(n * 0.99))] * 1e6,
        "samples": float(n),
    }
