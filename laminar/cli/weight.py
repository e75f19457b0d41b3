"""`laminar weight W`: change the node's placement weight while it runs.

The node announces the new weight by gossip (a new incarnation, so it beats
the old news); every partition leader's placement controller then moves the
partitions whose top replicas changed, one safe step at a time (`laminar
status` shows them moving). The node's admin endpoint takes the change from
this host only: a write needs the node's admin token, which the node writes
at each start to an owner-only file in its data dir (`/status` names the
file; `--admin-token-file` to say where), so run this on the node's machine,
as the node's user (or root).
"""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.request
from typing import Any

from laminar.cli.common import CommandError, Exit, UsageError
from laminar.cli.output import print_json
from laminar.cli.status import add_admin_argument, admin_address, admin_open
from laminar.client import Client
from laminar.client.routing import Address, format_address


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "weight",
        parents=[common],
        help="change the node's placement weight (partitions move to match)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("weight", type=_weight, help="the new weight, a number in (0, 1e9]")
    add_admin_argument(parser)
    parser.add_argument(
        "--admin-token-file",
        metavar="PATH",
        help="the node's admin token (default: the file the node's /status names)",
    )
    parser.set_defaults(run=set_weight)


def _weight(text: str) -> float:
    from laminar.swim.codec import WEIGHT_MAX  # here: every other command starts faster

    try:
        weight = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < weight <= WEIGHT_MAX:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a number in (0, {WEIGHT_MAX:g}], got {text}")
    return weight


def set_weight(client: Client, args: argparse.Namespace) -> int:
    admin = admin_address(client, args.admin)
    token = _admin_token(args.admin_token_file or _token_file(admin, args.timeout, client))
    request = urllib.request.Request(
        "http://placeholder/weight",
        data=repr(args.weight).encode(),
        method="POST",
        headers={"Content-Type": "text/plain", "Authorization": f"Bearer {token}"},
    )
    try:
        with admin_open(admin, "/weight", args.timeout, client.tls, request) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 400:  # the weight itself is wrong
            raise UsageError(f"the node refused: {_reason(exc)}") from exc
        raise CommandError(
            f"the node refused: {_reason(exc)}", Exit.SERVER_ERROR, "REFUSED"
        ) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise CommandError(
            f"cannot reach the admin endpoint {format_address(admin)}: {exc}",
            Exit.CANNOT_CONNECT,
            "CANNOT_CONNECT",
            "run this on the node's host (its admin endpoint takes changes from loopback only)",
        ) from exc
    if args.json:
        print_json(answer)
    else:
        print(
            f"node {answer['node_id']}: weight {answer['weight']:g} announced "
            f"(incarnation {answer['incarnation']}); partitions move to match "
            "(see `laminar status`)"
        )
    return Exit.OK


def _token_file(admin: Address, timeout_s: float, client: Client) -> str:
    """Where the node keeps its admin token, as its /status says."""
    try:
        with admin_open(admin, "/status", timeout_s, client.tls) as r:
            path = json.loads(r.read()).get("admin_token_file")
    except (urllib.error.URLError, OSError, ValueError, AttributeError) as exc:
        raise CommandError(
            f"cannot read the admin endpoint {format_address(admin)}/status: {exc}",
            Exit.CANNOT_CONNECT,
            "CANNOT_CONNECT",
        ) from exc
    if not isinstance(path, str):
        raise CommandError(
            "the node does not name its admin token file (an older node?)",
            Exit.SERVER_ERROR,
            "REFUSED",
            "give it with --admin-token-file",
        )
    return path


def _admin_token(path: str) -> str:
    try:
        with open(path) as f:
            return f.read(256).strip()
    except OSError as exc:
        raise CommandError(
            f"cannot read the node's admin token {path}: {exc.strerror or exc}",
            Exit.USAGE,
            "NO_ADMIN_TOKEN",
            "run this as the node's user (or root), on the node's host",
        ) from exc


def _reason(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read())["error"])
    except (ValueError, KeyError, TypeError, OSError):
        return f"HTTP {exc.code}"
