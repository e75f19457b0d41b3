"""What the producer stamp costs a consumer: `fetched_records` and
`RecordBatch` over one fetch answer of 4,096 100-byte records, bare values
against the same values each stamped as its own batch (batch-1 idempotent
produces: the worst case, every record carries a stamp), and against stamped
records decoded one by one with msgpack (what a stamp cost a consumer before
the bulk path knew it: the loop of `_fetched_one_by_one` with `decode_record`).
One process, variants in rotated order per round, medians.

    .venv/bin/python benchmarks/stamp_consume_probe.py --rounds 15
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from laminar.client.batch import RecordBatch
from laminar.client.results import Record, fetched_records
from laminar.wire import (
    FetchedRecord,
    FetchResponse,
    Frame,
    ProducerStamp,
    decode_record,
    encode_record,
)
from laminar.wire.records import stamp_only_record

COUNT = 4096
_ENTRY = struct.Struct(">QQI")


def with_msgpack(payload: bytes) -> list[Record]:
    """Records decoded one by one, headers through msgpack, the stamp dropped."""
    out = []
    pos = table_end = 4 + _ENTRY.size * COUNT
    for index, timestamp_ms, size in _ENTRY.iter_unpack(payload[4:table_end]):
        value, key, headers = decode_record(payload[pos : pos + size])
        headers = {k: v for k, v in (headers or {}).items() if k != "laminar.producer"} or None
        out.append(tuple.__new__(Record, (index, timestamp_ms, value, key, headers)))
        pos += size
    return out


def frame(stamped: bool) -> Frame:
    values = [b"%08d" % i + b"x" * 92 for i in range(COUNT)]
    blobs = [
        stamp_only_record(v, ProducerStamp(7, i, 1)) if stamped else encode_record(v)
        for i, v in enumerate(values)
    ]
    records = tuple(FetchedRecord(i, 1_700_000_000_000, b) for i, b in enumerate(blobs))
    return FetchResponse(1, records, 0, COUNT, COUNT).to_frame(1)


def timed(fn: Callable[[], object], repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat / COUNT * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    bare, stamped = frame(False), frame(True)
    variants: dict[str, Callable[[], object]] = {
        "fetch bare": lambda: fetched_records(bare),
        "fetch stamped": lambda: fetched_records(stamped),
        "stamped, msgpack per record": lambda: with_msgpack(stamped.payload),
        "batch values bare": lambda: RecordBatch.from_frame(bare, 0).values(),
        "batch values stamped": lambda: RecordBatch.from_frame(stamped, 0).values(),
    }
    assert fetched_records(bare) == fetched_records(stamped) == with_msgpack(stamped.payload)
    names = list(variants)
    ns: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            ns[name].append(timed(variants[name], args.repeat))
    for name in names:
        print(f"{name:28s} {statistics.median(ns[name]):7.1f} ns/record")


if __name__ == "__main__":
    main()
