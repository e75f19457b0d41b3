"""`laminar acl add|remove|list`: who may do what (Kafka's ACL model,
`laminar.security.acls`).

`acl add --principal User:alice --operation read --topic events --group
billing` adds one ACL per resource named (here: read on the topic, read on
the group), as Kafka's `kafka-acls --add` does. `--prefixed` makes the names
prefixes, `--deny` makes them denials. `acl remove` takes the same flags as a
filter (a flag left out matches anything; at least one is needed, so a bare
`acl remove` cannot wipe every ACL); `acl list` too (all ACLs by default).
"""

from __future__ import annotations

import argparse
from typing import Any

from laminar.cli.common import UsageError
from laminar.cli.output import print_json, say, table
from laminar.client import (
    Acl,
    AclFilter,
    Client,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from laminar.security.acls import CLUSTER_NAME

OPERATIONS = [op.value for op in Operation]


def add_parsers(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register `acl` and its subcommands on `commands` (a subparsers action)."""
    acl = commands.add_parser(
        "acl",
        help="add, remove or list ACLs",
        description="Manage who may do what (a node with --auth scram).",
    )
    sub = acl.add_subparsers(dest="acl_command", metavar="ACTION", required=True)

    add = sub.add_parser(
        "add",
        parents=[common],
        help="allow (or --deny) a principal an operation",
        description="Add one ACL per resource named (--topic, --group, --cluster).",
    )
    _selectors(add, required=True)
    add.set_defaults(run=add_acls)

    remove = sub.add_parser(
        "remove",
        parents=[common],
        help="remove the ACLs a filter selects",
        description="Remove every ACL the flags select (a flag left out matches anything).",
    )
    _selectors(remove, required=False)
    remove.set_defaults(run=remove_acls)

    listing = sub.add_parser(
        "list",
        parents=[common],
        help="list ACLs",
        description="List the ACLs the flags select (every ACL without flags).",
    )
    _selectors(listing, required=False)
    listing.set_defaults(run=list_acls)


def _selectors(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument(
        "--principal", required=required, metavar="User:NAME", help="who (User:* for anyone)"
    )
    parser.add_argument("--operation", required=required, choices=OPERATIONS, help="what")
    parser.add_argument("--topic", action="append", default=[], metavar="NAME", help="a topic")
    parser.add_argument("--group", action="append", default=[], metavar="NAME", help="a group")
    parser.add_argument("--cluster", action="store_true", help="the cluster (users, ACLs)")
    parser.add_argument("--prefixed", action="store_true", help="names are prefixes")
    parser.add_argument("--deny", action="store_true", help="a denial (default: allow)")
    if not required:
        parser.add_argument("--allow", action="store_true", help="allowances only")


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    named = [(ResourceType.TOPIC, name) for name in args.topic]
    named += [(ResourceType.GROUP, name) for name in args.group]
    if args.cluster:
        named.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return named


def _pattern(args: argparse.Namespace) -> PatternType:
    return PatternType.PREFIXED if args.prefixed else PatternType.LITERAL


def _filters(args: argparse.Namespace) -> list[AclFilter]:
    if args.deny and args.allow:
        raise UsageError("give --deny or --allow, not both")
    permission = Permission.DENY if args.deny else Permission.ALLOW if args.allow else None
    operation = Operation(args.operation) if args.operation else None
    resources = _resources(args)
    if not resources:
        return [AclFilter(args.principal, None, None, None, operation, permission)]
    return [
        AclFilter(args.principal, kind, _pattern(args), name, operation, permission)
        for kind, name in resources
    ]


def acl_json(acl: Acl) -> dict[str, str]:
    return {
        "principal": acl.principal,
        "permission": acl.permission.value,
        "operation": acl.operation.value,
        "resource_type": acl.resource_type.value,
        "pattern": acl.pattern.value,
        "name": acl.name,
    }


def _show(acls: list[Acl], args: argparse.Namespace, verb: str) -> None:
    if args.json:
        print_json([acl_json(a) for a in acls])
        return
    if verb:
        say(f"{verb} {len(acls)} ACL{'s' if len(acls) != 1 else ''}")
    if acls:
        rows = [
            (
                a.principal,
                a.permission.value,
                a.operation.value,
                a.resource_type.value,
                a.pattern.value,
                a.name,
            )
            for a in sorted(acls, key=Acl.sort_key)
        ]
        print(table(["PRINCIPAL", "PERMISSION", "OPERATION", "RESOURCE", "PATTERN", "NAME"], rows))


def add_acls(client: Client, args: argparse.Namespace) -> int:
    resources = _resources(args)
    if not resources:
        raise UsageError("name what the ACL is on: --topic NAME, --group NAME or --cluster")
    permission = Permission.DENY if args.deny else Permission.ALLOW
    acls = [
        Acl(args.principal, kind, _pattern(args), name, Operation(args.operation), permission)
        for kind, name in resources
    ]
    _show(client.add_acls(acls), args, "added")
    return 0


def remove_acls(client: Client, args: argparse.Namespace) -> int:
    if not (args.principal or args.operation or _resources(args) or args.deny or args.allow):
        raise UsageError(
            "say which ACLs to remove (--principal, --operation, --topic, --group, --cluster, "
            "--deny or --allow); `laminar acl list` shows them"
        )
    removed = [acl for wanted in _filters(args) for acl in client.remove_acls(wanted)]
    _show(removed, args, "removed")
    return 0


def list_acls(client: Client, args: argparse.Namespace) -> int:
    acls = [acl for wanted in _filters(args) for acl in client.list_acls(wanted)]
    if not acls and not args.json:
        say("no ACLs; add one with `laminar acl add --principal User:NAME --operation OP ...`")
        return 0
    _show(acls, args, "")
    return 0
