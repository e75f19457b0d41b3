"""The log's own API tests, run again on UringEventLoop with UringBackend.

The log's tests are parametrized over the backends their own conftest knows;
this module re-collects them with an `env` whose backend is io_uring, without
touching the log's files. (Once the log's conftest lists a "uring" backend
itself, this module can go.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from laminar.reactor import UringEventLoop
from laminar.reactor.storage import UringBackend
from tests.log.conftest import LogEnv
from tests.log.test_log_api import *  # noqa: F403
from tests.log.test_retention import *  # noqa: F403

from .conftest import URING_REASON


class UringLogEnv(LogEnv):
    """The log tests' environment, on the io_uring loop and backend."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__("syscall", tmp_path)
        self.kind = "uring"
        self.backend = UringBackend()

    def run(self, main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        with asyncio.Runner(loop_factory=UringEventLoop) as runner:
            return runner.run(main())


@pytest.fixture
def env(tmp_path: Path) -> LogEnv:
    if URING_REASON is not None:
        pytest.skip(f"io_uring unavailable: {URING_REASON}")
    return UringLogEnv(tmp_path)
