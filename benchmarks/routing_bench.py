"""Request routing benchmark (issue 5): small requests over the node port in each
routing mode, next to shard-direct TCP, in one run.

    .venv/bin/python benchmarks/routing_bench.py [--rounds 3] [--seconds 5] [--json out.json]

Variants, each a fresh `laminar-node --cores 2` (ephemeral ports) loaded by a
separate generator process (`routing_load.py`, closed loop, `--inflight`
requests outstanding over `--sockets` UDP sockets, PING requests spread over
64 partitions of one topic):

- `ebpf`: `--routing ebpf --xdp off`: the SK_REUSEPORT program delivers each
  datagram to its owner's socket;
- `ebpf+xdp`: the same with the XDP classifier attached to `lo` (generic
  mode), to show what the classifier costs; only inside a network namespace;
- `cbpf`: `--routing cbpf`: the classic program, same steering, no privilege;
- `userspace`: `--routing userspace`: the kernel hashes each client socket to
  a shard and shards forward requests they do not own (about half of them
  with two shards) over the inter-shard channel;
- `tcp-direct`: the client routes itself: one TCP connection per shard port,
  each request written to its owner's connection, pipelined.

Rounds are interleaved (the variant order rotates every round) and the
summary takes medians over rounds; the ratios to userspace are medians of the
ratios within each round, which neighbours' load on a shared machine moves
less than the rates themselves. As root the whole run happens inside a
throwaway network namespace (its own `lo`), so nothing is attached to the
host's interfaces and other users of the host's `lo` are not measured with
it; `--no-netns` runs on the host (and skips `ebpf+xdp`). The shards pin
themselves to cores 0 and 1; the generator is not pinned unless `--client-cpu`
says so: on a 2-core machine it shares the cores with the shards, as a
co-located client would.

Goal (issue 5): eBPF steering >= 1.3x the request rate of userspace forwarding,
at a lower p99. Prints a summary (stderr), the Markdown table (`--markdown`),
and JSON with every round (`--json FILE`, else stdout).
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
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
LOAD = Path(__file__).resolve().parent / "routing_load.py"
PARTITIONS = 64
GOAL_RATIO = 1.3


@dataclass(frozen=True)
class Variant:
    name: str
    routing: str
    xdp: str
    transport: str  # udp: the node port; tcp: the shard ports


VARIANTS = (
    Variant("ebpf", "ebpf", "off", "udp"),
    Variant("ebpf+xdp", "ebpf", "generic", "udp"),
    Variant("cbpf", "cbpf", "off", "udp"),
    Variant("userspace", "userspace", "off", "udp"),
    Variant("tcp-direct", "userspace", "off", "tcp"),
)


# -- one measurement -------------------------------------------------------------------


def _start_node(
    directory: Path, variant: Variant, cores: int
) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    log_path = directory / "node.log"
    with open(log_path, "wb") as log:
        node = subprocess.Popen(
            [sys.executable, "-m", "laminar.cli.node", "--cores", str(cores), "--port", "0",
             "--data-dir", str(directory / "data"), "--routing", variant.routing,
             "--xdp", variant.xdp, "--log-level", "WARNING"],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
        )  # fmt: skip
    info_path = directory / "data" / "run" / "node.json"
    deadline = time.monotonic() + 60
    while not info_path.exists():
        if node.poll() is not None or time.monotonic() > deadline:
            node.kill()
            raise RuntimeError(f"node did not start:\n{log_path.read_text()}")
        time.sleep(0.05)
    return node, json.loads(info_path.read_text())


def _metrics(info: dict[str, Any]) -> dict[str, float]:
    """Forwarded requests and steering/XDP counters, summed over labels."""
    from laminar.cli.status import parse_prometheus

    url = f"http://{info['host']}:{info['admin_port']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        samples = parse_prometheus(reply.read().decode())
    wanted = {
        "laminar_forwarded_out_total": "forwarded",
        "laminar_datagrams_received_total": "datagrams",
        "laminar_xdp_packets_total": "xdp_packets",
    }
    out: dict[str, float] = {}
    for name, labels, value in samples:
        if name in wanted:
            out[wanted[name]] = out.get(wanted[name], 0.0) + value
        elif name == "laminar_steering_datagrams_total" and labels.get("outcome") == "steered":
            out["steered"] = out.get("steered", 0.0) + value
    return out


def measure(base: Path, variant: Variant, args: argparse.Namespace) -> dict[str, Any]:
    from laminar.client import Client
    from laminar.placement import partition_id

    directory = Path(tempfile.mkdtemp(prefix=f"{variant.name}-", dir=base))
    node, info = _start_node(directory, variant, args.cores)
    try:
        if info["routing_mode"] != variant.routing:
            raise RuntimeError(f"{variant.name}: the node runs {info['routing_mode']}")
        with Client(f"{info['host']}:{info['port']}") as client:
            topic = client.create_topic("routing", partitions=PARTITIONS)
        pids_file = directory / "pids.json"
        pids_file.write_text(
            json.dumps([partition_id(topic.topic_id, p) for p in range(PARTITIONS)])
        )
        command = [
            sys.executable, str(LOAD), variant.transport, "--host", info["host"],
            "--port", str(info["port"]),
            "--shard-ports", ",".join(map(str, info["shard_ports"])),
            "--pids", str(pids_file), "--seconds", str(args.seconds),
            "--warmup", str(args.warmup), "--inflight", str(args.inflight),
            "--sockets", str(args.sockets),
        ]  # fmt: skip
        if args.client_cpu is not None:
            command += ["--cpu", str(args.client_cpu)]
        before = _metrics(info)
        out = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
        if out.returncode:
            raise RuntimeError(f"{variant.name}: the generator failed:\n{out.stderr}")
        after = _metrics(info)
        result: dict[str, Any] = json.loads(out.stdout)
        counts = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
        answered = max(1.0, counts.get("datagrams", 0.0)) if variant.transport == "udp" else 1.0
        result["forwarded_share"] = counts.get("forwarded", 0.0) / answered
        result["counters"] = counts
        result["routing_detail"] = info.get("routing_detail", "")
        return result
    finally:
        node.terminate()
        node.wait(60)
        shutil.rmtree(directory, ignore_errors=True)


# -- the run ---------------------------------------------------------------------------


def summarize(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, float]]:
    names = [v.name for v in VARIANTS if v.name in rounds[0]]
    summary = {}
    for name in names:
        runs = [r[name] for r in rounds]
        summary[name] = {
            "requests_per_s": statistics.median(r["requests_per_s"] for r in runs),
            "p50_us": statistics.median(r["latency_us"]["p50"] for r in runs),
            "p99_us": statistics.median(r["latency_us"]["p99"] for r in runs),
            "forwarded_share": statistics.median(r["forwarded_share"] for r in runs),
            "lost": sum(r["lost"] for r in runs),
        }
    if "userspace" in summary:
        for name, row in summary.items():
            # Within one round the variants ran minutes apart at most, under the
            # same neighbours: the ratio is steadier than either rate.
            row["rate_vs_userspace"] = statistics.median(
                r[name]["requests_per_s"] / r["userspace"]["requests_per_s"] for r in rounds
            )
            row["p99_vs_userspace"] = statistics.median(
                r[name]["latency_us"]["p99"] / r["userspace"]["latency_us"]["p99"] for r in rounds
            )
    return summary


def goal(summary: dict[str, dict[str, float]]) -> dict[str, Any]:
    ebpf = summary.get("ebpf")
    if ebpf is None or "rate_vs_userspace" not in ebpf:
        return {"met": None}
    ratio, p99_ratio = ebpf["rate_vs_userspace"], ebpf["p99_vs_userspace"]
    return {
        "rate_ratio": ratio,
        "p99_ratio": p99_ratio,
        "lower_p99": p99_ratio < 1,
        "met": ratio >= GOAL_RATIO and p99_ratio < 1,
    }


def markdown(doc: dict[str, Any]) -> str:
    rows = [
        "| variant | requests/s | rate vs userspace | p50 us | p99 us | p99 vs userspace "
        "| forwarded |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in doc["summary"].items():
        share = f"{row['forwarded_share'] * 100:.0f}%" if name != "tcp-direct" else "-"
        rows.append(
            f"| {name} | {row['requests_per_s']:,.0f} | {row.get('rate_vs_userspace', 0):.2f}x | "
            f"{row['p50_us']:,.0f} | {row['p99_us']:,.0f} | {row.get('p99_vs_userspace', 0):.2f}x "
            f"| {share} |"
        )
    g = doc["goal"]
    if g.get("met") is not None:
        rows.append("")
        rows.append(
            f"Goal (eBPF >= {GOAL_RATIO}x userspace forwarding at a lower p99): "
            f"{'met' if g['met'] else 'missed'}: {g['rate_ratio']:.2f}x the rate, "
            f"{g['p99_ratio']:.2f}x the p99 (medians of within-round ratios)."
        )
    return "\n".join(rows)


def run(args: argparse.Namespace) -> dict[str, Any]:
    in_netns = bool(args.inside_netns)
    variants = [v for v in VARIANTS if in_netns or v.xdp == "off"]
    if args.only:
        variants = [v for v in variants if v.name in args.only.split(",")]
    base = Path(tempfile.mkdtemp(prefix="routing-bench-"))
    rounds: list[dict[str, dict[str, Any]]] = []
    try:
        for r in range(args.rounds):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            results = {}
            for variant in order:
                results[variant.name] = measure(base, variant, args)
                res = results[variant.name]
                print(
                    f"round {r + 1} {variant.name:10} {res['requests_per_s']:>9,.0f} req/s  "
                    f"p50 {res['latency_us']['p50']:>7,.0f} us  "
                    f"p99 {res['latency_us']['p99']:>7,.0f} us  "
                    f"forwarded {res['forwarded_share'] * 100:3.0f}%  lost {res['lost']}",
                    file=sys.stderr,
                )
            rounds.append({v.name: results[v.name] for v in variants})
    finally:
        shutil.rmtree(base, ignore_errors=True)
    summary = summarize(rounds)
    return {
        "bench": "routing",
        "settings": {
            "rounds": args.rounds,
            "seconds": args.seconds,
            "warmup": args.warmup,
            "inflight": args.inflight,
            "sockets": args.sockets,
            "cores": args.cores,
            "partitions": PARTITIONS,
            "client_cpu": args.client_cpu,
            "netns": in_netns,
        },
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
        "summary": summary,
        "goal": goal(summary),
        "rounds": rounds,
    }


def _in_netns(argv: list[str]) -> int:
    """Run this script again inside a throwaway network namespace with lo up."""
    name = f"lrb{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        command = ["ip", "netns", "exec", name, sys.executable, __file__, *argv, "--inside-netns"]
        return subprocess.run(command, cwd=REPO, check=False).returncode
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--inflight", type=int, default=64, help="requests outstanding in total")
    p.add_argument("--sockets", type=int, default=8, help="UDP client sockets")
    p.add_argument("--cores", type=int, default=2, help="laminar-node --cores")
    p.add_argument("--client-cpu", type=int, default=None, help="pin the generator to a CPU")
    p.add_argument("--only", default="", help="comma-separated variant names")
    p.add_argument("--json", default="", help="write the JSON here (default: stdout)")
    p.add_argument("--markdown", action="store_true", help="print the Markdown table")
    p.add_argument("--no-netns", action="store_true", help="run on the host's lo")
    p.add_argument("--inside-netns", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if not args.inside_netns and not args.no_netns and os.geteuid() == 0 and shutil.which("ip"):
        return _in_netns(sys.argv[1:])
    doc = run(args)
    text = json.dumps(doc, indent=1)
    if args.json:
        Path(args.json).write_text(text + "\n")
    else:
        print(text)
    if args.markdown:
        print(markdown(doc))
    for name, row in doc["summary"].items():
        print(
            f"{name:10} {row['requests_per_s']:>9,.0f} req/s "
            f"({row.get('rate_vs_userspace', 0):.2f}x)  "
            f"p50 {row['p50_us']:>7,.0f} us  p99 {row['p99_us']:>7,.0f} us",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
