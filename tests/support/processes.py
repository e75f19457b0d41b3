"""Child processes a test stops with a signal: started so that Ctrl-C
reaches them (`interruptible`), and, when one will not end, what it was
doing (its Python stacks) in the failure message.

A shell starts a background job with SIGINT ignored, and an ignored signal
stays ignored across fork and exec: Python then installs no KeyboardInterrupt
handler, so a suite started as `make test &` would see every child ignore
the SIGINT a test sends it (seen this stop: `consume --follow` and the bench
harness "hung" in two full runs).
"""

from __future__ import annotations

import signal
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


def interruptible() -> None:
    """`preexec_fn` for a child a test will SIGINT: SIGINT as a terminal's
    Ctrl-C finds it (its default), whatever the test process inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
