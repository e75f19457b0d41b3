"""Fixtures for the log tests: every test runs on each storage backend."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from laminar.log import MemoryBackend, StorageBackend, SyscallBackend

BACKENDS = ["syscall", "memory"]


class LogEnv:
    """A directory and a backend that survive reopening a log."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.backend: StorageBackend = MemoryBackend() if kind == "memory" else SyscallBackend()
        self.directory = str(tmp_path / "log")

    def run(self, main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        return asyncio.run(main())


@pytest.fixture(params=BACKENDS)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> LogEnv:
    return LogEnv(request.param, tmp_path)
