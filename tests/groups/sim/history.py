"""What the simulation observed that checkers share, and their one error."""

from __future__ import annotations

from dataclasses import dataclass, field

from laminar.groups.messages import Position, TopicPartition


class Violation(AssertionError):
    """A checker found a broken safety or liveness property."""

    def __init__(self, checker: str, message: str) -> None:
        super().__init__(f"{checker}: {message}")
        self.checker = checker
        self.message = message


@dataclass
class History:
    positions: dict[str, dict[TopicPartition, Position]] = field(default_factory=dict)
    """The committed (durable) positions, as the log committed them."""
    commits_accepted: int = 0
    commits_fenced: int = 0

    def position_committed(self, group: str, tp: TopicPartition, value: Position) -> None:
        before = self.positions.setdefault(group, {}).get(tp)
        if before is not None and value.index < before.index:
            raise Violation(
                "monotonic positions",
                f"{group} {tp} went back from {before.index} to {value.index} ({value})",
            )
        self.positions[group][tp] = value
