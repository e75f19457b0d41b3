"""The node's XDP classifier: whether it attaches, where, why not, and its counters.

The supervisor owns one `NodeXdp` for the node's whole life (`steering`
makes it after the reuseport steering is set up). Rules:

- `--xdp off` never attaches. `--xdp auto` attaches when the node port's
  routing is `ebpf`: that mode proves this process may load BPF programs,
  and the classifier is the other half of the kernel path (`cbpf` and
  `userspace` nodes have no CAP_BPF or were asked to stay out of BPF).
- Never fatal: when the classifier cannot attach, `reason` says why in one
  line (start-up log, /status, /metrics) and the node runs without it.
  Correctness never depends on it: the shards check every datagram anyway.
- The interface is the one holding `--host`; a wildcard host is on every
  interface and names none. `auto` attaches in native mode only: generic
  (skb) mode, the only one `lo` offers, copies every packet of the interface
  into a new page and slows all its traffic, the node's or not, so it is used
  only when asked for (`--xdp generic`).
- The classifier attaches through a BPF link, so the kernel detaches it when
  the supervisor dies, SIGKILL included; `close()` covers every other exit.
  Shards never hold the link (they start with close_fds).
- A `laminar_xdp` left attached by a killed legacy run is replaced (and
  logged); one held by a live link means another node owns the interface,
  which is a reason not to attach, not an error.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from laminar.node.prometheus import render_family
from laminar.xdp import BpfUnavailable, XdpAttachError, XdpClassifier, XdpCounters
from laminar.xdp.iface import interface_of

logger = logging.getLogger("laminar.node")

_PACKET_CLASSES = (
    ("partition", "partition", ""),
    ("membership", "membership", ""),
    ("short", "malformed", "short"),
    ("bad_magic", "malformed", "bad_magic"),
    ("bad_version", "malformed", "bad_version"),
    ("bad_length", "malformed", "bad_length"),
    ("other", "other", ""),
)
"""(per-CPU counter name, `class` label, `reason` label) of laminar_xdp_packets_total."""


@dataclass(slots=True)
class NodeXdp:
    """The classifier as the node runs it, or why it does not."""

    requested: str
    interface: str | None = None
    reason: str = ""
    """Why the classifier is not attached ("" when it is)."""
    classifier: XdpClassifier | None = None

    @property
    def attached(self) -> bool:
        return self.classifier is not None and self.classifier.attached

    @property
    def mode(self) -> str | None:
        """native or generic, when attached."""
        return None if self.classifier is None else self.classifier.attached_mode

    def describe(self) -> str:
        """One line for the start-up log."""
        if self.attached:
            return f"xdp classifier on {self.interface} ({self.mode} mode)"
        return f"xdp classifier not attached: {self.reason}"

    def counters(self) -> XdpCounters | None:
        if not self.attached or self.classifier is None:
            return None
        return self.classifier.counters()

    def state(self) -> dict[str, Any]:
        """JSON for /status and node.json."""
        counters = self.counters()
        return {
            "requested": self.requested,
            "attached": self.attached,
            "interface": self.interface,
            "mode": self.mode,
            "reason": self.reason,
            "counters": None if counters is None else counters.as_dict(),
        }

    def metrics(self) -> list[str]:
        """Exposition blocks: whether it is attached (and why not), packets per class per CPU."""
        blocks = [
            render_family(
                "laminar_xdp_attached",
                "gauge",
                "1 when the XDP classifier is attached to the node's interface.",
                [
                    (
                        {
                            "interface": self.interface or "",
                            "mode": self.mode or "",
                            "reason": self.reason,
                        },
                        1 if self.attached else 0,
                    )
                ],
            )
        ]
        counters = self.counters()
        if counters is not None:
            blocks.append(
                render_family(
                    "laminar_xdp_packets_total",
                    "counter",
                    "Packets the XDP classifier saw, by class (malformed ones dropped), per CPU.",
                    _packet_samples(counters),
                )
            )
        return blocks

    def close(self) -> None:
        """Detach and unload (idempotent)."""
        classifier, self.classifier = self.classifier, None
        if classifier is not None:
            classifier.close()


def _packet_samples(counters: XdpCounters) -> Iterator[tuple[dict[str, object], float]]:
    for key, packet_class, reason in _PACKET_CLASSES:
        for cpu, value in enumerate(counters.per_cpu.get(key, ())):
            labels: dict[str, object] = {"class": packet_class}
            if reason:
                labels["reason"] = reason
            labels["cpu"] = cpu
            yield labels, value


def attach_classifier(requested: str, routing_mode: str, host: str, port: int) -> NodeXdp:
    """Attach the classifier for the node port `port` when `requested` and
    `routing_mode` allow it (see the module docstring); never raises for
    reasons of this host."""
    if requested == "off":
        return NodeXdp(requested, reason="--xdp off")
    if routing_mode != "ebpf":
        return NodeXdp(
            requested,
            reason=f"routing is {routing_mode}; the classifier runs with ebpf routing (CAP_BPF)",
        )
    try:
        ifname = interface_of(host)
    except XdpAttachError as exc:
        return NodeXdp(requested, reason=str(exc))
    if ifname is None:
        return NodeXdp(
            requested,
            reason=f"--host {host} is not the address of one interface here "
            "(a wildcard listens on all of them); give --host an interface's address",
        )
    mode: Literal["native", "generic"] = "generic" if requested == "generic" else "native"
    classifier = XdpClassifier(ifname, partition_ports=[port], mode=mode)
    try:
        classifier.attach()
    except (BpfUnavailable, XdpAttachError, OSError) as exc:
        classifier.close()
        reason = f"cannot attach to {ifname}: {exc}"
        if requested == "auto":
            reason += (
                f"; generic mode would work but slows all traffic on {ifname}: "
                "pass --xdp generic to accept that"
            )
        return NodeXdp(requested, ifname, reason=reason)
    for stale in classifier.replaced_stale:
        logger.warning(
            "replaced a stale laminar_xdp (id %d, %s) left on %s by a killed run",
            stale.prog_id,
            stale.mode,
            ifname,
        )
    return NodeXdp(requested, ifname, classifier=classifier)
