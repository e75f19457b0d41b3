"""What the input bounds of issue 11 cost per frame: before and after, in one run.

    .venv/bin/python benchmarks/bounds_bench.py [--rounds 7] [--frames 20000]

The node now decodes every request with `REQUEST_HEADER_LIMITS` and per-op
frame limits, and charges each request to the shard's input budget. This
measures, in one process and interleaved (rotated order, medians):

- `decode`: a `FrameDecoder` fed a buffer of pipelined small produce frames
  (the common request), the codec as it was before the bounds (`--before`, a
  git revision, loaded from git into a module of its own) against the codec
  now, with the limits a shard uses; plus the budget's per-request work
  (`InputBudget.admit` and `release`);
- `table`: packing a fetch table of 1, 10, 100 and 4096 records, one struct
  per count (before) against chunked structs (now).

Prints one JSON object; the ratios are the figures to read.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from laminar.shards.budget import InputBudget
from laminar.wire import REQUEST_HEADER_LIMITS, ProduceRequest, codec, request_frame_limits
from laminar.wire.records import encode_fetch_columns

REPO = Path(__file__).resolve().parent.parent


def load_before(revision: str) -> ModuleType:
    """The codec module as it was at `revision`, imported under another name."""
    text = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{revision}:laminar/wire/codec.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "codec_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("codec_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def decode_ns(
    make_decoder: Any, need_data: object, stream: bytes, frames: int, budget: bool
) -> float:
    """Nanoseconds per frame to decode `stream` (and charge the budget)."""
    decoder = make_decoder()
    held = InputBudget(1 << 40)
    start = time.perf_counter_ns()
    decoder.feed(stream)
    while (frame := decoder.next_frame()) is not need_data:
        if budget:  # what a connection does per request
            held.release(held.admit(decoder.last_frame_bytes, len(frame.payload)))
    took = time.perf_counter_ns() - start
    return took / frames


def table_ns(encode: Any, count: int, repeat: int) -> float:
    """Nanoseconds to encode a fetch batch's table of `count` records from the
    log's columns (what a fetch answer does; the blobs are not copied)."""
    timestamps = [1_700_000_000_000 + i for i in range(count)]
    lengths = [100] * count
    start = time.perf_counter_ns()
    for _ in range(repeat):
        encode(7, timestamps, lengths, b"")
    return (time.perf_counter_ns() - start) / repeat


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--frames", type=int, default=20_000)
    p.add_argument("--before", default="037a04e", help="git revision before the bounds")
    args = p.parse_args()

    before = load_before(args.before)
    frame = ProduceRequest.from_values((1 << 32) | 3, [b"v" * 100]).encode(7)
    stream = frame * args.frames
    limits = request_frame_limits(codec.DEFAULT_MAX_FRAME_BYTES, 64 << 10)
    variants = {
        "decode_before": lambda: decode_ns(
            lambda: before.FrameDecoder(len(stream)),
            before.NEED_DATA,
            stream,
            args.frames,
            False,
        ),
        "decode_now": lambda: decode_ns(
            lambda: codec.FrameDecoder(
                len(stream), frame_limits=limits, header_limits=REQUEST_HEADER_LIMITS
            ),
            codec.NEED_DATA,
            stream,
            args.frames,
            True,
        ),
    }

    @functools.lru_cache(maxsize=128)
    def fetch_table(count: int) -> struct.Struct:  # as before: a struct per count
        return struct.Struct(">I" + "QQI" * count)

    def encode_before(
        first_index: int, timestamps_ms: list[int], lengths: list[int], blobs: bytes
    ) -> list[bytes]:  # encode_fetch_columns as it was
        count = len(lengths)
        fields: list[int] = [0] * (3 * count)
        fields[0::3] = range(first_index, first_index + count)
        fields[1::3] = timestamps_ms
        fields[2::3] = lengths
        return [fetch_table(count).pack(count, *fields), blobs]

    for count in (1, 10, 100, 4096):
        repeat = max(20, 20_000 // count)
        variants[f"table_{count}_before"] = lambda c=count, r=repeat: table_ns(encode_before, c, r)
        variants[f"table_{count}_now"] = lambda c=count, r=repeat: table_ns(
            encode_fetch_columns, c, r
        )

    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]  # rotate the order
        for name in order:
            samples[name].append(variants[name]())
    medians = {name: statistics.median(v) for name, v in samples.items()}
    ratios = {"decode": medians["decode_now"] / medians["decode_before"]}
    for count in (1, 10, 100, 4096):
        ratios[f"table_{count}"] = medians[f"table_{count}_now"] / medians[f"table_{count}_before"]
    print(json.dumps({"ns_median": medians, "ratio_now_over_before": ratios}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
