"""Errors of the io_uring layer.

The one error callers act on is `IoUringUnavailable`: the kernel, its settings or
the process limits refuse a ring. Its message names the cause and the way on
(the stock asyncio loop, `runtime="asyncio"`), so a log line is enough to act.
"""

from __future__ import annotations

import errno
import os

FALLBACK_HINT = 'run on the stock asyncio event loop instead (runtime="asyncio")'


class IoUringUnavailable(RuntimeError):
    """io_uring cannot be used in this process; `cause` says why."""

    def __init__(self, cause: str, errno_: int | None = None) -> None:
        self.cause = cause
        self.errno = errno_
        super().__init__(f"io_uring is unavailable: {cause}; {FALLBACK_HINT}")


def unavailable_from_errno(err: int, entries: int) -> IoUringUnavailable:
    """Explain why io_uring_setup failed, in terms a person can act on."""
    if err == errno.ENOSYS:
        cause = "the kernel has no io_uring (ENOSYS)"
    elif err == errno.EPERM:
        cause = _disabled_cause() or "io_uring_setup was refused (EPERM: seccomp or sysctl policy)"
    elif err == errno.ENOMEM:
        cause = (
            f"not enough locked memory for a {entries}-entry ring (ENOMEM; "
            "raise RLIMIT_MEMLOCK or use fewer entries)"
        )
    elif err == errno.EINVAL:
        cause = "the kernel rejected the ring parameters (EINVAL: kernel too old?)"
    else:
        cause = f"io_uring_setup failed: {os.strerror(err)} (errno {err})"
    return IoUringUnavailable(cause, err)


def _disabled_cause() -> str | None:
    try:
        with open("/proc/sys/kernel/io_uring_disabled") as f:
            value = f.read().strip()
    except OSError:
        return None
    if value == "2":
        return "io_uring is disabled by the sysctl kernel.io_uring_disabled=2"
    if value == "1":
        return (
            "io_uring is restricted by the sysctl kernel.io_uring_disabled=1 "
            "(only members of kernel.io_uring_group may use it)"
        )
    return None
