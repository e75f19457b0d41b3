"""The Raft settings a replica (re)opens with: what its own log applied wins.

A group's first membership is the placement's (the replicas it names when the
partition is created); moves change it, one committed step at a time, and the
storage records every change the shell applied. A restarted replica must come
back with that recorded membership, never with the placement's guess, which
may name nodes that are no longer (or not yet) members.
"""

from __future__ import annotations

from collections.abc import Sequence

from laminar.raft import RaftConfig
from laminar.replication.raft_storage import SegmentedLogStorage


def replica_config(
    node_id: str,
    storage: SegmentedLogStorage,
    first_voters: Sequence[str],
    first_learners: Sequence[str] = (),
    *,
    replay: bool = False,
    election_ticks: int = 10,
) -> RaftConfig:
    """`node_id`'s settings for the group over `storage`. `first_voters` and
    `first_learners` are the membership of a group whose log records none
    yet. `replay`: deliver every committed entry again (a state machine
    rebuilt from the log, as metadata is); the replica still starts with the
    recorded membership, which its log committed (the changes replayed move
    it back and forth until the replay reaches it again)."""
    commit = storage.initial_state().commit
    recorded = storage.applied_membership()
    return RaftConfig(
        node_id=node_id,
        voters=tuple(first_voters) if recorded is None else recorded.voters,
        learners=tuple(first_learners) if recorded is None else recorded.learners,
        election_ticks=election_ticks,
        heartbeat_ticks=1,
        applied=None if replay else commit,
    )
