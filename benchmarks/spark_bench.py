"""Rows/s of the Spark connector next to the plain client, in one run.

    .venv/bin/python benchmarks/spark_bench.py [--records 1000000] [--value-bytes 100]
        [--partitions 4] [--cores 2] [--rounds 3] [--bootstrap HOST:PORT]

Starts `laminar-node --cores N` on ephemeral ports (unless `--bootstrap` names
a running node), fills a topic with `--records` records of `--value-bytes`
bytes through the plain client, then measures, on the same data:

- `client_produce`: the plain client producing them (pipelined batches of 5000);
- `client_fetch`: the plain client reading them back (`Client.fetch`, records
  decoded into Python tuples), one partition after the other;
- `connector_fetch_arrow`: the connector's task read loop (`read_split`: raw
  fetch answers decoded into Arrow in bulk) in this process, without Spark;
- `spark_read_count`: `spark.read.format("laminar")...load().count()`;
- `spark_read_to_parquet`: the same read written with `.write.parquet(...)`;
- `spark_write_exactly_once` and `spark_write_at_least_once`: `spark.range(N)`
  as `--value-bytes` values (each holding its row id) written into a new topic
  with `df.write.format("laminar")`, with the default exactly-once protocol
  (tasks stage, the driver commits) and with `guarantee=at-least-once` (tasks
  append as they go: the old plain write). The two alternate within each
  round (order rotated), and every written topic is read back and checked by
  identity: each row id exactly once. `exactly_once_cost` is the ratio of
  the medians of their times (target: at most 1.5);
- with `--vs-parquet` (issue 23's comparison, instead of all the above): the
  topic filled with random values (incompressible: Parquet would shrink
  repeated ones to almost nothing) and the same rows as Parquet files on
  local disk next to it, rounds rotated:
  a batch read (`count` and `sum(length(value))`, both checked against what
  was written) from each, and a write of `spark.range(N)` into a new topic
  (the default exactly-once protocol, identity-checked) against
  `df.write.parquet`; Spark's and the node's CPU per operation;
- `spark_canned_count`: a control: the same `count()` over a Python data
  source that yields the same Arrow batches from memory (no node, no network),
  i.e. what Spark itself costs for this schema on this machine.

The node serves each partition from one shard (one core), so the JSON says
how many of the topic's partitions each shard owns: a read cannot go faster
than its busiest shard. Spark runs `local[<cores>]` with the UI off. Each
Spark figure is the median of `--rounds` runs after one warm-up run (JVM and
Python workers started). The
machine's load average is recorded: the test machines are shared, and a
neighbour's load moves every figure. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
READ_TARGET_ROWS_PER_S = 1_000_000


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def start_node(base: Path, cores: int) -> tuple[subprocess.Popen[bytes], str]:
    log_path = base / "node.log"
    with open(log_path, "wb") as out:
        node = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "laminar.cli.node",
                "--cores",
                str(cores),
                "--port",
                "0",
                "--data-dir",
                str(base / "data"),
                "--log-level",
                "WARNING",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    info_path = base / "data" / "run" / "node.json"
    deadline = time.monotonic() + 60
    while True:
        try:
            info = json.loads(info_path.read_text())
            if info.get("pid") == node.pid:
                return node, f"{info['host']}:{info['port']}"
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        if node.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("laminar-node did not start:\n" + log_path.read_text())
        time.sleep(0.05)


def timed(fn: Callable[[], int]) -> float:
    """Rows/s of `fn`, which returns how many rows it handled."""
    start = time.perf_counter()
    rows = fn()
    return rows / (time.perf_counter() - start)


def spark_rounds(fn: Callable[[], int], rounds: int) -> dict[str, Any]:
    fn()  # warm-up: JVM code paths, Python workers
    runs = [timed(fn) for _ in range(rounds)]
    return {"median": statistics.median(runs), "best": max(runs), "runs": runs}


def fill(
    client: Any, topic: str, records: int, partitions: int, value: bytes, random: bool = False
) -> int:
    """`records` copies of `value`, or with `random` as many random values of
    its length (what Parquet cannot compress away)."""
    batch = 5000
    pending: list[Any] = []
    sent = 0
    i = 0
    while sent < records:
        n = min(batch, records - sent)
        values = [os.urandom(len(value)) for _ in range(n)] if random else [value] * n
        pending.append(client.produce_nowait(topic, i % partitions, values))
        if len(pending) >= 8:
            pending.pop(0).result()
        sent += n
        i += 1
    for p in pending:
        p.result()
    return records


def client_fetch(client: Any, topic: str, partitions: int) -> int:
    rows = 0
    for p in range(partitions):
        index, highest = client.offsets(topic, p)
        while index < highest:
            got = client.fetch(topic, p, index, max_bytes=4 << 20, max_records=65536)
            rows += len(got)
            index = got[-1].index + 1
    return rows


def connector_fetch(bootstrap: str, client: Any, topic: str, partitions: int) -> int:
    from laminar.spark.plan import Range
    from laminar.spark.reading import RangeSplit, read_split

    rows = 0
    for p in range(partitions):
        lowest, highest = client.offsets(topic, p)
        for batch in read_split(RangeSplit(bootstrap, topic, Range(p, lowest, highest))):
            rows += batch.num_rows
    return rows


WRITE_MODES = ("exactly-once", "at-least-once")


def cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of process `pid` and its live descendants (0 for None)."""
    if pid is None:
        return 0.0
    import psutil

    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def write_rounds(
    spark: Any,
    client: Any,
    bootstrap: str,
    records: int,
    value_bytes: int,
    partitions: int,
    rounds: int,
    node_pid: int | None,
) -> dict[str, Any]:
    """Rows/s of both write modes, interleaved (order rotated each round, after
    one warm-up round), each written topic checked by identity then deleted.
    CPU seconds of Spark (this process, its JVM and Python workers: the load
    generator) and of the node are recorded per write."""
    frame = spark.range(records).selectExpr(
        f"CAST(lpad(CAST(id AS STRING), {value_bytes}, 'x') AS BINARY) AS value"
    )
    runs: dict[str, list[float]] = {m: [] for m in WRITE_MODES}
    cpu: dict[str, list[dict[str, float]]] = {m: [] for m in WRITE_MODES}
    for round_no in range(rounds + 1):
        order = WRITE_MODES if round_no % 2 == 0 else WRITE_MODES[::-1]
        for mode in order:
            topic = f"spark-bench-write-{mode}-{round_no}-{int(time.time())}"
            client.create_topic(topic, partitions=partitions)
            spark_cpu, node_cpu = cpu_s(os.getpid()), cpu_s(node_pid)
            start = time.perf_counter()
            frame.write.format("laminar").option("bootstrap", bootstrap).option(
                "topic", topic
            ).option("guarantee", mode).mode("append").save()
            elapsed = time.perf_counter() - start
            used = {
                "spark_cpu_s": cpu_s(os.getpid()) - spark_cpu,
                "node_cpu_s": cpu_s(node_pid) - node_cpu,
                "wall_s": elapsed,
            }
            check_identity(bootstrap, client, topic, partitions, records)
            client.delete_topic(topic)
            if round_no:
                runs[mode].append(records / elapsed)
                cpu[mode].append(used)
            log(f"  {mode}: {records / elapsed:,.0f} rows/s (identity checked)")
    medians = {m: statistics.median(runs[m]) for m in WRITE_MODES}
    return {
        "rows_per_s": {m: {"median": medians[m], "runs": runs[m]} for m in WRITE_MODES},
        "cpu": cpu,
        "exactly_once_cost": medians["at-least-once"] / medians["exactly-once"],
        "cost_target": 1.5,
        "identity_checked": True,
    }


