"""`laminar produce TOPIC`: append records from stdin lines or --value flags.

Each line of stdin is one record (its trailing newline removed, bytes kept
as they are). From a pipe, lines are sent in batches (one request per
`--batch` lines); from a terminal, each line is sent as soon as it is typed.
Without --partition, a record with --key goes to the partition its key
hashes to (always the same one), and a record without a key to partition 0,
so the order of the lines is kept. Batches are idempotent (the client's
default): one whose answer is lost is sent again and appended once.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from laminar.cli.common import UsageError
from laminar.cli.output import print_json, say
from laminar.client import Client, LaminarError, UnknownTopicError, partition_for_key

DEFAULT_BATCH = 512


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "produce",
        parents=[common],
        help="append records to a topic (stdin lines or --value)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("-p", "--partition", type=int, help="the partition to append to")
    parser.add_argument("-k", "--key", help="the key of every record (UTF-8)")
    parser.add_argument(
        "-v",
        "--value",
        action="append",
        help="a record value (repeatable); stdin is not read when given",
    )
    parser.add_argument(
        "-H",
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a header on every record (repeatable)",
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=DEFAULT_BATCH,
        metavar="N",
        help=f"records per request when reading a pipe (default {DEFAULT_BATCH})",
    )
    parser.add_argument(
        "--no-idempotence",
        dest="idempotent",
        action="store_false",
        help="send plain produces: a batch whose answer is lost is not resent (exit 4) "
        "instead of resent and appended once",
    )
    parser.set_defaults(run=produce)


def _headers(pairs: list[str]) -> dict[str, bytes] | None:
    headers: dict[str, bytes] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--header takes NAME=VALUE, got {pair!r}")
        headers[name] = value.encode()
    return headers or None


def _batches(args: argparse.Namespace) -> Iterator[list[bytes]]:
    if args.value is not None:
        yield [v.encode() for v in args.value]
        return
    stdin = sys.stdin.buffer
    if sys.stdin.isatty():
        say("reading records from the terminal, one per line; end with Ctrl-D")
        for line in iter(stdin.readline, b""):
            yield [_strip(line)]
        return
    lines: Iterable[bytes] = (_strip(line) for line in stdin)
    while batch := list(itertools.islice(lines, args.batch)):
        yield batch


def _strip(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\n") else line


def produce(client: Client, args: argparse.Namespace) -> int:
    if args.batch < 1:
        raise UsageError(f"--batch must be at least 1, got {args.batch}")
    try:
        partitions = client.cluster.topic(args.topic).partitions
    except UnknownTopicError:
        partitions = client.refresh_metadata_view().topic(args.topic).partitions
    key = args.key.encode() if args.key is not None else None
    if args.partition is not None:
        partition = args.partition
    elif key is not None:
        partition = partition_for_key(key, partitions)
    else:
        partition = 0
    headers = _headers(args.header)
    count = 0
    first: int | None = None
    try:
        for batch in _batches(args):
            keys = [key] * len(batch) if key is not None else None
            hdrs = [headers] * len(batch) if headers is not None else None
            index = client.produce(args.topic, partition, batch, keys, hdrs)
            first = index if first is None else first
            count += len(batch)
    except LaminarError:
        if count:
            say(f"{count} records were appended to {args.topic}/{partition} before this error:")
        raise
    if args.json:
        last = None if first is None else first + count - 1
        print_json(
            {
                "topic": args.topic,
                "partition": partition,
                "records": count,
                "first_index": first,
                "last_index": last,
            }
        )
    elif first is None:
        say("no records to produce (stdin was empty)")
    else:
        where = f"index {first}" if count == 1 else f"indexes {first}..{first + count - 1}"
        plural = "s" if count != 1 else ""
        say(f"produced {count} record{plural} to {args.topic}/{partition} at {where}")
    return 0
