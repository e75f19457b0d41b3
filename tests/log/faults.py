"""Fault injection for the three storage backends, behind one small interface.

- simulated disk: its own `Fault` rules;
- syscalls: `os.pwritev` / `os.pwrite` / `os.fdatasync` / `os.unlink` wrapped for
  the test's duration;
- io_uring: the loop's ring swapped for a `FaultyRing`, which rewrites the
  completions of WRITEV / FSYNC / UNLINKAT entries (the kernel did the real
  work; the log sees the error, exactly as when the device reports one). A
  write it reports short it also makes short: the bytes it does not report
  are zeroed in the file, so only a backend that finishes the write keeps
  them.

A plan fails matching operations after the first `after` (`times` of them)
with `error`. `short` makes a write short instead: on the real backends it
reports half its bytes written (the backend must finish the write); on the
simulated disk half lands and then the error is raised (out of space midway).
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pytest

from laminar.iouring import Ring, abi
from laminar.log import Fault, SimulatedDisk, StorageBackend

Op = Literal["write", "sync", "unlink"]
_OPCODES = {"write": abi.OP_WRITEV, "sync": abi.OP_FSYNC, "unlink": abi.OP_UNLINKAT}


@dataclass
class Plan:
    op: Op
    error: int = errno.EIO
    after: int = 0
    times: int = 1
    short: bool = False
    path_contains: str = ""
    hits: int = 0

    def fires(self) -> bool:
        """Count one matching operation; should it fail (or be short)?"""
        self.hits += 1
        return self.after < self.hits <= self.after + self.times


class FaultyRing(Ring):
    """A ring whose completions can be rewritten by a `Plan` (see module docs)."""

    plans: list[Plan]
    opcodes: dict[int, int]
    positions: dict[int, tuple[int, int]]  # a write's (fd, offset)

    def prep(self, opcode: int, *args: Any, **kwargs: Any) -> int:
        ud = super().prep(opcode, *args, **kwargs)
        self.opcodes[ud] = opcode
        if opcode == abi.OP_WRITEV:
            self.positions[ud] = (args[0], args[3])
        return ud

    def reap(self) -> list[tuple[Any, int, int]]:
        # Completions carry tokens, not user_data: map through the op table first.
        by_token = {id(entry[0]): ud for ud, entry in self._ops.items() if entry[0] is not None}
        out = super().reap()
        if not self.plans:
            return out
        rewritten = []
        for token, res, flags in out:
            ud = by_token.get(id(token))
            opcode = self.opcodes.pop(ud, None) if ud is not None else None
            position = self.positions.pop(ud, None) if ud is not None else None
            for plan in self.plans:
                if opcode == _OPCODES[plan.op] and res >= 0 and plan.fires():
                    if plan.short and position is not None:
                        fd, offset = position
                        os.pwrite(fd, bytes(res - res // 2), offset + res // 2)
                    res = res // 2 if plan.short else -plan.error
            rewritten.append((token, res, flags))
        return rewritten


def install_ring_faults(*plans: Plan) -> None:
    """Make the running UringEventLoop's ring inject `plans` (none: stop)."""
    ring = asyncio.get_running_loop()._ring  # type: ignore[attr-defined]
    if not isinstance(ring, FaultyRing):
        ring.__class__ = FaultyRing
        ring.opcodes = {}
        ring.positions = {}
    ring.plans = list(plans)


def install_syscall_faults(monkeypatch: pytest.MonkeyPatch, plan: Plan) -> None:
    """Wrap the syscalls the syscall backend makes (undone when the test ends)."""

    def failing(real: Callable[..., Any], op: Op) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            if plan.op == op and plan.fires():
                if plan.short and op == "write":
                    fd, buffers, offset = args
                    data = b"".join(buffers)[: max(1, sum(map(len, buffers)) // 2)]
                    return os.pwrite(fd, data, offset)
                raise OSError(plan.error, os.strerror(plan.error))
            return real(*args)

        return call

    monkeypatch.setattr(os, "pwritev", failing(os.pwritev, "write"))
    monkeypatch.setattr(os, "fdatasync", failing(os.fdatasync, "sync"))
    monkeypatch.setattr(os, "unlink", failing(os.unlink, "unlink"))


def inject(kind: str, backend: StorageBackend, plan: Plan, monkeypatch: pytest.MonkeyPatch) -> None:
    """Start injecting `plan` on the backend of kind `kind` (call inside the loop)."""
    if kind == "memory":
        assert isinstance(backend, SimulatedDisk)
        op = {"write": "write", "sync": "sync", "unlink": "unlink"}[plan.op]
        backend.inject(
            Fault(
                op,  # type: ignore[arg-type]
                error=plan.error,
                after=plan.after,
                times=plan.times,
                short=plan.short,
                path_contains=plan.path_contains,
            )
        )
    elif kind == "uring":
        install_ring_faults(plan)
    else:
        install_syscall_faults(monkeypatch, plan)
