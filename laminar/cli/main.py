"""`laminar`: the command line for topics, records and the node's status.

This module builds the parser, runs the chosen command with a client, and
turns every failure into a message that says what to do and an exit code
scripts can trust (`laminar.cli.common.Exit`); with --json the message is one
JSON line on stderr. The commands live in their own modules: `topics`,
`produce`, `consume`, `status`, `weight`, `decommission`,
`repair`, `users`, `acls`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from laminar.cli import (
    acls,
    consume,
    decommission,
    groups,
    produce,
    repair,
    status,
    topics,
    users,
    weight,
)
from laminar.cli.common import (
    EXIT_CODES_HELP,
    CommandError,
    Exit,
    UsageError,
    addresses,
    client_security,
    common_parser,
    parser_default_bootstrap,
)
from laminar.client import (
    CannotConnectError,
    Client,
    ConnectionLostError,
    GroupRequestError,
    LaminarError,
    OffsetOutOfRangeError,
    OutcomeUnknownError,
    RequestTimeoutError,
    RetryPolicy,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)
from laminar.groups.errors import GroupError

EXAMPLES = """\
examples:
  laminar topic create events --partitions 8
  printf 'hello\\nworld\\n' | laminar produce events --partition 3
  laminar consume events --partition 3 --from-beginning
  laminar consume events --follow            # new records from every partition
  laminar consume events --group billing     # share the partitions with the group's others
  laminar group describe billing             # members, committed positions, lag
  laminar status --json
  laminar weight 2                           # this node takes more partitions
  laminar node decommission n3 --wait 600    # n3's partitions move away; then stop it
  laminar repair data/partitions/1-0         # rebuild a damaged replica (node stopped)
  laminar --user admin --password-file admin.pw user create alice --password-file alice.pw
  laminar acl add --principal User:alice --operation write --topic events
"""


class ParseError(UsageError):
    """argparse found the command line wrong; `usage` is the parser's usage line."""

    def __init__(self, message: str, prog: str, usage: str) -> None:
        super().__init__(message)
        self.prog = prog
        self.usage = usage


class LaminarParser(argparse.ArgumentParser):
    """argparse's parser, raising `ParseError` instead of printing and exiting,
    so `main` reports every error the same way (as JSON with --json)."""

    def error(self, message: str) -> NoReturn:
        raise ParseError(message, self.prog, self.format_usage())


