"""`laminar user create|list|delete|passwd`: the users who may log in.

A password is read from an owner-only file (`--password-file`, one line),
never from the command line (where `ps` and the shell history would show
it), and is salted and hashed by the client: the node stores only keys.
"""

from __future__ import annotations

import argparse
from typing import Any

from laminar.cli.common import read_password
from laminar.cli.output import print_json, say, table
from laminar.client import Client, UserInfo


def add_parsers(commands: Any, common: argparse.ArgumentParser) -> None:
    """Register `user` and its subcommands on `commands` (a subparsers action)."""
    user = commands.add_parser(
        "user",
        help="create, list, delete users or change a password",
        description="Manage the users who may log in (a node with --auth scram).",
    )
    sub = user.add_subparsers(dest="user_command", metavar="ACTION", required=True)

    create = sub.add_parser(
        "create",
        parents=[common],
        help="create a user",
        description="Create a user who logs in with the password in --password-file.",
    )
    create.add_argument("name", metavar="NAME")
    _password_file(create)
    create.add_argument(
        "--superuser", action="store_true", help="allowed everything, whatever the ACLs say"
    )
    create.set_defaults(run=create_user)

    listing = sub.add_parser("list", parents=[common], help="list users")
    listing.set_defaults(run=list_users)

    delete = sub.add_parser(
        "delete",
        parents=[common],
        help="delete a user",
        description="Delete a user (its ACLs stay: remove them with `laminar acl remove`).",
    )
    delete.add_argument("name", metavar="NAME")
    delete.set_defaults(run=delete_user)

    passwd = sub.add_parser(
        "passwd",
        parents=[common],
        help="change a user's password",
        description="Set a user's password to the one in --password-file.",
    )
    passwd.add_argument("name", metavar="NAME")
    _password_file(passwd)
    passwd.set_defaults(run=set_password)


def _password_file(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--password-file",
        required=True,
        metavar="FILE",
        help="an owner-only file holding the user's password on one line",
    )


def user_json(user: UserInfo) -> dict[str, Any]:
    return {
        "name": user.name,
        "principal": user.principal,
        "mechanisms": [m.value for m in user.mechanisms],
        "superuser": user.superuser,
    }


def create_user(client: Client, args: argparse.Namespace) -> int:
    client.create_user(args.name, read_password(args.password_file), superuser=args.superuser)
    _done(args, "created", f"created user {args.name}" + (" (a superuser)" * args.superuser))
    return 0


def set_password(client: Client, args: argparse.Namespace) -> int:
    client.set_password(args.name, read_password(args.password_file))
    _done(args, "password_changed", f"changed the password of user {args.name}")
    return 0


def delete_user(client: Client, args: argparse.Namespace) -> int:
    client.delete_user(args.name)
    _done(args, "deleted", f"deleted user {args.name}")
    return 0


def _done(args: argparse.Namespace, key: str, message: str) -> None:
    if args.json:
        print_json({"name": args.name, key: True})
    else:
        print(message)


def list_users(client: Client, args: argparse.Namespace) -> int:
    users = client.list_users()
    if args.json:
        print_json([user_json(u) for u in users])
    elif not users:
        say("no users yet; create one with `laminar user create NAME --password-file FILE`")
    else:
        rows = [
            (u.name, ",".join(m.value for m in u.mechanisms), "yes" if u.superuser else "no")
            for u in users
        ]
        print(table(["USER", "MECHANISMS", "SUPERUSER"], rows))
    return 0
