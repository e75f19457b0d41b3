"""The membership view: the one thing the rest of laminar reads from membership.

Shards, placement and `laminar status` never look inside the SWIM core; they
receive `MembershipView` values (frozen, so a view can be handed across
processes and kept). `version` grows with every change one agent saw, so a
shard can drop a view older than the one it holds.

Suspect members count as live for placement: a suspicion is a question, not a
verdict, and moving partitions on every suspicion would make placement flap
with the network. Only dead and left members lose their place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from laminar.swim.messages import Member, MemberState


@dataclass(frozen=True, slots=True)
class MemberChange:
    """One member's entry changed: `previous` is None for a member seen for the first time."""

    member: Member
    previous: MemberState | None


@dataclass(frozen=True, slots=True)
class MembershipView:
    """Every member one agent knows, sorted by node id, at one version."""

    self_id: str
    version: int
    members: tuple[Member, ...]

    def get(self, node_id: str) -> Member | None:
        for member in self.members:
            if member.node_id == node_id:
                return member
        return None

    def live(self) -> tuple[Member, ...]:
        """Alive and suspect members (this one included)."""
        return tuple(m for m in self.members if m.state.is_live)

    def weights(self) -> dict[str, float]:
        """Live members' weights: the input of `laminar.placement.replica_nodes`."""
        return {m.node_id: m.weight for m in self.members if m.state.is_live}

    def to_json(self) -> list[dict[str, Any]]:
        """Members as `laminar status --json` prints them."""
        return [
            {
                "node_id": m.node_id,
                "address": m.address,
                "state": m.state.label,
                "incarnation": m.incarnation,
                "weight": m.weight,
            }
            for m in self.members
        ]

    @classmethod
    def from_json(cls, self_id: object, version: object, members: object) -> MembershipView:
        """The view `to_json` described (as the supervisor sends it to shards);
        ValueError when the pieces are not a view."""
        if (
            not isinstance(self_id, str)
            or type(version) is not int
            or not isinstance(members, list)
        ):
            raise ValueError("a view needs a self_id, an int version and a list of members")
        by_label = {s.label: s for s in MemberState}
        parsed = []
        for entry in members:
            try:
                parsed.append(
                    Member(
                        str(entry["node_id"]),
                        str(entry["address"]),
                        by_label[entry["state"]],
                        int(entry["incarnation"]),
                        float(entry["weight"]),
                    )
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"bad member entry {entry!r}: {exc}") from None
        return cls(self_id, version, tuple(parsed))

    def count(self, state: MemberState) -> int:
        return sum(1 for m in self.members if m.state is state)