def check_identity(bootstrap: str, client: Any, topic: str, partitions: int, records: int) -> None:
    """Every row id 0..records-1 exactly once in `topic` (values are the id
    left-padded with "x"), read back through the connector's Arrow path."""
    import numpy as np
    import pyarrow.compute as pc

    from laminar.spark.plan import Range
    from laminar.spark.reading import RangeSplit, read_split

    chunks = []
    for p in range(partitions):
        lowest, highest = client.offsets(topic, p)
        for batch in read_split(RangeSplit(bootstrap, topic, Range(p, lowest, highest))):
            text = pc.cast(batch.column(batch.schema.get_field_index("value")), "string")
            chunks.append(pc.cast(pc.utf8_ltrim(text, "x"), "int64").to_numpy())
    ids = np.sort(np.concatenate(chunks)) if chunks else np.array([], np.int64)
    if len(ids) != records or not np.array_equal(ids, np.arange(records)):
        missing = np.setdiff1d(np.arange(records), ids)
        duplicated = len(ids) - len(np.unique(ids))
        raise AssertionError(
            f"{topic}: {len(missing)} row ids missing, {duplicated} duplicated "
            f"(of {records}): delivery is broken"
        )


def parquet_rounds(
    spark: Any,
    client: Any,
    bootstrap: str,
    reader: Callable[[], Any],
    parquet_dir: Path,
    args: argparse.Namespace,
    node_pid: int | None,
) -> dict[str, Any]:
    """Rows/s of the read and the write, laminar against Parquet, in rotated
    rounds after one warm-up round; see the module docstring."""
    from pyspark.sql import functions as F

    reader().select("value").write.mode("overwrite").parquet(str(parquet_dir / "source"))
    want = (args.records, args.records * args.value_bytes)
    frame = spark.range(args.records).selectExpr(
        f"CAST(lpad(CAST(id AS STRING), {args.value_bytes}, 'x') AS BINARY) AS value"
    )

    def read(df: Any) -> None:
        row = df.agg(F.count("*"), F.sum(F.length("value"))).collect()[0]
        if (row[0], row[1]) != want:
            raise AssertionError(f"read {tuple(row)}, wrote {want}")

    Op = tuple[Callable[[], None], Callable[[], None]]  # (timed, checked after)

    def write_laminar(round_no: int) -> Op:
        topic = f"spark-bench-vs-parquet-{round_no}-{time.time_ns()}"
        client.create_topic(topic, partitions=args.partitions)

        def check() -> None:
            check_identity(bootstrap, client, topic, args.partitions, args.records)
            client.delete_topic(topic)

        return (
            lambda: (
                frame.write.format("laminar")
                .option("bootstrap", bootstrap)
                .option("topic", topic)
                .mode("append")
                .save()
            ),
            check,
        )

    def write_parquet(round_no: int) -> Op:
        out = parquet_dir / f"write-{round_no}"

        def check() -> None:
            read(spark.read.parquet(str(out)))
            shutil.rmtree(out)

        return lambda: frame.write.parquet(str(out)), check

    ops: dict[str, Callable[[int], Op]] = {
        "read_laminar": lambda _: (lambda: read(reader()), lambda: None),
        "read_parquet": lambda _: (
            lambda: read(spark.read.parquet(str(parquet_dir / "source"))),
            lambda: None,
        ),
        "write_laminar": write_laminar,
        "write_parquet": write_parquet,
    }
    names = list(ops)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for round_no in range(args.rounds + 1):
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:
            op, check = ops[name](round_no)
            spark_cpu, node_cpu = cpu_s(os.getpid()), cpu_s(node_pid)
            start = time.perf_counter()
            op()
            elapsed = time.perf_counter() - start
            if round_no:
                runs[name].append(
                    {
                        "rows_per_s": args.records / elapsed,
                        "spark_cpu_s": cpu_s(os.getpid()) - spark_cpu,
                        "node_cpu_s": cpu_s(node_pid) - node_cpu,
                    }
                )
            check()
            log(f"  {name}: {args.records / elapsed:,.0f} rows/s (checked)")
    medians = {
        name: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
        for name, rs in runs.items()
    }
    return {
        "medians": medians,
        "read_ratio": medians["read_laminar"]["rows_per_s"] / medians["read_parquet"]["rows_per_s"],
        "write_ratio": medians["write_laminar"]["rows_per_s"]
        / medians["write_parquet"]["rows_per_s"],
        "target_ratio": 0.8,
        "runs": runs,
    }


