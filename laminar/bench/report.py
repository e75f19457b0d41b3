"""Tables of a comparison: on the terminal (rich) and as Markdown.

Both show the same rows: per target the medians over rounds (throughput,
latency percentiles of the workload's primary histogram), its durability in
words, how many rounds failed or had errors; then the ratios against the
first target; then every single run, failures with their reasons included.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from laminar.bench.compare import LATENCY_FIELDS, RATE_HELD, Comparison, TargetSummary
from laminar.bench.kafka_goal import kafka_checks
from laminar.bench.replication_goal import replication_checks
from laminar.bench.runner import headline

_LATENCY_NAMES = {
    "p50_us": "p50",
    "p90_us": "p90",
    "p99_us": "p99",
    "p999_us": "p99.9",
    "max_us": "max",
}


def _ms(us: float | None) -> str:
    if us is None:
        return "-"
    return f"{us / 1000:.2f}" if us < 100_000 else f"{us / 1000:.0f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def summary_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    metric = comparison.config.primary_metric
    headers = [
        "target",
        "durability",
        "rounds ok",
        "records/s",
        "MiB/s",
        *(f"{metric} {_LATENCY_NAMES[f]} ms" for f in LATENCY_FIELDS),
        "errors",
        "generator CPU (busiest, of a core)",
        "server CPU (cores; per process)",
        "server CPU us/record",
        "flags",
    ]
    open_loop = comparison.config.load == "open" and not comparison.config.consumes_backlog
    if open_loop:
        headers.append("sent on time")
    rows = []
    for s in comparison.summaries():
        row = [
            s.target,
            str(s.durability.get("summary", "-")),
            f"{s.runs - s.failed}/{s.runs}",
            _rate(s.records_per_s),
            "-" if s.mib_per_s is None else f"{s.mib_per_s:.1f}",
            *(_ms(s.latency_us.get(f)) for f in LATENCY_FIELDS),
            str(s.errors),
            _share(s.generator_core_share),
            _server_cpu(s.server_cpu_cores, s.server_cpu_by_process),
            _us(s.server_cpu_us_per_record),
            "; ".join(summary_flags(s)) or "-",
        ]
        if open_loop:
            row.append("-" if s.on_time is None else f"{100 * s.on_time:.0f}%")
        rows.append(row)
    return headers, rows


def _floor(floor: dict[str, float] | None) -> str:
    if not floor:
        return "-"
    return f"{floor['p50_us'] / 1000:.2f} / {floor['p99_us'] / 1000:.2f}"


def _server_cpu(total: float | None, by_process: dict[str, float]) -> str:
    """ "0.42", or for several server processes "0.90 (n1 0.50, n2 0.20, n3 0.20)"."""
    if total is None:
        return "-"
    if len(by_process) < 2:
        return f"{total:.2f}"
    parts = ", ".join(f"{name} {cores:.2f}" for name, cores in sorted(by_process.items()))
    return f"{total:.2f} ({parts})"


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


GENERATOR_BOUND_FLAG = "generator-bound: not a server comparison"


def summary_flags(s: TargetSummary) -> list[str]:
    flags = []
    if s.generator_bound:
        flags.append(f"{GENERATOR_BOUND_FLAG} ({s.generator_bound_rounds}/{s.runs} rounds)")
    if s.delivery_failures:
        flags.append(f"identity check failed in {s.delivery_failures} round(s)")
    return flags


def ratio_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    base = comparison.targets[0]
    headers = [
        f"{base} vs",
        "records/s ratio",
        *(f"{_LATENCY_NAMES[f]} ratio" for f in LATENCY_FIELDS),
    ]
    rows = [
        [target, _ratio(r["records_per_s"]), *(_ratio(r[f]) for f in LATENCY_FIELDS)]
        for target, r in comparison.ratios().items()
    ]
    return headers, rows


def run_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    headers = ["round", "target", "status", "load avg", "fdatasync floor p50/p99 ms", "result"]
    rows = []
    for r in sorted(comparison.runs, key=lambda r: (r.round, comparison.targets.index(r.target))):
        extra = ""
        if r.due_ops and comparison.config.load == "open":
            extra = f"; {r.issued_ops}/{r.due_ops} requests issued, {r.late_ops} late > 1 ms"
        if r.unfinished_ops:
            extra += f"; {r.unfinished_ops} unanswered"
        if r.generator_core_share is not None:
            extra += f"; generator CPU {_share(r.generator_core_share)}"
        if r.server_cpu_cores is not None:
            extra += f", server {_server_cpu(r.server_cpu_cores, r.server_cpu_by_process)} cores"
        if r.generator_bound:
            extra += f" ({GENERATOR_BOUND_FLAG})"
        if r.delivery is not None:
            d = r.delivery
            extra += f"; identity check: {d['read']:,} read, {d['acknowledged']:,} acknowledged" + (
                ""
                if d["ok"]
                else f", {d['lost']} lost, {d['duplicated']} duplicated, {d['phantom']} phantom"
            )
        rows.append(
            [
                str(r.round),
                r.target,
                r.status,
                f"{r.loadavg_at_start[0]:.2f}",
                _floor(r.fsync_floor_us),
                headline(r, comparison.config) + extra,
            ]
        )
    return headers, rows


def goal_lines(comparison: Comparison) -> list[str]:
    goal = comparison.goal()
    if goal is None:
        return []
    if "throughput_ratio" in goal:
        text = (
            f"throughput {_ratio(goal['throughput_ratio'])} of {goal['best_throughput_peer']} "
            f"(goal >= 1.0x: {'met' if goal['throughput_met'] else 'missed'})"
        )
    elif goal.get("rate_not_held"):
        text = (
            f"p99 {_ratio(goal['p99_ratio'])} of {goal['best_p99_peer']}, not judged: "
            f"{', '.join(goal['rate_not_held'])} did not hold the rate (delivered less than "
            f"{RATE_HELD:.0%} of it): the latencies are backlog, not service times"
        )
    else:
        text = (
            f"p99 {_ratio(goal['p99_ratio'])} of {goal['best_p99_peer']} at a fixed rate "
            f"(goal <= 1.0x: {'met' if goal['p99_met'] else 'missed'})"
        )
    if goal["generator_bound"]:
        text += f"; {', '.join(goal['generator_bound'])}: {GENERATOR_BOUND_FLAG}"
    return [f"{goal['baseline']} against the best peer that acks after fsync: {text}"]


def all_goal_lines(comparison: Comparison) -> list[str]:
    """The peer goal, the replication goals (`laminar.bench.replication_goal`)
    and the Kafka door's (`laminar.bench.kafka_goal`)."""
    summaries = comparison.summaries()
    checks = replication_checks(comparison.config, summaries)
    checks += kafka_checks(comparison.config, summaries)
    return goal_lines(comparison) + [check.line() for check in checks]


