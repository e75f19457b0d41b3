"""Liveness: once faults stop and the network heals, a leader is elected and a
proposal commits on every member within a bounded number of steps."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..history import Violation
from . import Checker

if TYPE_CHECKING:
    from ..simulation import Simulation


class Liveness(Checker):
    name = "liveness"

    def at_end(self, sim: Simulation) -> None:
        if sim.recovered_after_steps is None:
            raise Violation(
                self.name,
                f"no proposal committed on every member within {sim.params.liveness_steps} "
                f"steps after the faults healed (roles: {sim.describe_roles()})",
            )
