"""TLS handshakes per second on one shard port, next to plain TCP connects,
and TLS with a SCRAM login on every connection.

    .venv/bin/python benchmarks/tls_handshake_bench.py [--seconds 3] [--rounds 3] [--clients 2]

Starts single-shard nodes (plain; TLS with a throwaway CA and certificate;
TLS and `--auth scram`) and, in rotated rounds, has `--clients` client
processes open connections to each one's shard port as fast as they can for
`--seconds`: each connection does a full TLS 1.3 handshake (or a plain
connect), on the `tls+scram` node a SCRAM-SHA-256 login (four messages; the
client's PBKDF2 at the default 8192 iterations is client CPU), plus one ping
answered, then closes. Reports medians over rounds of connections per
second, and the shard's CPU per connection (from /proc), so the figure can
be read on a loaded machine.
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
from laminar.client.errors import AuthenticationFailedError
from laminar.client.login import ClientLogin, Credentials
from laminar.security.frames import AuthenticateRequest
from laminar.wire.messages import Ping

USER, PASSWORD = "bench", "bench-password"


def _connection(port: int, context: ssl.SSLContext | None, login: bool) -> None:
    conn = BlockingConnection(("127.0.0.1", port), 5.0, tls=context)
    deadline = time.monotonic() + 5
    if login:
        client = ClientLogin(Credentials(USER, PASSWORD))
        request: AuthenticateRequest | None = client.first()
        while request is not None:
            request = client.answer(conn.wait(conn.send(request), deadline))
    conn.wait(conn.send(Ping()), deadline)
    conn.close()


def _connections(port: int, ca_file: str | None, login: bool, seconds: float) -> int:
    context = None if ca_file is None else ssl.create_default_context(cafile=ca_file)
    done = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        _connection(port, context, login)
        done += 1
    return done


def _wait_for_user(port: int, ca_file: str) -> None:
    """Until the bootstrap user is written (a moment after the node is up)."""
    context = ssl.create_default_context(cafile=ca_file)
    deadline = time.monotonic() + 60
    while True:
        try:
            return _connection(port, context, login=True)
        except AuthenticationFailedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


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
        user_file = work / "user.cred"
        user_file.write_text(f"{USER}:{PASSWORD}")
        user_file.chmod(0o600)
        scram_args = (*tls_args, "--auth", "scram", "--bootstrap-user-file", str(user_file))
        nodes = {
            "tls": (LaminarNode(work / "tls", 1, extra_args=tls_args), ca.cert, False),
            "plain": (LaminarNode(work / "plain", 1), None, False),
            "tls+scram": (LaminarNode(work / "scram", 1, extra_args=scram_args), ca.cert, True),
        }
        for node, _, _ in nodes.values():
            node.workdir.mkdir()
            node.start()
        scram_node = nodes["tls+scram"][0]
        _wait_for_user(int(scram_node.info["shard_ports"][0]), ca.cert)
        try:
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in nodes}
            names = list(nodes)
            for round_ in range(args.rounds):
                for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                    node, ca_file, login = nodes[name]
                    port = int(node.info["shard_ports"][0])
                    pids = [int(p) for p in node.info["shard_pids"]]
                    cpu0 = _cpu_s(pids)
                    with multiprocessing.Pool(args.clients) as pool:
                        counts = pool.starmap(
                            _connections, [(port, ca_file, login, args.seconds)] * args.clients
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
            for node, _, _ in nodes.values():
                node.stop()


if __name__ == "__main__":
    main()
