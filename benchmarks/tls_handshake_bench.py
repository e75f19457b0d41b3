"""TLS handshakes per second on one shard port, next to plain TCP connects.

    .venv/bin/python benchmarks/tls_handshake_bench.py [--seconds 3] [--rounds 3] [--clients 2]

Starts one single-shard node with TLS (a throwaway CA and certificate) and,
in rotated rounds, has `--clients` client processes open connections to its
shard port as fast as they can for `--seconds`: each connection does a full
TLS 1.3 handshake (or a plain connect) plus one ping answered, then closes.
Reports medians over rounds of connections per second, and the shard's CPU
per connection (from /proc), so the figure can be read on a loaded machine.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import ssl
import statistics
import tempfile
import time
from pathlib import Path

from laminar.bench.servers.laminar_node import LaminarNode
from laminar.certs import make_ca, make_cert
from laminar.client.blocking import BlockingConnection
from laminar.wire.messages import Ping


def _connections(port: int, ca_file: str | None, seconds: float) -> int:
    context = None if ca_file is None else ssl.create_default_context(cafile=ca_file)
    done = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        conn = BlockingConnection(("127.0.0.1", port), 5.0, tls=context)
        conn.wait(conn.send(Ping()), time.monotonic() + 5)
        conn.close()
        done += 1
    return done


def _cpu_s(pids: list[int]) -> float:
    ticks = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime + stime
    return ticks / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ca = make_ca(work, "ca")
        cert = make_cert(work, ca, "node")
        tls_args = ("--tls-cert-file", cert.cert, "--tls-key-file", cert.key)
        nodes = {
            "tls": (LaminarNode(work / "tls", 1, extra_args=tls_args), ca.cert),
            "plain": (LaminarNode(work / "plain", 1), None),
        }
        for node, _ in nodes.values():
            node.workdir.mkdir()
            node.start()
        try:
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in nodes}
            names = list(nodes)
            for round_ in range(args.rounds):
                for name in names[round_ % 2 :] + names[: round_ % 2]:
                    node, ca_file = nodes[name]
                    port = int(node.info["shard_ports"][0])
                    pids = [int(p) for p in node.info["shard_pids"]]
                    cpu0 = _cpu_s(pids)
                    with multiprocessing.Pool(args.clients) as pool:
                        counts = pool.starmap(
                            _connections, [(port, ca_file, args.seconds)] * args.clients
                        )
                    total = sum(counts)
                    results[name].append((total / args.seconds, (_cpu_s(pids) - cpu0) / total))
            for name, runs in results.items():
                rate = statistics.median(r for r, _ in runs)
                cpu_us = statistics.median(c for _, c in runs) * 1e6
                print(
                    f"{name}: {rate:,.0f} connections/s (median of {len(runs)} rounds), "
                    f"shard CPU {cpu_us:,.0f} us per connection"
                )
            print(f"load average {os.getloadavg()[0]:.2f}, {args.clients} client processes")
        finally:
            for node, _ in nodes.values():
                node.stop()


if __name__ == "__main__":
    main()
