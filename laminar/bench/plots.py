"""PNG plots of a comparison, drawn with matplotlib's Agg backend (no display).

- latency: the median percentiles of each target side by side (log scale),
  next to the full HDR percentile spectrum of each target's rounds merged;
- throughput: the median records/s of each target, each round as a dot.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from laminar.bench.compare import LATENCY_FIELDS, Comparison

_LABELS = ["p50", "p90", "p99", "p99.9", "max"]


def plot_latency(comparison: Comparison, path: Path) -> Path:
    metric = comparison.config.primary_metric
    summaries = comparison.summaries()
    fig, (bars, spectrum) = plt.subplots(1, 2, figsize=(13, 5))
    width = 0.8 / max(1, len(summaries))
    for i, s in enumerate(summaries):
        values = [s.latency_us.get(f, 0.0) / 1000 for f in LATENCY_FIELDS]
        xs = [x + i * width for x in range(len(LATENCY_FIELDS))]
        bars.bar(xs, values, width=width, label=s.target)
    bars.set_xticks([x + width * (len(summaries) - 1) / 2 for x in range(len(LATENCY_FIELDS))])
    bars.set_xticklabels(_LABELS)
    bars.set_yscale("log")
    bars.set_ylabel(f"{metric} latency, ms (median over rounds)")
    bars.grid(axis="y", which="both", alpha=0.3)
    for s in summaries:
        points = comparison.merged_histogram(s.target, metric).spectrum()
        points = [(p, v) for p, v in points if p < 100.0]
        if not points:
            continue
        xs = [1.0 / (1.0 - p / 100.0) for p, _ in points]
        spectrum.plot(xs, [v / 1000 for _, v in points], label=s.target)
    spectrum.set_xscale("log")
    spectrum.set_yscale("log")
    ticks = [1, 2, 10, 100, 1000, 10000]
    spectrum.set_xticks(ticks)
    spectrum.set_xticklabels(["0%", "50%", "90%", "99%", "99.9%", "99.99%"])
    spectrum.set_xlabel("percentile")
    spectrum.set_ylabel(f"{metric} latency, ms (all rounds merged)")
    spectrum.grid(which="both", alpha=0.3)
    handles, labels = bars.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize="small")
    fig.suptitle(comparison.config.describe(), fontsize="medium")
    fig.tight_layout(rect=(0.0, 0.06, 1.0, 1.0))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_throughput(comparison: Comparison, path: Path) -> Path:
    summaries = comparison.summaries()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    names = [s.target for s in summaries]
    medians = [s.records_per_s or 0.0 for s in summaries]
    ax.bar(range(len(names)), medians, color="#7aa6c2", label="median")
    side = "produce" if comparison.config.workload == "produce" else "consume"
    for i, name in enumerate(names):
        rounds = [
            getattr(r, side).records_per_s
            for r in comparison.runs_of(name)
            if r.ok and getattr(r, side) is not None
        ]
        ax.scatter([i] * len(rounds), rounds, color="black", s=12, zorder=3)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=15, fontsize="small")
    ax.set_ylabel(f"{side}d records/s (bars: median; dots: rounds)")
    ax.grid(axis="y", alpha=0.3)
    fig.suptitle(comparison.config.describe(), fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
