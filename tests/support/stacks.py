"""What a process that will not end is doing: its Python stacks, for the
failure message of a test that waited for it in vain."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PY_SPY = Path(sys.executable).with_name("py-spy")


def stacks_of(pid: int) -> str:
    """`py-spy dump` of `pid`'s threads (every one, idle included), or why not."""
    try:
        done = subprocess.run(
            [str(PY_SPY), "dump", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(no stacks of {pid}: {exc})"
    return done.stdout + done.stderr


def wait_or_show(proc: subprocess.Popen[str], timeout_s: float) -> int:
    """`proc.wait(timeout_s)`; if it does not end in time, AssertionError with
    its stacks (the caller kills it)."""
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"pid {proc.pid} did not end within {timeout_s} s; it was at:\n{stacks_of(proc.pid)}"
        ) from None
