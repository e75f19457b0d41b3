"""What the simulation observed that checkers share: committed entries, acks."""

from __future__ import annotations

from dataclasses import dataclass, field

from laminar.raft import CONFIG, Entry


class Violation(AssertionError):
    """A checker found a broken safety or liveness property."""

    def __init__(self, checker: str, message: str) -> None:
        super().__init__(f"{checker}: {message}")
        self.checker = checker


@dataclass
class History:
    committed: dict[int, Entry] = field(default_factory=dict)  # applied by some node
    max_committed: int = 0
    acked: dict[bytes, Entry] = field(default_factory=dict)  # client writes acknowledged
    acked_max_index: int = 0  # the highest index acknowledged to a client so far
    configs: list[Entry] = field(default_factory=list)  # committed membership changes, in order

    @property
    def latest_config(self) -> Entry | None:
        return self.configs[-1] if self.configs else None

    def record_committed(self, entry: Entry) -> None:
        if self.committed.setdefault(entry.index, entry) is entry and entry.kind == CONFIG:
            self.configs.append(entry)
            self.configs.sort(key=lambda e: e.index)
        if entry.index > self.max_committed:
            self.max_committed = entry.index

    def record_ack(self, entry: Entry) -> None:
        self.acked[entry.data] = entry
        if entry.index > self.acked_max_index:
            self.acked_max_index = entry.index
