"""The shared waits and ports do what the suite relies on."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import free_port, retry_on_port_in_use, wait_until, wait_until_async
from tests.support.ports import _reserve
from tests.system.nodes import RunningNode, start_node


def test_wait_until_returns_the_first_truthy_value() -> None:
    answers = iter([None, 0, ValueError("not yet"), "ready"])

    def check() -> object:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert wait_until(check, "ready") == "ready"


def test_a_timeout_names_what_was_awaited_and_the_last_thing_seen() -> None:
    with pytest.raises(AssertionError, match=r"the moon \(last: \[\]\)"):
        wait_until(list, "the moon", timeout_s=0.05)

    def failing() -> None:
        raise ConnectionRefusedError("nobody home")

    with pytest.raises(AssertionError, match="ConnectionRefusedError: nobody home"):
        wait_until(failing, "a node", timeout_s=0.05)
    with pytest.raises(AssertionError, match="a node, seen as down"):
        wait_until(failing, lambda: "a node, seen as down", timeout_s=0.05)


def test_the_async_wait_lets_the_loop_run_meanwhile() -> None:
    async def main() -> int:
        done: list[int] = []
        asyncio.get_running_loop().call_later(0.01, done.append, 7)
        value: int = await wait_until_async(lambda: done and done[0], "the timer")
        return value

    assert asyncio.run(main()) == 7


def test_a_reserved_port_is_not_handed_to_another_process() -> None:
    """Other workers and other runs on the machine honour the reservation."""
    port = free_port()
    reserve = (
        "import sys; from tests.support import ports; print(ports._reserve((int(sys.argv[1]),)))"
    )
    other = subprocess.run(
        [sys.executable, "-c", reserve, str(port)], capture_output=True, text=True, check=True
    )
    assert other.stdout.strip() == "False"
    assert not _reserve((port,))  # nor twice to this process


def test_a_node_that_loses_its_port_is_started_again_on_a_fresh_one(tmp_path: Path) -> None:
    """The race the reservation cannot rule out: something else binds the port
    between `free_port` and the node's bind."""
    taken = free_port()
    attempts: list[int] = []

    def start() -> RunningNode:
        port = taken if not attempts else free_port()
        attempts.append(port)
        return start_node(tmp_path, cores=1, port=port, shard_port_base=0, admin_port=0)

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        with retry_on_port_in_use(start) as node:
            assert node.port == attempts[-1] != taken
    assert len(attempts) == 2


def test_a_start_failing_for_another_reason_is_not_retried(tmp_path: Path) -> None:
    attempts: list[int] = []

    def start() -> RunningNode:
        attempts.append(1)
        return start_node(tmp_path, cores=1, routing="no-such-mode")

    with pytest.raises(RuntimeError):
        retry_on_port_in_use(start)
    assert len(attempts) == 1
