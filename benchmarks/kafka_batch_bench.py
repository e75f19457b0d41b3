"""The Kafka door's record batch conversions, per record, next to pure Python.

    .venv/bin/python benchmarks/kafka_batch_bench.py [--seconds 0.2] [--rounds 5]

Prints one JSON object: ns per record of `decode_produce` (one produced
RecordBatch v2 to laminar blobs: CRC-32C, C split, the Python slice per blob)
and `encode_fetch` (a LogBatch to one RecordBatch v2), for 100 B and 1 KiB
values, batches of 1, 64 and 1000 records, with and without two headers; the
same conversions by kafka-python 3's record code (pure Python: its reader with
the CRC check, its builder) as the stand-in for doing them in Python; the
decode of compressed 1000 x 1 KiB batches; and CRC-32C throughput (laminar's
C loop, google-crc32c with and without the slice copy it needs). Medians over
rounds; ratios within one run are what to compare (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from array import array
from collections.abc import Callable
from typing import Any

import google_crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from laminar._native import ffi, lib

from laminar.kafka.batches import decode_produce, encode_fetch
from laminar.log.record import LogBatch

MAX_BYTES = 64 << 20
HEADERS = [("trace-id", b"0123456789abcdef"), ("source", b"billing")]
CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def kafka_batch(count: int, size: int, headers: bool, codec: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 30)
    for k in range(count):
        value = os.urandom(size // 2) + bytes(size - size // 2)  # half compressible
        builder.append(k, 1_700_000_000_000 + k, b"key-%d" % k, value, HEADERS if headers else [])
    return bytes(builder.build())


def per_call_ns(call: Callable[[], object], seconds: float, rounds: int) -> float:
    """Median over rounds of the mean time of one call, in ns."""
    loops = 1
    while True:
        started = time.perf_counter()
        for _ in range(loops):
            call()
        if time.perf_counter() - started > seconds / 4:
            break
        loops *= 2
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(loops):
            call()
        samples.append((time.perf_counter() - started) / loops * 1e9)
    return statistics.median(samples)


def kafka_python_read(data: bytes) -> None:
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    for record in batch:
        record.key, record.value, record.headers  # noqa: B018 (read every field)


def conversions(seconds: float, rounds: int) -> list[dict[str, Any]]:
    rows = []
    for size in (100, 1024):
        for count in (1, 64, 1000):
            for headers in (False, True):
                data = kafka_batch(count, size, headers)
                blobs = decode_produce(data, max_bytes=MAX_BYTES).blobs
                log = LogBatch(
                    0,
                    array("Q", [1] * count),
                    array("Q", range(1_700_000_000_000, 1_700_000_000_000 + count)),
                    array("I", map(len, blobs)),
                    b"".join(blobs),
                )
                records = [
                    (b"key-%d" % k, bytes(size), HEADERS if headers else []) for k in range(count)
                ]

                def kafka_python_build(records: list[Any] = records) -> None:
                    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
                    for k, (key, value, hs) in enumerate(records):
                        builder.append(k, 1_700_000_000_000 + k, key, value, hs)
                    builder.build()

                timings = {
                    "decode_produce": per_call_ns(
                        lambda data=data: decode_produce(data, max_bytes=MAX_BYTES),
                        seconds,
                        rounds,
                    ),
                    "kafka_python_read": per_call_ns(
                        lambda data=data: kafka_python_read(data), seconds, rounds
                    ),
                    "encode_fetch": per_call_ns(lambda log=log: encode_fetch(log), seconds, rounds),
                    "kafka_python_build": per_call_ns(kafka_python_build, seconds, rounds),
                }
                rows.append(
                    {
                        "value_bytes": size,
                        "records": count,
                        "headers": len(HEADERS) if headers else 0,
                        **{
                            f"{name}_ns_per_record": round(ns / count)
                            for name, ns in timings.items()
                        },
                    }
                )
    return rows


def compressed(seconds: float, rounds: int) -> dict[str, int]:
    out = {}
    for name, codec in CODECS.items():
        data = kafka_batch(1000, 1024, False, codec)
        ns = per_call_ns(
            lambda data=data: decode_produce(data, max_bytes=MAX_BYTES), seconds, rounds
        )
        out[f"{name}_decode_produce_ns_per_record"] = round(ns / 1000)
    return out


def crc32c(seconds: float, rounds: int) -> dict[str, float]:
    out = {}
    for size in (1 << 10, 64 << 10, 1 << 20):
        data = os.urandom(size + 21)
        view = memoryview(data)

        def laminar_c(view: memoryview = view) -> int:
            with ffi.from_buffer(view[21:]) as buffer:
                return int(lib.laminar_crc32c(buffer, len(view) - 21))

        assert laminar_c() == google_crc32c.value(data[21:])
        for name, call in (
            ("laminar_c", laminar_c),
            (
                "google_crc32c_with_slice_copy",
                lambda view=view: google_crc32c.value(bytes(view[21:])),
            ),
            ("google_crc32c_on_bytes", lambda data=data: google_crc32c.value(data)),
        ):
            ns = per_call_ns(call, seconds, rounds)
            out[f"{name}_{size >> 10}KiB_MB_per_s"] = round(size / ns * 1e3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=0.2, help="time per measurement")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    result = {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "conversions": conversions(args.seconds, args.rounds),
        "compressed_1000x1KiB": compressed(args.seconds, args.rounds),
        "crc32c": crc32c(args.seconds, args.rounds),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
