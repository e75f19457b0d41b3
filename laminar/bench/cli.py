"""`laminar-bench`: parse the command line, run the comparison, write the outputs.

    laminar-bench --compare laminar,nats-jetstream,redis-streams \
        --workload produce --load open --rate 2000 --duration 10 --rounds 3

Without `--compare`/`--target` it runs laminar alone. Outputs go to `--out`
(default `benchmarks/out/<time>` under the current directory): results.json,
latency.png, throughput.png and, with `--markdown`, a Markdown fragment.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from laminar.bench.compare import Comparison, run_comparison
from laminar.bench.config import LOAD_MODELS, START_FROM, WORKLOADS, BenchConfigError, RunConfig
from laminar.bench.machine import filesystem_of, machine_facts
from laminar.bench.output import (
    comparison_from_document,
    read_json,
    results_document,
    write_json,
)
from laminar.bench.progress import make_progress
from laminar.bench.report import markdown, print_report
from laminar.bench.runner import RunPlan
from laminar.bench.servers.process import install_signal_handlers
from laminar.bench.targets import KNOWN_TARGETS, SystemOptions, parse_target


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="laminar-bench",
        description="Latency and throughput of laminar, side by side with its peers.",
        epilog=f"targets: {', '.join(KNOWN_TARGETS)}",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--compare", metavar="A,B,...", help="targets to compare, interleaved")
    which.add_argument("--target", metavar="NAME", help="one target (default: laminar)")
    w = p.add_argument_group("workload")
    w.add_argument("--workload", choices=WORKLOADS, default="produce")
    w.add_argument(
        "--from",
        dest="start_from",
        choices=START_FROM,
        default="beginning",
        help="consume: a prefilled backlog, or the tail while producers write",
    )
    w.add_argument("--load", choices=LOAD_MODELS, default="closed")
    w.add_argument(
        "--rate", type=float, default=0.0, help="open loop: records/s over all producers"
    )
    w.add_argument("--window", type=int, default=8, help="requests in flight per producer")
    w.add_argument("--record-size", dest="record_bytes", type=int, default=1024)
    w.add_argument("--batch", type=int, default=1, help="records per produce request")
    w.add_argument("--partitions", type=int, default=1)
    w.add_argument("--producers", type=int, default=1)
    w.add_argument("--consumers", type=int, default=1)
    w.add_argument(
        "--duration",
        dest="duration_s",
        type=float,
        default=None,
        help="measured seconds (default 10 unless --count)",
    )
    w.add_argument("--count", type=int, default=None, help="measured records per producer")
    w.add_argument("--warmup", dest="warmup_s", type=float, default=2.0)
    w.add_argument(
        "--prefill",
        type=int,
        default=100_000,
        help="records written before consume --from beginning",
    )
    w.add_argument("--fetch-max", dest="fetch_max_records", type=int, default=500)
    w.add_argument("--fetch-wait-ms", dest="fetch_wait_ms", type=int, default=100)
    w.add_argument(
        "--prefetch",
        type=int,
        default=0,
        help="fetches a consumer keeps in flight ahead, where its client can (default 0)",
    )
    w.add_argument("--drain", dest="drain_s", type=float, default=10.0)
    w.add_argument(
        "--pin",
        dest="pin_workers",
        action="store_true",
        help="pin each load-generator process to one CPU",
    )
    r = p.add_argument_group("runs and outputs")
    r.add_argument("--rounds", type=int, default=1)
    r.add_argument(
        "--from-json",
        type=Path,
        default=None,
        metavar="RESULTS",
        help="measure nothing: render tables, plots and Markdown from a results.json",
    )
    r.add_argument("--out", type=Path, default=None, help="directory for JSON and plots")
    r.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where servers keep their data (default: the temp dir)",
    )
    r.add_argument("--keep-data", action="store_true")
    r.add_argument("--markdown", type=Path, default=None, help="also write a Markdown fragment")
    r.add_argument(
        "--markdown-base",
        type=Path,
        default=None,
        help="directory the fragment's plot links are relative to (default: its own)",
    )
    r.add_argument("--no-plots", action="store_true")
    r.add_argument("--progress", choices=("auto", "rich", "lines", "none"), default="auto")
    t = p.add_argument_group("targets")
    t.add_argument(
        "--bootstrap",
        metavar="HOST:PORT",
        help="laminar: use this running node instead of starting one",
    )
    t.add_argument(
        "--laminar-cores", type=int, default=None, help="laminar-node --cores (default: all cores)"
    )
    t.add_argument("--laminar-runtime", choices=("auto", "uring", "asyncio"), default="auto")
    return p


def _config(args: argparse.Namespace) -> RunConfig:
    duration = args.duration_s
    if duration is None and args.count is None:
        duration = 10.0
    return RunConfig(
        workload=args.workload,
        load=args.load,
        start_from=args.start_from,
        rate=args.rate,
        window=args.window,
        record_bytes=args.record_bytes,
        batch=args.batch,
        partitions=args.partitions,
        producers=args.producers,
        consumers=args.consumers,
        duration_s=duration,
        count=args.count,
        warmup_s=args.warmup_s,
        prefill=args.prefill,
        fetch_max_records=args.fetch_max_records,
        fetch_wait_ms=args.fetch_wait_ms,
        prefetch=args.prefetch,
        drain_s=args.drain_s,
        pin_workers=args.pin_workers,
    )


def _targets(args: argparse.Namespace) -> list[str]:
    if args.compare:
        names = [n.strip() for n in args.compare.split(",") if n.strip()]
    else:
        names = [args.target or "laminar"]
    for name in names:
        parse_target(name)
    if len(set(names)) != len(names):
        raise ValueError("a target is named twice")
    return names


def _out_dir(args: argparse.Namespace) -> Path:
    if args.out is not None:
        return Path(args.out)
    base = Path("benchmarks/out") if Path("benchmarks").is_dir() else Path("laminar-bench-out")
    return base / time.strftime("%Y%m%d-%H%M%S")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.from_json is not None:
        return _rerender(args)
    try:
        config = _config(args)
        targets = _targets(args)
        if args.rounds < 1:
            raise ValueError("--rounds must be at least 1")
        if config.consumer_count > config.partitions:
            raise ValueError("--consumers may not exceed --partitions (a consumer per partition)")
    except (BenchConfigError, ValueError) as exc:
        parser.error(str(exc))
    install_signal_handlers()
    workroot = Path(args.workdir or tempfile.gettempdir()) / f"laminar-bench-{os.getpid()}"
    workroot.mkdir(parents=True, exist_ok=True)
    fs = filesystem_of(workroot)
    if fs["type"] in ("tmpfs", "ramfs"):
        print(
            f"laminar-bench: warning: {workroot} is on {fs['type']}: fsync costs nothing there, "
            "so durability settings make no difference",
            file=sys.stderr,
        )
    machine = machine_facts(workroot)
    options = SystemOptions(
        laminar_bootstrap=args.bootstrap,
        laminar_cores=args.laminar_cores,
        laminar_runtime=args.laminar_runtime,
    )
    command = ["laminar-bench", *(sys.argv[1:] if argv is None else argv)]
    progress = make_progress(args.progress)
    try:
        comparison = run_comparison(
            targets, RunPlan(config, workroot, args.keep_data), args.rounds, options, progress
        )
    finally:
        progress.close()
        if not args.keep_data:
            _remove_empty(workroot)
    target_options = {
        "bootstrap": args.bootstrap,
        "laminar_cores": args.laminar_cores or os.cpu_count(),
        "laminar_runtime": args.laminar_runtime,
    }
    document = results_document(comparison, command, machine, target_options)
    _render(args, comparison, document)
    failed = sum(1 for r in comparison.runs if not r.ok)
    return 1 if failed == len(comparison.runs) else 0


def _rerender(args: argparse.Namespace) -> int:
    """Tables, plots, JSON and Markdown again from a saved results file."""
    document = read_json(args.from_json)
    comparison = comparison_from_document(document)
    document = results_document(
        comparison, document["command"], document["machine"], document["target_options"]
    )
    _render(args, comparison, document)
    return 0


def _render(args: argparse.Namespace, comparison: Comparison, document: dict[str, Any]) -> None:
    print_report(comparison)
    out = _out_dir(args)
    out.mkdir(parents=True, exist_ok=True)
    plots: list[str] = []
    if not args.no_plots:
        from laminar.bench.plots import plot_latency, plot_throughput

        plots = [
            plot_latency(comparison, out / "latency.png").name,
            plot_throughput(comparison, out / "throughput.png").name,
        ]
    path = write_json(document, out / "results.json")
    print(f"results: {path}" + "".join(f", {out / p}" for p in plots))
    if args.markdown is not None:
        base = args.markdown_base or args.markdown.parent
        links = [os.path.relpath(out / p, base) for p in plots]
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        text = markdown(comparison, shlex.join(document["command"]), links, document["machine"])
        args.markdown.write_text(text)
        print(f"markdown: {args.markdown}")


def _remove_empty(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()
