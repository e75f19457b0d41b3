"""Who is in the cluster: members, the view placement reads, and the static source of it.

Placement and the shards never ask *how* membership is known: they read a
`NodeView` (an immutable, versioned list of members). Today the view comes
from `--peers` (`StaticView`); SWIM gossip (`laminar.swim`) produces the
same type. A view lists members, not their health: a static member that is
down stays in the view (its partitions' Raft groups carry on without it while
a majority is up), which is what a fixed replica set means.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Protocol

NODE_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""Node ids: short, printable, safe in file names and logs."""


class NodeListError(ValueError):
    """A member list cannot be used; the message says which entry and why."""


@dataclass(frozen=True, slots=True)
class Node:
    """One node: its id, the node port it answers on, and its placement weight."""

    node_id: str
    host: str
    port: int
    weight: float = 1.0

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class NodeView:
    """The members as this node knows them, sorted by id; `version` grows on change."""

    version: int
    members: tuple[Node, ...]

    def __post_init__(self) -> None:
        ids = [m.node_id for m in self.members]
        if len(set(ids)) != len(ids):
            raise NodeListError(f"node ids must be unique, got {ids}")
        if ids != sorted(ids):
            object.__setattr__(self, "members", tuple(sorted(self.members, key=_node_id)))

    @property
    def node_ids(self) -> tuple[str, ...]:
        return tuple(m.node_id for m in self.members)

    def get(self, node_id: str) -> Node | None:
        for member in self.members:
            if member.node_id == node_id:
                return member
        return None

    def weights(self) -> dict[str, float]:
        """Each member's placement weight (what `laminar.placement.replica_nodes` reads)."""
        return {m.node_id: m.weight for m in self.members}


def _node_id(member: Node) -> str:
    return member.node_id


class ViewSource(Protocol):
    """A source of views: static peers now, SWIM gossip later."""

    def view(self) -> NodeView: ...


class StaticView:
    """The members named on the command line (`--peers`), plus this node."""

    def __init__(self, me: Node, peers: Iterable[Node]) -> None:
        self._view = NodeView(1, (me, *peers))

    def view(self) -> NodeView:
        return self._view


def check_node_id(node_id: str) -> str:
    if not NODE_ID_RE.fullmatch(node_id):
        raise NodeListError(
            f"node id {node_id!r} is not valid: 1-64 characters of letters, digits, "
            "'.', '_' and '-', starting with a letter or digit"
        )
    return node_id


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` or `[V6]:PORT` -> (host, port)."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise NodeListError(f"{text!r} is not HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        ipaddress.IPv6Address(host)  # raises ValueError with a clear message
    elif ":" in host:
        raise NodeListError(f"{text!r}: write an IPv6 address as [ADDRESS]:PORT")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise NodeListError(f"{text!r}: the port must be in 1..65535")
    return host, port


def parse_peers(text: str) -> tuple[Node, ...]:
    """`--peers ID=HOST:PORT[@WEIGHT],...` -> members (weight defaults to 1)."""
    members: list[Node] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        node_id, sep, rest = item.partition("=")
        if not sep:
            raise NodeListError(f"peer {item!r} is not ID=HOST:PORT")
        address, _, weight_text = rest.partition("@")
        try:
            weight = float(weight_text) if weight_text else 1.0
        except ValueError:
            raise NodeListError(f"peer {item!r}: the weight is not a number") from None
        if not (math.isfinite(weight) and weight > 0):
            raise NodeListError(f"peer {item!r}: the weight must be finite and > 0")
        host, port = parse_address(address)
        members.append(Node(check_node_id(node_id.strip()), host, port, weight))
    ids = [m.node_id for m in members]
    if len(set(ids)) != len(ids):
        raise NodeListError(f"--peers names a node twice: {ids}")
    return tuple(members)
