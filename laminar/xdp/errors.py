"""Errors of the BPF layer.

They split the way the rest of laminar splits them:

- `BpfUnavailable`: this host or process cannot do what was asked (bcc not
  installed, no header tree, no CAP_BPF, a kernel that refuses a program). The
  message names the cause and the way on, so one log line is enough to act.
  `RoutingUnavailable` is the one a forced `--routing` mode raises.
- `BpfSyscallError`: one raw `bpf(2)` call failed; it is an `OSError` carrying
  the errno and the command, and usually turns into `BpfUnavailable` above.
- `XdpAttachError`: the interface refused the classifier or holds a program
  that is not ours.
- `SteeringUsageError`: the caller asked for something impossible (shard 7 of
  4, 65 shards, a cBPF re-registration). A bug in the caller, never the peer's
  or the kernel's fault.
"""

from __future__ import annotations

import errno
import os


class BpfUnavailable(RuntimeError):
    """A BPF facility cannot be used in this process; `cause` says why."""

    def __init__(self, cause: str, errno_: int | None = None) -> None:
        self.cause = cause
        self.errno = errno_
        super().__init__(cause)


class RoutingUnavailable(BpfUnavailable):
    """A forced routing mode cannot be set up here."""

    def __init__(self, mode: str, cause: str, errno_: int | None = None) -> None:
        self.mode = str(mode)
        super().__init__(f"routing mode {self.mode!r} is unavailable: {cause}", errno_)


class BpfSyscallError(OSError):
    """A `bpf(2)` command failed with `errno`."""

    def __init__(self, command: str, err: int, detail: str = "") -> None:
        self.command = command
        message = f"bpf({command}) failed: {os.strerror(err)} ({errno.errorcode.get(err, err)})"
        if detail:
            message += f": {detail}"
        super().__init__(err, message)

    @property
    def is_permission(self) -> bool:
        """True when the kernel refused for lack of privilege (CAP_BPF)."""
        return self.errno in (errno.EPERM, errno.EACCES)


class XdpAttachError(RuntimeError):
    """The XDP classifier could not be attached or detached."""


class SteeringUsageError(ValueError):
    """The caller misused the steering API."""


def permission_hint() -> str:
    """What to do about an EPERM from `bpf(2)`, for error messages."""
    return (
        "bpf(2) needs CAP_BPF (or CAP_SYS_ADMIN) here: "
        "kernel.unprivileged_bpf_disabled is set; run the node as root or grant "
        "CAP_BPF and CAP_NET_ADMIN"
    )
