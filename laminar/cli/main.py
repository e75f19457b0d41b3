"""`laminar`: the command line for topics, records and the node's status.

This module builds the parser, runs the chosen command with a client, and
turns every failure into a message that says what to do and an exit code
scripts can trust (`laminar.cli.common.Exit`). The commands live in their own
modules: `topics`, `produce`, `consume`, `status`, `weight`, `decommission`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from laminar.cli import consume, decommission, produce, status, topics, weight
from laminar.cli.common import (
    EXIT_CODES_HELP,
    Exit,
    UsageError,
    common_parser,
    parser_default_bootstrap,
)
from laminar.client import (
    CannotConnectError,
    Client,
    ConnectionLostError,
    LaminarError,
    OffsetOutOfRangeError,
    OutcomeUnknownError,
    RequestTimeoutError,
    RetryPolicy,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)

EXAMPLES = """\
examples:
  laminar topic create events --partitions 8
  printf 'hello\\nworld\\n' | laminar produce events --partition 3
  laminar consume events --partition 3 --from-beginning
  laminar consume events --follow            # new records from every partition
  laminar status --json
  laminar weight 2                           # this node takes more partitions
  laminar node decommission n3 --wait 600    # n3's partitions move away; then stop it
"""


def build_parser() -> argparse.ArgumentParser:
    common = common_parser()
    parser = argparse.ArgumentParser(
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
        default=None,
        help="as a command's --bootstrap, given before the command",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    topics.add_parsers(commands, common)
    produce.add_parser(commands, common)
    consume.add_parser(commands, common)
    status.add_parser(commands, common)
    weight.add_parser(commands, common)
    decommission.add_parsers(commands, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `laminar`; return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.global_bootstrap and args.bootstrap == parser_default_bootstrap():
        args.bootstrap = args.global_bootstrap  # `laminar -b X topic ...`; a command's own wins
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
    except UsageError as exc:
        parser.exit(Exit.USAGE, f"laminar: error: {exc}\n")
    except LaminarError as exc:
        return _report(exc, args)


def _run(args: argparse.Namespace) -> int:
    run_async = getattr(args, "run_async", None)
    if run_async is not None:
        code: int = asyncio.run(run_async(args))
        return code
    retry = RetryPolicy(budget_s=min(args.timeout, RetryPolicy().budget_s))
    idempotent = getattr(args, "idempotent", True)  # `produce --no-idempotence`
    with Client(
        args.bootstrap, timeout_s=args.timeout, retry=retry, idempotent=idempotent
    ) as client:
        code = args.run(client, args)
        return code


def _report(exc: LaminarError, args: argparse.Namespace) -> int:
    """Print what went wrong and what to do; return the exit code for it."""
    if isinstance(exc, OutcomeUnknownError):
        _error(str(exc))
        return Exit.OUTCOME_UNKNOWN
    if isinstance(exc, CannotConnectError):
        _error(
            f"{exc}\n  is laminar-node running there? Start one with `make run` "
            "(or `laminar-node`), or point --bootstrap HOST:PORT at it"
        )
        return Exit.CANNOT_CONNECT
    if isinstance(exc, ConnectionLostError | RequestTimeoutError):
        _error(f"{exc}\n  the node stopped answering; check it is healthy with `laminar status`")
        return Exit.CANNOT_CONNECT
    _error(f"{exc}{_hint(exc, args)}")
    return Exit.SERVER_ERROR


def _hint(exc: LaminarError, args: argparse.Namespace) -> str:
    topic = getattr(args, "topic", None) or getattr(args, "name", None) or "TOPIC"
    if isinstance(exc, UnknownTopicError):
        return "\n  see the topics with `laminar topic list`"
    if isinstance(exc, UnknownPartitionError | OffsetOutOfRangeError):
        return f"\n  see each partition's index range with `laminar topic describe {topic}`"
    if isinstance(exc, TopicExistsError):
        return "\n  add --if-not-exists to accept an existing topic"
    return ""


def _error(message: str) -> None:
    print(f"laminar: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
