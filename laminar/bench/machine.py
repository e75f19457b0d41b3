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
from typing import Any

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
    """CPU used by a process and its descendants between `start()` and
    `cores()`, in cores (CPU seconds per wall second). Descendants are looked up
    at both ends: a laminar node's shards are children of its supervisor."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self._cpu_s = 0.0
        self._wall_s = 0.0

    def _total(self) -> float:
        import psutil

        if self.pid is None:
            return 0.0
        try:
            root = psutil.Process(self.pid)
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

    def start(self) -> None:
        self._cpu_s = self._total()
        self._wall_s = time.monotonic()

    def cores(self) -> float | None:
        if self.pid is None:
            return None
        wall = time.monotonic() - self._wall_s
        return (self._total() - self._cpu_s) / wall if wall > 0 else None
