"""Encode and decode rates of the wire codec, single-threaded, in frames/s.

    .venv/bin/python benchmarks/wire_bench.py [--seconds 1] [--rounds 3]

Prints one JSON object. The main case is a produce request of 64 records of
1 KiB (the batch the node benchmark sends): encoding it as writev buffers and
as one bytes object, and decoding it from a stream fed in 64 KiB reads, as far
as the raw `Frame` and as far as the `ProduceRequest` with every record
checked. Small requests (fetch) and a 64-record fetch response (what a
consumer decodes) are measured the same way. Figures are medians over rounds.
Not asserted anywhere: timings belong to benchmarks, not tests.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from laminar.placement import partition_id, shard_for
from laminar.wire import (
    NEED_DATA,
    FetchedRecord,
    FetchRequest,
    FetchResponse,
    FrameDecoder,
    Message,
    ProduceRequest,
    decode_request,
    decode_response,
)

RECORDS = 64
RECORD_BYTES = 1024
READ_BYTES = 64 * 1024
PID = partition_id(7, 3)


def rate(fn: Callable[[], int], seconds: float) -> float:
    """Units per second of `fn` (which returns how many units it did) for `seconds`."""
    done = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        done += fn()
        now = time.perf_counter()
        if now >= deadline:
            return done / (now - start)


def encode_case(message: Message, joined: bool) -> Callable[[], int]:
    encode = message.encode if joined else message.encode_buffers

    def run() -> int:
        for corr in range(100):
            encode(corr)
        return 100

    return run


def decode_case(message: Message, full: bool, request: bool) -> Callable[[], int]:
    """Decode a stream of 100 copies of `message`, fed in READ_BYTES reads."""
    stream = b"".join(message.encode(i) for i in range(100))
    reads = [stream[i : i + READ_BYTES] for i in range(0, len(stream), READ_BYTES)]
    decode = decode_request if request else decode_response

    def run() -> int:
        decoder = FrameDecoder()
        n = 0
        for chunk in reads:
            decoder.feed(chunk)
            while (frame := decoder.next_frame()) is not NEED_DATA:
                if full:
                    decode(frame)  # type: ignore[arg-type]
                n += 1
        assert n == 100
        return n

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    values = [os.urandom(RECORD_BYTES) for _ in range(RECORDS)]
    produce = ProduceRequest.from_values(PID, values)
    fetch = FetchRequest(PID, 123_456, max_wait_ms=500)
    blobs = produce.blobs
    fetched = FetchResponse(
        PID,
        tuple(FetchedRecord(1000 + i, 1_700_000_000_000 + i, b) for i, b in enumerate(blobs)),
        0,
        1000 + RECORDS,
        1000 + RECORDS,
    )
    cases: dict[str, Callable[[], int]] = {
        "produce_encode_buffers": encode_case(produce, joined=False),
        "produce_encode_bytes": encode_case(produce, joined=True),
        "produce_decode_frame": decode_case(produce, full=False, request=True),
        "produce_decode_request": decode_case(produce, full=True, request=True),
        "fetch_request_encode": encode_case(fetch, joined=True),
        "fetch_request_decode": decode_case(fetch, full=True, request=True),
        "fetch_response_encode_buffers": encode_case(fetched, joined=False),
        "fetch_response_decode": decode_case(fetched, full=True, request=False),
    }
    pids = [partition_id(t, p) for t in range(1, 101) for p in range(8)]

    def shard_for_cached() -> int:
        for pid in pids:
            shard_for(pid, 8)
        return len(pids)

    rounds: dict[str, list[float]] = {name: [] for name in cases}
    rounds["shard_for_8_shards_per_s"] = []
    for _ in range(args.rounds):
        for name, fn in cases.items():
            rounds[name].append(rate(fn, args.seconds))
        rounds["shard_for_8_shards_per_s"].append(rate(shard_for_cached, args.seconds))

    produce_bytes = len(produce.encode(0))
    frame_bytes = {"produce": produce_bytes, "fetch_response": len(fetched.encode(0))}
    result: dict[str, Any] = {
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "seconds_per_case": args.seconds,
        "rounds": args.rounds,
        "produce_frame_bytes": produce_bytes,
        "records_per_frame": RECORDS,
        "record_bytes": RECORD_BYTES,
    }
    for name, figures in rounds.items():
        med = statistics.median(figures)
        if name.startswith("shard_for"):
            result[name] = round(med)
            continue
        result[f"{name}_frames_per_s"] = round(med)
        kind = "produce" if name.startswith("produce") else "fetch_response"
        if name.startswith(kind):
            result[f"{name}_records_per_s"] = round(med * RECORDS)
            result[f"{name}_mib_per_s"] = round(med * frame_bytes[kind] / (1 << 20), 1)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