def durability_lines(summaries: Sequence[TargetSummary]) -> list[str]:
    return [f"{s.target}: {s.durability.get('detail', 'not started')}" for s in summaries]


def print_report(comparison: Comparison, console: Console | None = None) -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=160)
    title = comparison.config.describe()
    for caption, (headers, rows) in (
        (f"medians over {comparison.rounds} round(s): {title}", summary_rows(comparison)),
        (
            "ratios of medians (records/s: higher is better for the first target; latency: lower)",
            ratio_rows(comparison),
        ),
        ("every run", run_rows(comparison)),
    ):
        if not rows:
            continue
        table = Table(title=caption, title_justify="left")
        for h in headers:
            table.add_column(h, overflow="fold")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    for line in all_goal_lines(comparison):
        console.print(f"goal: {line}")
    for line in durability_lines(comparison.summaries()):
        console.print(f"durability: {line}", highlight=False)


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    def esc(cell: str) -> str:
        return cell.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def machine_line(machine: dict[str, Any]) -> str:
    fs = machine.get("workdir_filesystem", {})
    load = machine.get("loadavg_at_start") or [0.0]
    return (
        f"{machine.get('cores')} cores ({machine.get('cpu_model')}), kernel "
        f"{machine.get('kernel')}, Python {machine.get('python')}, data on "
        f"{fs.get('type', '?')}, load average {load[0]:.2f} at start, commit "
        f"{machine.get('laminar_commit')}"
    )


def markdown(
    comparison: Comparison,
    command: str,
    plots: Sequence[str] = (),
    machine: dict[str, Any] | None = None,
) -> str:
    """A Markdown section for RESULTS.md: the command, the tables, the plots
    (`plots` are links as they should appear), durability and versions."""
    parts = [
        f"### {comparison.config.describe()}",
        "",
        f"`{command}`",
        "",
    ]
    if machine is not None:
        parts += [f"Machine: {machine_line(machine)}.", ""]
    floors = sorted(r.fsync_floor_us["p50_us"] for r in comparison.runs if r.fsync_floor_us)
    loads = sorted(r.loadavg_at_start[0] for r in comparison.runs)
    if floors:
        parts += [
            f"Bare 1 KiB pwritev+fdatasync floor measured before each run: p50 "
            f"{floors[len(floors) // 2] / 1000:.2f} ms (from {floors[0] / 1000:.2f} to "
            f"{floors[-1] / 1000:.2f} ms); load average {loads[0]:.2f} to {loads[-1]:.2f}.",
            "",
        ]
    parts += [
        f"Medians over {comparison.rounds} interleaved round(s):",
        "",
        _md_table(*summary_rows(comparison)),
        "",
    ]
    headers, rows = ratio_rows(comparison)
    if rows:
        parts += ["Ratios of medians:", "", _md_table(headers, rows), ""]
    for line in all_goal_lines(comparison):
        parts += [f"Goal check: {line}.", ""]
    for plot in plots:
        parts += [f"![{Path(plot).name}]({plot})", ""]
    parts += ["<details><summary>every run</summary>", "", _md_table(*run_rows(comparison)), ""]
    parts += ["</details>", ""]
    summaries = comparison.summaries()
    parts += ["<details><summary>durability and versions</summary>", ""]
    for s in summaries:
        versions = ", ".join(f"{k} {v}" for k, v in s.versions.items())
        parts.append(f"- {s.target}: {s.durability.get('detail', 'not started')} ({versions})")
    parts += ["", "</details>", ""]
    return "\n".join(parts)
