"""Raft for one partition replica set: a sans-IO core and its storage seam.

```python
core = RaftCore(RaftConfig(node_id="n1", voters=("n1", "n2", "n3")), MemoryStorage(),
                random.Random(seed))
core.tick(); core.step(msg); index = core.propose(b"payload")
if core.has_ready():
    rd = core.ready()      # send rd.messages_before_persist(), persist rd.entries then
    ...                    # rd.hard_state, send rd.messages_after_persist(),
    ...                    # apply rd.committed, then:
    core.advance(rd)
```

Modules: `messages` (Entry, HardState, Message), `ready` (Ready, Status),
`config` (RaftConfig, Membership), `storage` (RaftStorage, MemoryStorage),
`log` (the core's view of its log), `progress` (per-follower flow control and
quorums), `readindex` (linearizable reads), `core` (roles, elections, the
follower side, membership, transfer, quiescence), `leader` (the leader's
side: appends, installs, commitment, heartbeats). Nothing here does I/O or
imports outside this package: the storage adapter over the segmented log is
the shell's (`laminar.replication.raft_storage`). See docs/architecture.md.
"""

from .config import Membership, RaftConfig
from .core import CANDIDATE, FOLLOWER, LEADER, PRE_CANDIDATE, RaftCore
from .errors import (
    ConfigChangeRefused,
    EntriesUnavailable,
    NotLeader,
    ProposalDropped,
    RaftError,
    ReadyOutstanding,
)
from .messages import (
    ANCHOR,
    CONFIG,
    HEARTBEAT_KINDS,
    NOOP,
    NORMAL,
    Anomaly,
    Entry,
    HardState,
    Message,
    ReadState,
)
from .ready import FollowerProgress, Ready, Status
from .storage import MemoryStorage, RaftStorage

__all__ = [
    "ANCHOR",
    "CANDIDATE",
    "CONFIG",
    "FOLLOWER",
    "HEARTBEAT_KINDS",
    "LEADER",
    "NOOP",
    "NORMAL",
    "PRE_CANDIDATE",
    "Anomaly",
    "ConfigChangeRefused",
    "EntriesUnavailable",
    "Entry",
    "FollowerProgress",
    "HardState",
    "Membership",
    "MemoryStorage",
    "Message",
    "NotLeader",
    "ProposalDropped",
    "RaftConfig",
    "RaftCore",
    "RaftError",
    "RaftStorage",
    "ReadState",
    "Ready",
    "ReadyOutstanding",
    "Status",
]