def build_parser() -> argparse.ArgumentParser:
    common = common_parser()
    parser = LaminarParser(
        prog="laminar",
        description=(
            "Talk to a laminar node: manage topics, produce and consume records,\n"
            "and see the node's shards, routing and load. Every command takes\n"
            "--bootstrap HOST:PORT (default 127.0.0.1:7070) and --json."
        ),
        epilog=EXAMPLES + "\n" + EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-b",
        "--bootstrap",
        dest="global_bootstrap",
        metavar="HOST:PORT[,...]",
        type=addresses,
        default=None,
        help="as a command's --bootstrap, given before the command",
    )
    parser.add_argument(
        "--tls", dest="global_tls", action="store_true", help="as a command's --tls"
    )
    parser.add_argument(
        "--ca-file", dest="global_ca_file", metavar="FILE", help="as a command's --ca-file"
    )
    parser.add_argument(
        "--user",
        metavar="NAME",
        help="log in as this user (with --password-file; default $LAMINAR_USER)",
    )
    parser.add_argument(
        "--password-file",
        dest="password_file_login",
        metavar="FILE",
        help="an owner-only file holding the --user's password (default $LAMINAR_PASSWORD_FILE)",
    )
    parser.add_argument(
        "--json",
        dest="global_json",
        action="store_true",
        help="as a command's --json, given before the command",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    topics.add_parsers(commands, common)
    produce.add_parser(commands, common)
    consume.add_parser(commands, common)
    groups.add_parsers(commands, common)
    status.add_parser(commands, common)
    weight.add_parser(commands, common)
    decommission.add_parsers(commands, common)
    repair.add_parser(commands, common)
    users.add_parsers(commands, common)
    acls.add_parsers(commands, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `laminar`; return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except ParseError as exc:
        options = argv[: argv.index("--")] if "--" in argv else argv
        as_json = "--json" in options
        if not as_json:
            sys.stderr.write(exc.usage)
        return _fail(_reported(exc), as_json, prefix=f"{exc.prog}: error: ")
    if args.global_bootstrap and args.bootstrap == parser_default_bootstrap():
        args.bootstrap = args.global_bootstrap  # `laminar -b X topic ...`; a command's own wins
    args.json = args.json or args.global_json
    args.tls = args.tls or args.global_tls
    args.ca_file = args.ca_file or args.global_ca_file
    try:
        return _run(args)
    except KeyboardInterrupt:
        following = args.command == "consume" and args.follow
        return Exit.OK if following else Exit.INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`laminar consume ... | head`): that is not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return Exit.OK
    except CommandError as exc:
        prefix = "laminar: error: " if isinstance(exc, UsageError) else "laminar: "
        return _fail(_reported(exc), args.json, prefix=prefix)
    except LaminarError as exc:
        return _fail(_failure(exc, args), args.json)


def _run(args: argparse.Namespace) -> int:
    run_async = getattr(args, "run_async", None)
    if run_async is not None:
        code: int = asyncio.run(run_async(args))
        return code
    retry = RetryPolicy(budget_s=min(args.timeout, RetryPolicy().budget_s))
    idempotent = getattr(args, "idempotent", True)  # `produce --no-idempotence`
    with Client(
        args.bootstrap,
        timeout_s=args.timeout,
        retry=retry,
        idempotent=idempotent,
        **client_security(args),
    ) as client:
        code = args.run(client, args)
        return code


@dataclass(frozen=True, slots=True)
class Failure:
    """An error as `main` reports it."""

    exit_code: int
    code: str
    """For scripts: the node's error code, or USAGE, CANNOT_CONNECT, ..."""
    message: str
    hint: str = ""
    """What to do about it, when there is something to say."""


_OWN_CODES = frozenset(
    {"USAGE", "CANNOT_CONNECT", "CONNECTION_LOST", "REQUEST_TIMEOUT", "OUTCOME_UNKNOWN", "REFUSED"}
)
"""The `code`s this command gives errors the node did not name."""


def _reported(exc: CommandError) -> Failure:
    return Failure(exc.exit_code, exc.code, exc.message, exc.hint)


def _failure(exc: LaminarError, args: argparse.Namespace) -> Failure:
    """What went wrong, its exit code, and what to do."""
    code = exc.code.name if exc.code is not None else None
    if isinstance(exc, OutcomeUnknownError):
        return Failure(Exit.OUTCOME_UNKNOWN, "OUTCOME_UNKNOWN", exc.message)
    if isinstance(exc, CannotConnectError):
        hint = (
            "is laminar-node running there? Start one with `make run` "
            "(or `laminar-node`), or point --bootstrap HOST:PORT at it"
        )
        return Failure(Exit.CANNOT_CONNECT, code or "CANNOT_CONNECT", exc.message, hint)
    if isinstance(exc, ConnectionLostError | RequestTimeoutError):
        lost = "REQUEST_TIMEOUT" if isinstance(exc, RequestTimeoutError) else "CONNECTION_LOST"
        hint = "the node stopped answering; check it is healthy with `laminar status`"
        return Failure(Exit.CANNOT_CONNECT, lost, exc.message, hint)
    if isinstance(exc, GroupRequestError):
        return Failure(Exit.SERVER_ERROR, exc.refusal.name, exc.message, _group_hint(exc))
    return Failure(Exit.SERVER_ERROR, code or "REFUSED", exc.message, _hint(exc, args))


def _fail(failure: Failure, as_json: bool, prefix: str = "laminar: ") -> int:
    """Print `failure` on stderr (one JSON line with `as_json`); its exit code."""
    if as_json:
        document = {
            "error": {
                "code": failure.code,
                "exit_code": failure.exit_code,
                "message": failure.message,
                "hint": failure.hint or None,
            }
        }
        print(json.dumps(document), file=sys.stderr)
    else:
        suffix = "" if failure.code in _OWN_CODES else f" ({failure.code})"  # the node's
        hint = f"\n  {failure.hint}" if failure.hint else ""
        print(f"{prefix}{failure.message}{suffix}{hint}", file=sys.stderr)
    return failure.exit_code


def _group_hint(exc: GroupRequestError) -> str:
    if exc.refusal is GroupError.GROUP_NOT_EMPTY:
        return f"stop its consumers first (`laminar group describe {exc.group}` lists them)"
    if exc.refusal is GroupError.UNKNOWN_GROUP:
        return "see the groups with `laminar group list`"
    return ""


def _hint(exc: LaminarError, args: argparse.Namespace) -> str:
    topic = getattr(args, "topic", None) or getattr(args, "name", None) or "TOPIC"
    if isinstance(exc, UnknownTopicError):
        return "see the topics with `laminar topic list`"
    if isinstance(exc, UnknownPartitionError | OffsetOutOfRangeError):
        return f"see each partition's index range with `laminar topic describe {topic}`"
    if isinstance(exc, TopicExistsError):
        return "add --if-not-exists to accept an existing topic"
    return ""


if __name__ == "__main__":
    sys.exit(main())
