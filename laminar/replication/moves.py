"""Between the placement controller and a partition's Raft core.

The controller (`laminar.replication.controller`) reads groups as `GroupStatus`
values and answers with `Step`s; a Raft core reports `Status` and takes
membership changes through its methods. These two functions translate, so the
shell that runs the controller holds no logic of its own. Only a leader's
status says where its followers are, so only a leader's group can move.
`drive` is one round of that shell: read every led group, plan, apply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from laminar.raft import (
    LEADER,
    ConfigChangeRefused,
    NotLeader,
    ProposalDropped,
    RaftCore,
    Status,
)
from laminar.replication.controller import (
    Action,
    GroupStatus,
    NodeStatus,
    PlacementPolicy,
    Plan,
    Step,
    plan,
)

Refusal = ConfigChangeRefused | NotLeader | ProposalDropped


def group_status(pid: int, status: Status) -> GroupStatus | None:
    """What the controller needs of `pid`'s group from its core's status;
    None unless the core leads (only a leader knows its followers' matches)."""
    if status.role != LEADER:
        return None
    return GroupStatus(
        pid,
        status.voters,
        status.learners,
        status.node_id,
        status.last_index,
        # A member that never acknowledged an append has no match: 0 is where
        # the tracker starts, not something the node confirmed (it may not have
        # opened the group yet, and promoting it would make a voter of nothing).
        {node: progress.match for node, progress in status.progress.items() if progress.match},
        change_pending=status.config_pending or status.transferee is not None,
    )


def apply_step(core: RaftCore, step: Step) -> None:
    """Start `step` on the leader `core`; raises the core's refusal
    (NotLeader, ConfigChangeRefused, ProposalDropped) when it cannot now."""
    if step.action is Action.ADD_LEARNER:
        core.add_learner(step.node)
    elif step.action is Action.PROMOTE_LEARNER:
        core.promote_learner(step.node)
    elif step.action is Action.TRANSFER_LEADERSHIP:
        core.transfer_leadership(step.node)
    else:
        core.remove_node(step.node)


def drive(
    cores: Mapping[int, RaftCore],
    nodes: Iterable[NodeStatus],
    policy: PlacementPolicy,
    now_ms: int,
) -> tuple[Plan, list[tuple[Step, Refusal]]]:
    """Plan over the groups these `cores` lead and start every step; the plan,
    and the steps a core refused (the next round tries again)."""
    statuses = [s for pid, core in cores.items() if (s := group_status(pid, core.status()))]
    result = plan(nodes, statuses, policy, now_ms)
    refused: list[tuple[Step, Refusal]] = []
    for step in result.steps:
        try:
            apply_step(cores[step.pid], step)
        except (ConfigChangeRefused, NotLeader, ProposalDropped) as exc:
            refused.append((step, exc))
    return result, refused
