"""`laminar group list|describe|reset|delete`: consumer groups, their members and lag.

Lag is per partition: its end minus the group's committed position (on a
replicated partition the index range also counts Raft's own entries, a few
per leader change). A member's state says why it may be idle: idle (nothing
assigned), waiting (for partitions another member still releases), revoking
(releasing partitions), away (a static member between restarts), stable.
Reset and delete need a group without members (stop its consumers first).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from laminar.cli.common import UsageError
from laminar.cli.output import Cell, print_json, ranges, say, table
from laminar.client import Client, GroupDescription
from laminar.groups.messages import TopicPartition


def add_parsers(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register `group` and its subcommands on `commands` (a subparsers action)."""
    group = commands.add_parser(
        "group",
        help="list, describe, reset or delete consumer groups",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = group.add_subparsers(dest="group_command", metavar="ACTION", required=True)
    listing = sub.add_parser("list", parents=[common], help="list groups, members, state")
    listing.set_defaults(run=list_groups)
    describe = sub.add_parser(
        "describe", parents=[common], help="per partition: owner, committed index, end, lag"
    )
    describe.add_argument("name", metavar="GROUP")
    describe.set_defaults(run=describe_group)
    reset = sub.add_parser(
        "reset",
        parents=[common],
        help="move a group's positions on a topic (only while it has no members)",
    )
    reset.add_argument("name", metavar="GROUP")
    reset.add_argument("--topic", required=True, metavar="TOPIC")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the oldest record kept")
    to.add_argument("--to-latest", action="store_true", help="after the newest record")
    to.add_argument(
        "--to-timestamp", type=int, metavar="MS", help="the first record at or after MS"
    )
    to.add_argument("--to-index", type=int, metavar="N", help="index N (clamped to the range)")
    reset.set_defaults(run=reset_group)
    delete = sub.add_parser(
        "delete", parents=[common], help="forget a group and its positions (no members)"
    )
    delete.add_argument("name", metavar="GROUP")
    delete.set_defaults(run=delete_group)


def list_groups(client: Client, args: argparse.Namespace) -> int:
    groups = client.list_groups()
    if args.json:
        print_json(
            [
                {
                    "group": g.group,
                    "state": g.state,
                    "epoch": g.epoch,
                    "assignor": g.assignor,
                    "members": len(g.members),
                }
                for g in groups
            ]
        )
    elif not groups:
        say("no consumer groups yet; `laminar consume TOPIC --group NAME` makes one")
    else:
        rows: list[tuple[Cell, ...]] = [
            (g.group, g.state, len(g.members), g.epoch, g.assignor) for g in groups
        ]
        print(table(["GROUP", "STATE", "MEMBERS", "EPOCH", "ASSIGNOR"], rows))
    return 0


def describe_json(d: GroupDescription) -> dict[str, Any]:
    return {
        "group": d.group,
        "state": d.state,
        "epoch": d.epoch,
        "assignor": d.assignor,
        "lag": d.lag,
        "members": [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "state": m.state,
                "epoch": m.epoch,
                "topics": list(m.topics),
                "partitions": [[t, p] for t, p in sorted(m.assignment)],
                "paused": [[t, p] for t, p in sorted(m.paused)],
                "idle_reason": m.idle_reason,
            }
            for m in d.members
        ],
        "partitions": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "member_id": p.member_id,
                "committed": p.committed,
                "end": p.end,
                "lag": p.lag,
            }
            for p in d.partitions
        ],
    }


def describe_group(client: Client, args: argparse.Namespace) -> int:
    d = client.describe_group(args.name)
    if args.json:
        print_json(describe_json(d))
        return 0
    print(
        f"group {d.group}  state {d.state}  epoch {d.epoch}  members {len(d.members)}  lag {d.lag}"
    )
    if d.members:
        print(
            table(
                ["MEMBER", "INSTANCE", "STATE", "EPOCH", "PARTITIONS", "IDLE BECAUSE"],
                [
                    (
                        m.member_id,
                        m.instance_id,
                        m.state,
                        m.epoch,
                        _owned(m.assignment),
                        m.idle_reason,
                    )
                    for m in d.members
                ],
            )
        )
    rows: list[tuple[Cell, ...]] = [
        (p.topic, p.partition, p.member_id, p.committed, p.end, p.lag) for p in d.partitions
    ]
    if rows:
        print(table(["TOPIC", "PARTITION", "MEMBER", "COMMITTED", "END", "LAG"], rows))
    return 0


def _owned(partitions: Iterable[TopicPartition]) -> str:
    """A member's partitions, as topic:ranges ("events:0-2,5")."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return " ".join(f"{t}:{ranges(ps)}" for t, ps in by_topic.items()) or "-"


def reset_group(client: Client, args: argparse.Namespace) -> int:
    for flag, value in (("--to-timestamp", args.to_timestamp), ("--to-index", args.to_index)):
        if value is not None and value < 0:
            raise UsageError(f"{flag} must be at least 0, got {value}")
    if args.to_earliest:
        to: str | int = "earliest"
    elif args.to_latest:
        to = "latest"
    else:
        to = args.to_timestamp if args.to_timestamp is not None else args.to_index
    positions = client.reset_group(
        args.name, args.topic, to, timestamp=args.to_timestamp is not None
    )
    if args.json:
        print_json(
            [
                {"topic": t, "partition": p, "committed": i}
                for (t, p), i in sorted(positions.items())
            ]
        )
    else:
        print(
            table(
                ["TOPIC", "PARTITION", "COMMITTED"],
                [(t, p, i) for (t, p), i in sorted(positions.items())],
            )
        )
    return 0


def delete_group(client: Client, args: argparse.Namespace) -> int:
    client.delete_group(args.name)
    if args.json:
        print_json({"group": args.name, "deleted": True})
    else:
        print(f"deleted group {args.name}")
    return 0
