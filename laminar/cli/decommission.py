"""`laminar node decommission NODE_ID`: a node leaves the cluster for good.

Restarting a node is not removing it: a node stopped with SIGTERM keeps its
replicas for the dead grace (`--dead-grace`) and catches up when it is back.
To remove one, decommission it: the decision is recorded in the cluster's
metadata (it survives restarts of any node), placement then names the node
for no partition, and each partition it holds moves to another node first
(a new replica catches up, then the old one is removed), one safe step at a
time. `laminar status` shows how many partitions it still holds; once none,
stop it. `--cancel` undoes the decision (its partitions may move back).

Only a cluster formed with `--join` moves replicas; a `--peers` cluster
refuses (its replica sets are fixed by the peer list). Refused too: a node
the cluster does not know, and a decommission that would leave fewer nodes
than a topic's replication factor.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from laminar.cli.common import Exit
from laminar.cli.output import print_json, say
from laminar.client import Client
from laminar.client.results import TopicDescription

WAIT_POLL_S = 1.0


def add_parsers(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register `node` and its subcommands on `commands` (a subparsers action)."""
    node = commands.add_parser(
        "node", help="remove a node from the cluster", description="Manage cluster nodes."
    )
    sub = node.add_subparsers(dest="node_command", metavar="ACTION", required=True)
    decommission = sub.add_parser(
        "decommission",
        parents=[common],
        help="move a node's partitions away so that it can leave for good",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    decommission.add_argument("node_id", metavar="NODE_ID", help="the node that leaves")
    decommission.add_argument(
        "--cancel", action="store_true", help="keep the node after all (undo a decommission)"
    )
    decommission.add_argument(
        "--wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="then wait up to SECONDS until it holds no partition (exit 1 if it still does)",
    )
    decommission.set_defaults(run=decommission_node)


def partitions_held(descriptions: list[TopicDescription], node_id: str) -> list[str]:
    """The partitions ("topic/index") whose replicas, as their leaders report
    them, still include `node_id`."""
    return [
        f"{d.topic.name}/{p.index}"
        for d in descriptions
        for p in d.partitions
        if node_id in p.replicas
    ]


def decommission_node(client: Client, args: argparse.Namespace) -> int:
    decommissioned = client.decommission_node(args.node_id, cancel=args.cancel)
    document: dict[str, Any] = {
        "node_id": args.node_id,
        "decommissioning": args.node_id in decommissioned,
        "decommissioned": list(decommissioned),
    }
    tell = say if args.json else print  # stdout carries the JSON document alone
    if args.cancel:
        tell(f"node {args.node_id} stays: it is no longer decommissioned")
    else:
        tell(
            f"node {args.node_id} is decommissioned: its partitions move to the other nodes "
            "(`laminar status` shows how many are left); stop it once it holds none"
        )
    code = Exit.OK
    if args.wait is not None and not args.cancel:
        held = _wait_until_empty(client, args.node_id, args.wait)
        document["partitions_left"] = held
        if held:
            tell(f"node {args.node_id} still holds {_count(held)} after {args.wait:g} s")
            code = Exit.SERVER_ERROR
        else:
            tell(f"node {args.node_id} holds no partition: it can be stopped")
    if args.json:
        print_json(document)
    return code


def _wait_until_empty(client: Client, node_id: str, timeout_s: float) -> list[str]:
    """Poll until `node_id` holds no partition or `timeout_s` passed; what it holds then."""
    deadline = time.monotonic() + timeout_s
    reported = -1
    while True:
        held = partitions_held(client.describe_topics(), node_id)
        if not held or time.monotonic() >= deadline:
            return held
        if len(held) != reported:
            say(f"node {node_id}: {_count(held)} left")
            reported = len(held)
        time.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))


def _count(partitions: list[str]) -> str:
    return f"{len(partitions)} partition{'s' if len(partitions) != 1 else ''}"
