"""What every `laminar` subcommand shares: exit codes, usage errors, common flags."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from enum import IntEnum
from typing import Any, Final

from laminar.client.routing import parse_address, parse_addresses
from laminar.replication.auth import SecretFileError, read_private_file
from laminar.security.scram import password_line

DEFAULT_BOOTSTRAP: Final = "127.0.0.1:7070"


class Exit(IntEnum):
    """Exit codes scripts can rely on (documented in `laminar --help`)."""

    OK = 0
    SERVER_ERROR = 1
    """The node refused the request (unknown topic, out-of-range index...)."""
    USAGE = 2
    """The command line is wrong."""
    CANNOT_CONNECT = 3
    """The node could not be reached, or the connection broke before an answer."""
    OUTCOME_UNKNOWN = 4
    """A produce or topic change was sent but not answered: it may or may not have
    been applied."""
    INTERRUPTED = 130
    """Ctrl-C (except for `consume --follow`, where it is the way to stop: 0)."""


EXIT_CODES_HELP: Final = """\
exit codes:
  0    success
  1    the node refused the request (the message says why: unknown topic, ...)
  2    usage error (bad command line)
  3    cannot reach the node, or the connection broke before an answer
  4    a produce or topic change was sent but not answered: it may or may not
       have been applied (read the partition before sending it again)
  130  interrupted (Ctrl-C); `consume --follow` stopped by Ctrl-C exits 0

errors:
  on stderr, as a message for people; with --json, as one JSON line:
  {"error": {"code": "UNKNOWN_TOPIC", "exit_code": 1, "message": "...",
  "hint": "..." or null}}, where code is the node's error code (a refusal)
  or one of USAGE, CANNOT_CONNECT, CONNECTION_LOST, REQUEST_TIMEOUT,
  OUTCOME_UNKNOWN, REFUSED (the admin endpoint said no). stdout carries
  only results.
"""


class CommandError(Exception):
    """A failure a command reports as it is: its message, the exit code, and
    a name for scripts (the `code` of the --json error)."""

    def __init__(self, message: str, exit_code: Exit, code: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.code = code
        self.hint = hint


class UsageError(CommandError):
    """The command line asks for something impossible; exit 2 with the message."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Exit.USAGE, "USAGE")


def _checked_by(parse: Callable[[str], object], what: str) -> Callable[[str], str]:
    """An argparse type that checks its text with `parse` (and keeps the text)."""

    def check(text: str) -> str:
        try:
            parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    check.__name__ = what
    return check


addresses = _checked_by(parse_addresses, "HOST:PORT[,...]")
"""An argparse type: a list of `HOST:PORT`."""
address = _checked_by(parse_address, "HOST:PORT")
"""An argparse type: one `HOST:PORT`."""


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < seconds < math.inf:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text}")
    return seconds


def parser_default_bootstrap() -> str:
    """The bootstrap a command uses when none is given."""
    return os.environ.get("LAMINAR_BOOTSTRAP") or DEFAULT_BOOTSTRAP


def client_security(args: argparse.Namespace) -> dict[str, Any]:
    """A client's TLS and login arguments, from --tls, --ca-file, --cert-file,
    --key-file, --user and --password-file (or $LAMINAR_USER and
    $LAMINAR_PASSWORD_FILE)."""
    login: dict[str, Any] = {}
    user = getattr(args, "user", None) or os.environ.get("LAMINAR_USER") or None
    password_file = (
        getattr(args, "password_file_login", None)
        or os.environ.get("LAMINAR_PASSWORD_FILE")
        or None
    )
    if user or password_file:
        if not (user and password_file):
            raise UsageError(
                "logging in takes both --user NAME and --password-file FILE "
                "(or $LAMINAR_USER and $LAMINAR_PASSWORD_FILE)"
            )
        login = {"username": user, "password": read_password(password_file)}
    return {
        "tls": bool(args.tls or args.ca_file or args.cert_file),
        "ca_file": args.ca_file,
        "cert_file": args.cert_file,
        "key_file": args.key_file,
        **login,
    }


def read_password(path: str) -> str:
    """The password in an owner-only file (one line; a trailing newline is not
    part of it); `UsageError` saying what is wrong."""
    try:
        text = read_private_file(path, "the password file").decode("utf-8")
    except SecretFileError as exc:
        raise UsageError(str(exc)) from None
    except UnicodeDecodeError:
        raise UsageError(f"the password file {path} is not UTF-8 text") from None
    password = password_line(text)
    if password is None:
        raise UsageError(f"the password file {path} must hold the password on one line")
    return password


def common_parser() -> argparse.ArgumentParser:
    """The flags every leaf command takes: --bootstrap, --json, --timeout."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("connection and output")
    group.add_argument(
        "-b",
        "--bootstrap",
        metavar="HOST:PORT[,...]",
        type=addresses,
        default=parser_default_bootstrap(),
        help="the node to talk to, or several nodes of a cluster (any that answers; "
        "default: $LAMINAR_BOOTSTRAP or %(default)s)",
    )
    group.add_argument(
        "--tls",
        action="store_true",
        help="connect through TLS, checking the node's certificate (--ca-file, else the "
        "system's CAs) and its name",
    )
    group.add_argument(
        "--ca-file",
        metavar="FILE",
        help="PEM CA certificates that sign the node's certificate (implies --tls)",
    )
    group.add_argument(
        "--cert-file",
        metavar="FILE",
        help="PEM client certificate to show the node (implies --tls): a node with "
        "--tls-ca-file logs the client in as User:<its CN>",
    )
    group.add_argument(
        "--key-file", metavar="FILE", help="the --cert-file's private key (if not in it)"
    )
    group.add_argument("--json", action="store_true", help="print JSON for scripts")
    group.add_argument(
        "--timeout",
        type=positive_seconds,
        default=10.0,
        metavar="SECONDS",
        help="give up on an answer after this long (default %(default)s)",
    )
    return common
