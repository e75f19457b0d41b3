"""A harness stand-in for the lifecycle tests: start a server and a
load-generator-like process, then leave in the way argv[1] says ("return",
"raise", "exit", or "wait" for a signal). Prints both pids."""

from __future__ import annotations

import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

from laminar.bench.servers.process import ManagedProcess, install_signal_handlers
from laminar.bench.worker import _die_with_parent


def _generator() -> None:
    _die_with_parent()
    time.sleep(300)


def main() -> None:
    mode = sys.argv[1]
    install_signal_handlers()
    workdir = Path(tempfile.mkdtemp(prefix="lifecycle-"))
    server = ManagedProcess(
        "sleeper", [sys.executable, "-c", "import time; time.sleep(300)"], workdir / "log"
    )
    server.start()
    generator = multiprocessing.get_context("spawn").Process(target=_generator, daemon=True)
    generator.start()
    print(server.pid, generator.pid, flush=True)
    if mode == "return":
        return
    if mode == "raise":
        raise RuntimeError("the harness broke")
    if mode == "exit":
        sys.exit(3)
    while True:  # "wait": until a signal ends us
        time.sleep(0.1)


if __name__ == "__main__":
    main()
