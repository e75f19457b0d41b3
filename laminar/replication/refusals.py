"""What this shard refused from its peers, counted by reason and logged at a bounded rate.

A peer that sends what no correct node sends (a message naming another node
as its sender, a Raft message the core finds implausible) is refused, and
that must be visible: a WARNING line and a counter in /metrics
(`laminar_peer_refused_total{reason}`). The same peer may repeat it every
tick, so the lines of each reason go through a `RateLimitedLog`.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Final

from laminar.lograte import RateLimitedLog
from laminar.raft import Anomaly

logger = logging.getLogger("laminar.replication")

IMPERSONATION: Final = "impersonation"
"""A message on a session with node X that names another node as its sender."""
HANDSHAKE: Final = "handshake"
"""A peer handshake that failed (no or another secret, or a proof for another id)."""
RAFT_IMPLAUSIBLE: Final = "raft_implausible"
"""A Raft message the core refused (`laminar.raft.Anomaly`)."""
RAFT_DISCARDED_COMMITTED: Final = "raft_install_discarded_committed"
"""Not refused: an install that discarded committed entries (retention's, or an attack's)."""


class PeerRefusals:
    """Counts by reason, and the bounded log (see the module docstring)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._log = RateLimitedLog(logger)

    def note(self, reason: str, text: str) -> None:
        """Count one `reason`; log `text` unless the log is rate-limited now."""
        self.counts[reason] += 1
        self._log.warning(reason, "%s (%s: %d so far)", text, reason, self.counts[reason])

    def raft(self, pid: int, anomaly: Anomaly) -> None:
        """A Raft group's `Ready.anomalies`, one at a time."""
        m = anomaly.message
        verb = "refused" if anomaly.refused else "acted on"
        what = (
            f"partition {pid}: {verb} {m.kind} from node {m.src} at term {m.term}: {anomaly.reason}"
        )
        self.note(RAFT_IMPLAUSIBLE if anomaly.refused else RAFT_DISCARDED_COMMITTED, what)
