"""Rebuilding a replica whose Raft state is lost, from its peers.

A replica's `raft-state.json` holds its term and vote (and where its log
starts after an install, and the membership it applied). When the file is
damaged the node refuses to guess (the replica is offline) and the operator
rebuilds it, with the node stopped (`laminar repair`):

- the damaged directory is kept aside, untouched from then on, as
  `<dir>.damaged-<time>` (delete it once the replica is healthy again);
- a new, empty replica takes its place; started again, the node opens it and
  its group's leader sends it the log (appends, or an install when retention
  removed the start), as it does for any follower that fell behind.

What makes that safe is the vote. Raft's safety needs a node never to vote
twice in one term, and the lost file was the only record of this node's
votes. So the new replica starts in a term `TERM_MARGIN` above the highest
term its old log held, with a vote that names no node: it votes in no term up
to that one. Terms grow by one per election round, so no group runs 2**32
rounds past what its log shows: the node cannot have voted in that term or
above. The cost is one more election: the first time the new replica answers
the leader, its higher term makes the leader step down, and the group elects
again in the next term (a few seconds).

Its log, though, is gone: until it caught up, the records it held are on the
other replicas only. Repair one replica at a time, and only while the
partition has a leader and its other replicas are caught up.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Final

from laminar.log import LogConfig, LogError, SegmentedLog, SyscallBackend
from laminar.raft import HardState, RaftError
from laminar.replication.raft_storage import (
    CONTROL_TERM_BIT,
    REBUILT_VOTE,
    SegmentedLogStorage,
    read_state,
)

TERM_MARGIN: Final = 1 << 32
"""How far above its log's last term a rebuilt replica starts (see the module docstring)."""


class NothingToRepair(Exception):
    """The replica's Raft state reads fine: there is nothing to rebuild."""


@dataclass(frozen=True)
class Rebuilt:
    """What `rebuild` did."""

    directory: str
    kept_at: str
    """Where the damaged replica now is (untouched)."""
    last_term: int
    """The last term the damaged replica's log held (0: none could be read)."""
    term: int
    """The term the rebuilt replica starts in, having voted in none up to it."""


async def rebuild(directory: str, config: LogConfig | None = None) -> Rebuilt:
    """Keep the replica at `directory` aside and put an empty one, in a term it
    cannot have voted in, in its place (the node must be stopped). Raises
    `NothingToRepair` if its Raft state reads fine."""
    backend = SyscallBackend()
    try:
        await read_state(backend, directory)
    except RaftError:
        pass
    else:
        raise NothingToRepair(f"{directory}: its Raft state reads fine; nothing to repair")
    config = config or LogConfig(flush="always")
    last_term = await _last_term(directory, config)
    kept_at = f"{directory}.damaged-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
    await backend.rename(directory, kept_at)
    await backend.sync_dir(os.path.dirname(os.path.abspath(directory)))
    term = last_term + TERM_MARGIN
    storage = await SegmentedLogStorage.open(directory, config, stamped=True)
    try:
        await storage.set_hard_state(HardState(term, REBUILT_VOTE, 0))
    finally:
        await storage.close()
    return Rebuilt(directory, kept_at, last_term, term)


async def _last_term(directory: str, config: LogConfig) -> int:
    """The term of the last record of the log at `directory` (a Raft log's terms
    never decrease along it); 0 if it holds none or cannot be read."""
    try:
        log = await SegmentedLog.open(directory, config)
    except (LogError, OSError):
        return 0
    try:
        if log.highest_index == log.lowest_index:
            return 0
        return log.term_of(log.highest_index - 1) & ~CONTROL_TERM_BIT
    finally:
        await log.close()
