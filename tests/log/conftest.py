"""Fixtures for the log tests: every test runs on each storage backend."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from laminar.log import SimulatedDisk, StorageBackend, SyscallBackend
from laminar.reactor import UringEventLoop, uring_unavailable_reason
from laminar.reactor.storage import UringBackend

BACKENDS = ["syscall", "memory", "uring"]


class LogEnv:
    """A directory and a backend that survive reopening a log."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.backend: StorageBackend = {
            "memory": SimulatedDisk,
            "syscall": SyscallBackend,
            "uring": UringBackend,
        }[kind]()
        self.directory = str(tmp_path / "log")

    def run(self, main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        """Run `main` on the loop the backend needs (io_uring for "uring")."""
        factory = UringEventLoop if self.kind == "uring" else None
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main())


@pytest.fixture(params=BACKENDS)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> LogEnv:
    if request.param == "uring" and (reason := uring_unavailable_reason()) is not None:
        pytest.skip(f"io_uring unavailable here: {reason}")
    return LogEnv(request.param, tmp_path)
