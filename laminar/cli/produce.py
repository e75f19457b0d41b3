"""`laminar produce TOPIC`: append records from stdin lines or --value flags.

Each line of stdin is one record (its trailing newline removed, bytes kept
as they are). From a pipe, lines are sent in batches: one request holds at
most --batch lines and 1 MiB of them (a longer line goes alone; a line
longer than the node accepts in one request, its --max-frame-bytes, stops
the command with an error naming the limit). From a terminal, each line is
sent as soon as it is typed.

Without --partition, records go where Kafka's producer would put them: with
--key, to the partition the key hashes to (always the same one); without a
key, each batch to one partition and the next batch to the next (sticky per
batch, starting at a random partition), so the lines keep their order
within each partition, not across partitions: give --partition or --key to
keep them all in one order. Batches are idempotent (the client's default):
one whose answer is lost is sent again and appended once.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, BinaryIO, Final

from laminar.cli.common import UsageError
from laminar.cli.output import print_json, say
from laminar.client import Client, LaminarError, RecordTooLargeError, Sent
from laminar.wire import PRODUCER_HEADER, ErrorCode, encode_record

DEFAULT_BATCH = 512
BATCH_BYTES: Final = 1 << 20
"""A batch read from a pipe stops at this many bytes of records (Spark's
writer and Kafka's max.request.size use the same bound): large enough that
the per-request cost does not matter, small enough to keep replication and
acknowledgement latency low."""
FRAME_OVERHEAD_BYTES: Final = 256
"""What a produce request holds besides its records, at most: the frame's
prefix, its header (producer id and sequence), the batch's record count and
the first record's idempotence stamp."""
RECORD_OVERHEAD_BYTES: Final = 4
"""Each record's entry in the batch's length table."""


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
        help=f"records per request when reading a pipe (default {DEFAULT_BATCH}; "
        f"a request also stops at {BATCH_BYTES >> 20} MiB)",
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
        if name == PRODUCER_HEADER:
            raise UsageError(
                f"--header {name!r} is reserved: the client puts its idempotence stamp there"
            )
        headers[name] = value.encode()
    return headers or None


@dataclass(frozen=True, slots=True)
class Sizes:
    """How records are cut into requests: at most `records` per batch, and
    `batch_bytes` of them unless one record alone is larger; no record over
    `record_bytes_max` (the node would refuse the request)."""

    records: int
    batch_bytes: int
    record_bytes_max: int
    record_overhead: int
    """Bytes each record costs besides its value (key, headers, length)."""


def split_batches(values: Iterable[bytes], sizes: Sizes) -> Iterator[list[bytes]]:
    """`values` in consecutive batches within `sizes` (a value larger than the
    batch bound goes alone)."""
    batch: list[bytes] = []
    size = 0
    for value in values:
        cost = len(value) + sizes.record_overhead
        if batch and (len(batch) >= sizes.records or size + cost > sizes.batch_bytes):
            yield batch
            batch, size = [], 0
        batch.append(value)
        size += cost
    if batch:
        yield batch


def read_lines(stream: BinaryIO, sizes: Sizes) -> Iterator[bytes]:
    """The lines of `stream` without their newline; a line longer than a record
    may be is refused as soon as that many bytes are read (not buffered whole)."""
    longest = sizes.record_bytes_max - sizes.record_overhead
    number = 0
    while line := stream.readline(longest + 2):  # + the newline, + 1 to see it is over
        number += 1
        value = line[:-1] if line.endswith(b"\n") else line
        if len(value) > longest:
            raise _too_long(f"line {number}", sizes)
        yield value


def _too_long(what: str, sizes: Sizes) -> RecordTooLargeError:
    return RecordTooLargeError(
        f"{what} is longer than the node accepts: a request is at most "
        f"{sizes.record_bytes_max + FRAME_OVERHEAD_BYTES} bytes (the node's --max-frame-bytes), "
        f"so a record at most {sizes.record_bytes_max - sizes.record_overhead} bytes",
        code=ErrorCode.RECORD_TOO_LARGE,
    )


def _batches(args: argparse.Namespace, sizes: Sizes) -> Iterator[list[bytes]]:
    if args.value is not None:
        values = [v.encode() for v in args.value]
        for i, value in enumerate(values):
            if len(value) + sizes.record_overhead > sizes.record_bytes_max:
                raise _too_long(f"--value number {i + 1}", sizes)
        yield from split_batches(values, sizes)
        return
    stdin = sys.stdin.buffer
    if sys.stdin.isatty():
        say("reading records from the terminal, one per line; end with Ctrl-D")
        for line in read_lines(stdin, sizes):
            yield [line]
        return
    yield from split_batches(read_lines(stdin, sizes), sizes)


def produce(client: Client, args: argparse.Namespace) -> int:
    if args.batch < 1:
        raise UsageError(f"--batch must be at least 1, got {args.batch}")
    headers = _headers(args.header)
    key = args.key.encode() if args.key is not None else None
    frame_room = client.cluster.max_frame_bytes - FRAME_OVERHEAD_BYTES
    record_overhead = len(encode_record(b"", key, headers)) + RECORD_OVERHEAD_BYTES
    sizes = Sizes(args.batch, min(BATCH_BYTES, frame_room), frame_room, record_overhead)
    sent: list[Sent] = []
    try:
        for batch in _batches(args, sizes):
            keys = [key] * len(batch) if key is not None else None
            hdrs = [headers] * len(batch) if headers is not None else None
            if args.partition is not None:
                first = client.produce(args.topic, args.partition, batch, keys, hdrs)
                sent.append(Sent(args.partition, first, len(batch)))
            else:
                sent += client.send(args.topic, batch, keys, hdrs)
    except LaminarError:
        if sent:  # what was appended before the error (which main reports)
            _report(args, sent, " before this error:")
        raise
    _report(args, sent)
    return 0


def _report(args: argparse.Namespace, sent: list[Sent], after: str = "") -> None:
    """What was produced: JSON on stdout with --json, else a line on stderr."""
    if args.json:
        print_json(
            {
                "topic": args.topic,
                "records": sum(s.records for s in sent),
                "partitions": [dataclasses.asdict(part) for part in by_partition(sent)],
            }
        )
    elif not sent:
        say("no records to produce (stdin was empty)")
    else:
        say(_summary(args.topic, sent) + after)


@dataclass(frozen=True, slots=True)
class PartitionSent:
    """What one partition got: its records, and the indexes of the first and last
    (records of other producers may lie between)."""

    partition: int
    records: int
    first_index: int
    last_index: int


def by_partition(sent: list[Sent]) -> list[PartitionSent]:
    """The batches sent, summed up per partition (by partition number)."""
    parts: dict[int, PartitionSent] = {}
    for s in sent:
        last = s.first_index + s.records - 1
        seen = parts.get(s.partition)
        if seen is None:
            parts[s.partition] = PartitionSent(s.partition, s.records, s.first_index, last)
        else:
            parts[s.partition] = replace(seen, records=seen.records + s.records, last_index=last)
    return [parts[p] for p in sorted(parts)]


def _summary(topic: str, sent: list[Sent]) -> str:
    """'produced 3 records to t/1 at indexes 0..2', or a part per partition."""
    total = sum(s.records for s in sent)
    plural = "s" if total != 1 else ""
    parts = by_partition(sent)
    if len(parts) == 1:
        return (
            f"produced {total} record{plural} to {topic}/{parts[0].partition} at {_where(parts[0])}"
        )
    spread = ", ".join(f"{p.records} to partition {p.partition} at {_where(p)}" for p in parts)
    return f"produced {total} record{plural} to {topic}: {spread}"


def _where(part: PartitionSent) -> str:
    if part.records == 1:
        return f"index {part.first_index}"
    return f"indexes {part.first_index}..{part.last_index}"