def canned_source(records: int, value_bytes: int, splits: int) -> type:
    """A data source yielding laminar-shaped Arrow batches from memory (the
    control): built here so cloudpickle ships it by value to the workers."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from laminar.client.arrow import fetch_to_arrow
    from laminar.spark.schema import SCHEMA_DDL
    from laminar.wire.records import encode_fetch_batch

    per_split = records // splits
    chunk = min(per_split, (4 << 20) // (value_bytes + 1))

    class CannedReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(splits)]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            blob = b"\x00" + b"x" * value_bytes
            entries = ((i, 1_700_000_000_000, blob) for i in range(chunk))
            payload = b"".join(bytes(b) for b in encode_fetch_batch(entries))
            done = 0
            while done < per_split:
                n = min(chunk, per_split - done)
                yield fetch_to_arrow(payload, partition.value, n)
                done += n

    class CannedSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "laminar_canned"

        def schema(self) -> str:
            return SCHEMA_DDL

        def reader(self, schema: Any) -> DataSourceReader:
            return CannedReader()

    return CannedSource


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--cores", type=int, default=2, help="node shards and Spark local[N] threads")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bootstrap", help="use this running node instead of starting one")
    p.add_argument(
        "--writes-only", action="store_true", help="only the write comparison (no fill, no reads)"
    )
    p.add_argument(
        "--vs-parquet", action="store_true", help="only the comparison with Parquet files"
    )
    args = p.parse_args()

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from laminar.client import Client

    base = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    node = None
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
        else:
            node, bootstrap = start_node(base, args.cores)
        load_start = os.getloadavg()
        results: dict[str, Any] = {}
        value = b"x" * args.value_bytes
        stamp = int(time.time())
        source = f"spark-bench-{stamp}"
        with Client(bootstrap) as client:
            client.create_topic(source, partitions=args.partitions)
            owners = [d.shard_id for d in client.describe_topic(source).partitions]
            per_shard = {str(s): owners.count(s) for s in sorted(set(owners))}
            log(f"partitions per shard: {per_shard}")
            if not args.writes_only:
                log(f"filling {source} with {args.records} records of {args.value_bytes} bytes")
                results["client_produce"] = timed(
                    lambda: fill(
                        client, source, args.records, args.partitions, value, args.vs_parquet
                    )
                )
            if not (args.writes_only or args.vs_parquet):
                results["client_fetch"] = timed(
                    lambda: client_fetch(client, source, args.partitions)
                )
                results["connector_fetch_arrow"] = timed(
                    lambda: connector_fetch(bootstrap, client, source, args.partitions)
                )

            log("starting Spark")
            from pyspark.sql import SparkSession

            started = time.perf_counter()
            spark = (
                SparkSession.builder.master(f"local[{args.cores}]")
                .config("spark.ui.enabled", "false")
                .config("spark.local.dir", str(base / "spark"))
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            from laminar.spark import LaminarDataSource

            spark.dataSource.register(LaminarDataSource)
            spark.dataSource.register(
                canned_source(args.records, args.value_bytes, args.partitions)
            )
            results["spark_session_start_s"] = time.perf_counter() - started

            def reader() -> Any:
                return (
                    spark.read.format("laminar")
                    .option("bootstrap", bootstrap)
                    .option("topic", source)
                    .load()
                )

            node_pid = node.pid if node is not None else None
            if args.vs_parquet:
                log("spark: laminar against Parquet files, reads and writes")
                results["vs_parquet"] = parquet_rounds(
                    spark, client, bootstrap, reader, base / "parquet", args, node_pid
                )
            elif not args.writes_only:
                log("spark: count")
                results["spark_read_count"] = spark_rounds(
                    lambda: int(reader().count()), args.rounds
                )
                log("spark: parquet")
                out = base / "parquet"

                def to_parquet() -> int:
                    reader().write.mode("overwrite").parquet(str(out))
                    return int(args.records)

                results["spark_read_to_parquet"] = spark_rounds(to_parquet, args.rounds)
                log("spark: canned count (control)")
                results["spark_canned_count"] = spark_rounds(
                    lambda: int(spark.read.format("laminar_canned").load().count()), args.rounds
                )
            if not args.vs_parquet:
                log("spark: writes, exactly-once against at-least-once")
                results["spark_write"] = write_rounds(
                    spark,
                    client,
                    bootstrap,
                    args.records,
                    args.value_bytes,
                    args.partitions,
                    args.rounds,
                    node_pid,
                )
            spark.stop()
        report = {
            "bench": "spark",
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "records": args.records,
            "value_bytes": args.value_bytes,
            "partitions": args.partitions,
            "partitions_per_shard": per_shard,
            "cores": args.cores,
            "rounds": args.rounds,
            "rows_per_s": results,
            "read_target_rows_per_s": READ_TARGET_ROWS_PER_S,
            "read_target_met": (
                results["spark_read_count"]["median"] >= READ_TARGET_ROWS_PER_S
                if "spark_read_count" in results
                else None
            ),
            "machine": {
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "load_avg_start": load_start,
                "load_avg_end": os.getloadavg(),
            },
        }
        print(json.dumps(report, indent=2))
    finally:
        if node is not None:
            node.terminate()
            node.wait(60)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
