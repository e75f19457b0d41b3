"""Entry point of one shard process: `python -m laminar.shards.shard_main ...`.

Started by the supervisor with `subprocess.Popen` (not forked from its running
loop), inheriting its listening sockets, its control socket and any steering
descriptors through `pass_fds`. The very first thing it does is pin itself to
its core; then it arranges to die with the supervisor (PR_SET_PDEATHSIG), so a
killed node never leaves orphan shards holding its ports, and only then
imports the rest of laminar and runs the shard on the chosen event loop.

Exit codes: 0 after a drain; 3 for a failure before serving (the supervisor
reports it and stops the node if it happens at start-up); anything else is a
crash, and the supervisor restarts the shard.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
from typing import Any

EXIT_STARTUP_FAILED = 3
_PR_SET_PDEATHSIG = 1


def _pin(shard_id: int) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if cpus:
        os.sched_setaffinity(0, {cpus[shard_id % len(cpus)]})


def _die_with_parent(parent_pid: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the supervisor died before prctl took effect
        os._exit(EXIT_STARTUP_FAILED)


def _raise_fd_limit() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="laminar.shards.shard_main")
    p.add_argument("--shard-id", type=int, required=True)
    p.add_argument("--parent-pid", type=int, required=True)
    p.add_argument("--config", required=True, help="NodeConfig as JSON")
    p.add_argument("--fds", required=True, help="listening socket fds as JSON")
    p.add_argument("--control-fd", type=int, required=True)
    p.add_argument("--runtime", choices=("uring", "asyncio"), required=True)
    p.add_argument("--node-port", type=int, required=True)
    p.add_argument("--shard-ports", required=True, help="comma-separated, in shard order")
    p.add_argument(
        "--kafka-ports", default="", help="comma-separated, in shard order (empty: no Kafka door)"
    )
    p.add_argument("--admin-port", type=int, default=None, help="the node's admin endpoint")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    _pin(args.shard_id)
    _die_with_parent(args.parent_pid)
    _raise_fd_limit()
    from laminar.memory import tune_allocator

    tune_allocator()  # a fetch reads MiB-sized store buffers: see laminar.memory

    import logging
    import socket

    from laminar.channels.sockets import ShardSockets
    from laminar.reactor import run
    from laminar.shards.config import NodeConfig
    from laminar.shards.shard import Shard

    config = NodeConfig.from_json(args.config)
    logging.basicConfig(
        level=config.log_level.upper(),
        format=f"%(asctime)s shard-{args.shard_id} %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    log = logging.getLogger("laminar.shards")
    try:
        sockets = ShardSockets.from_fds(json.loads(args.fds))
        control = socket.socket(fileno=args.control_fd)
        control.setblocking(False)
        routing_mode = _routing_mode(config.extra.get("steering", {}))
        shard = Shard(
            config,
            args.shard_id,
            sockets,
            control,
            runtime=args.runtime,
            routing_mode=routing_mode,
            node_port=args.node_port,
            shard_ports=[int(p) for p in args.shard_ports.split(",")],
            kafka_ports=[int(p) for p in args.kafka_ports.split(",") if p],
            admin_port=args.admin_port,
        )
    except Exception as exc:
        log.error("shard %d cannot start: %s", args.shard_id, exc)
        return EXIT_STARTUP_FAILED
    return run(shard.run(), runtime=args.runtime)


def _routing_mode(settings: dict[str, Any]) -> str:
    """The node port's steering mode the supervisor chose (its settings)."""
    mode = settings.get("mode", "userspace")
    return mode if isinstance(mode, str) else "userspace"


if __name__ == "__main__":
    sys.exit(main())
