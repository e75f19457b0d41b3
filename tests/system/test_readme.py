"""The README's examples run as written, in order, against a fresh node.

A new user types them one after the other: the shell lines of "Trying it",
the Python of "From Python" (one interpreter, as in `python -m asyncio`, so a
block may use what an earlier one made), the shell part of "Spark", the
atomic write, the consumer groups and the Kafka protocol. Spark's own
queries and the cluster sections need more than one node and a Spark
session; their parts are tested in tests/spark and tests/cluster. The
README's addresses (127.0.0.1:7070, and 127.0.0.1:9092 for Kafka) become the
test node's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from laminar.client import Client
from tests.support import wait_until
from tests.support.processes import interruptible, wait_or_show

from .nodes import RunningNode

REPO = Path(__file__).resolve().parents[2]
README_ADDRESS = "127.0.0.1:7070"
README_KAFKA_ADDRESS = "127.0.0.1:9092"

RUN = {
    "Trying it": {"sh"},
    "From Python": {"python"},
    "Spark": {"sh"},
    "Atomic writes from Python": {"python"},
    "Consumer groups": {"sh", "python"},
    "The Kafka protocol": {"sh", "python"},
}
"""The sections whose examples run here, and which of their blocks."""

PYTHON_RUNNER = """
import ast, asyncio, json, sys

async def main():
    namespace = {"__name__": "__main__"}
    for number, source in enumerate(json.load(sys.stdin), 1):
        code = compile(source, f"<README block {number}>", "exec",
                       flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, namespace)
        if asyncio.iscoroutine(result):
            await result

asyncio.run(main())
"""
"""Runs blocks one after the other in one namespace, top-level await allowed
(what `python -m asyncio` does at its prompt)."""


@dataclass(frozen=True)
class Example:
    section: str
    language: str
    source: str


def examples(text: str) -> list[Example]:
    """The README's fenced blocks, in order, with their section and language."""
    found = []
    section = ""
    for match in re.finditer(r"^## ([^\n]+)$|^```(\w+)\n(.*?)^```$", text, re.M | re.S):
        if match.group(1):
            section = match.group(1).strip()
        else:
            found.append(Example(section, match.group(2), match.group(3)))
    return found


def test_the_readme_examples_run_in_order(node: RunningNode, tmp_path: Path) -> None:
    chosen = [
        e
        for e in examples((REPO / "README.md").read_text())
        if e.language in RUN.get(e.section, ())
    ]
    assert [(e.section, e.language) for e in chosen] == [
        ("Trying it", "sh"),
        ("Trying it", "sh"),
        ("From Python", "python"),
        ("From Python", "python"),
        ("From Python", "python"),
        ("From Python", "python"),
        ("Spark", "sh"),
        ("Atomic writes from Python", "python"),
        ("Consumer groups", "sh"),
        ("Consumer groups", "python"),
        ("The Kafka protocol", "sh"),
        ("The Kafka protocol", "python"),
    ]
    env = {**os.environ, "LAMINAR_BOOTSTRAP": node.bootstrap}
    i = 0
    while i < len(chosen):
        if chosen[i].language == "sh":
            for line in chosen[i].source.splitlines():
                line = line.replace(README_KAFKA_ADDRESS, node.kafka_bootstrap)
                _run_shell_line(line, env, node.bootstrap)
            i += 1
            continue
        section = [e.source for e in chosen[i:] if e.section == chosen[i].section]
        _run_python(section, node, tmp_path)
        i += len(section)


def _run_shell_line(line: str, env: dict[str, str], bootstrap: str, cwd: Path = REPO) -> None:
    if not line.strip():
        return
    if "--follow" not in line:
        done = subprocess.run(
            ["bash", "-c", f"set -o pipefail; {line}"],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, f"{line}\n{done.stderr}"
        return
    # `consume --follow` runs until Ctrl-C: see it print a new record, then stop it.
    follower = subprocess.Popen(
        ["bash", "-c", f"exec {line}"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    assert follower.stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(follower.stdout or ()))
    reader.start()
    try:
        with Client(bootstrap) as client:

            def printed() -> bool:  # it starts at the end: produce until it prints
                if not lines:
                    client.send("events", [b"followed"])
                return bool(lines)

            wait_until(printed, "the follower to print a new record")
        follower.send_signal(signal.SIGINT)
        assert wait_or_show(follower, 30) == 0
    finally:
        follower.kill()
        reader.join(10)
    assert lines[0] == "followed\n"


def _run_python(blocks: list[str], node: RunningNode, cwd: Path) -> None:
    sources = [
        block.replace(README_ADDRESS, node.bootstrap).replace(
            README_KAFKA_ADDRESS, node.kafka_bootstrap
        )
        for block in blocks
    ]
    done = subprocess.run(
        [sys.executable, "-c", PYTHON_RUNNER],
        input=json.dumps(sources),
        cwd=cwd,  # the storage example writes data/events-0 here
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{blocks}\n{done.stderr}"
