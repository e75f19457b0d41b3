"""`laminar repair REPLICA_DIR`: rebuild a replica whose Raft state is damaged.

Run it on the node's machine with the node stopped, on the directory that
`/health` or `laminar status` names for the offline replica
(`DATA_DIR/partitions/TOPIC_ID-PARTITION`). The damaged replica is kept aside
as `REPLICA_DIR.damaged-TIME`; an empty one takes its place, in a term it
cannot have voted in, and catches up from its peers once the node runs again
(README: Repairing a replica). Repair one replica of a partition at a time,
while the partition has a leader and its other replicas are caught up.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

from laminar.cli.common import CommandError, Exit, UsageError
from laminar.cli.output import print_json, table
from laminar.replication.repair import NothingToRepair, Rebuilt, rebuild

_REPLICA_DIR = re.compile(r"\d+-\d+")


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "repair",
        parents=[common],
        help="rebuild a replica whose Raft state is damaged (node stopped)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("replica_dir", metavar="REPLICA_DIR", help="DATA_DIR/partitions/T-P")
    parser.set_defaults(run_async=repair)


async def repair(args: argparse.Namespace) -> int:
    directory = os.path.normpath(args.replica_dir)
    partitions = os.path.dirname(os.path.abspath(directory))
    if not (
        _REPLICA_DIR.fullmatch(os.path.basename(directory))
        and os.path.basename(partitions) == "partitions"
        and os.path.isdir(directory)
    ):
        raise UsageError(
            f"{args.replica_dir} is not a replica directory "
            "(DATA_DIR/partitions/TOPIC_ID-PARTITION)"
        )
    with _node_stopped(os.path.join(os.path.dirname(partitions), "run", "lock")) as holder:
        if holder is not None:
            raise _refused(f"the node is running (pid {holder}): stop it first")
        try:
            rebuilt = await rebuild(directory)
        except NothingToRepair as exc:
            raise _refused(str(exc)) from None
    _print(rebuilt, args.json)
    return Exit.OK


@contextlib.contextmanager
def _node_stopped(lock_path: str) -> Iterator[str | None]:
    """Hold the data directory's lock (a node cannot start meanwhile); yields
    None, or the pid of the node that holds it."""
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        yield None  # no node ever ran on this data directory
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            return
        yield None
    finally:
        os.close(fd)


def _refused(message: str) -> CommandError:
    return CommandError(message, Exit.SERVER_ERROR, "REFUSED")


def _print(rebuilt: Rebuilt, as_json: bool) -> None:
    if as_json:
        print_json(
            {
                "replica": rebuilt.directory,
                "kept_at": rebuilt.kept_at,
                "log_last_term": rebuilt.last_term,
                "term": rebuilt.term,
            }
        )
        return
    print(
        table(
            ("REPLICA", "DAMAGED COPY KEPT AT", "LOG'S LAST TERM", "RESTARTS IN TERM"),
            [(rebuilt.directory, rebuilt.kept_at, rebuilt.last_term, rebuilt.term)],
        )
    )
    print(
        "start the node: the replica catches up from its peers (its group elects once "
        "more); delete the damaged copy once `laminar status` shows it healthy",
        file=sys.stderr,
    )
