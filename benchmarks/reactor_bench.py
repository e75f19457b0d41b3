"""Reactor benchmark: RPC requests/s per event loop, and task-queue CPU shares.

    .venv/bin/python benchmarks/reactor_bench.py [--seconds 2] [--rounds 3] [--depth 16]

Prints one JSON object.

1. RPC: a server process (pinned to CPU 0) runs the same sock_* echo-RPC code
   on each loop: UringEventLoop, stock asyncio and uvloop; uvloop also with an
   asyncio.Protocol server, its fastest mode, for reference. A client process
   (pinned to CPU 1, plain non-blocking sockets and epoll) keeps 64 connections
   busy with DEPTH pipelined 64-byte requests each and counts 64-byte responses.
   Rounds interleave the loops (A B C A B C ...); medians are reported.
   Besides requests/s: the server's and the client's CPU use (a client near
   1.0 is the limit, not the server) and the server's CPU time per request,
   split user/system, which neighbours on a shared machine disturb far less
   than throughput.
2. Shares: busy tasks in queues at 1:1, 2:1 and 10:1 shares on UringEventLoop;
   each task measures its own thread CPU time, and the scheduler reports its
   own accounting.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import psutil

REQUEST_BYTES = 64
CONNECTIONS = 64
DEPTH = 16
SERVER_CPU = 0
CLIENT_CPU = 1
LOOPS = ["uring", "asyncio", "uvloop", "uvloop-protocol"]


# -- server --------------------------------------------------------------------


async def serve_connection(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
    """Answer every complete 64-byte request with a 64-byte response."""
    pending = b""
    try:
        while True:
            data = await loop.sock_recv(conn, 65536)
            if not data:
                return
            if pending:
                data = pending + data
            complete = len(data) - len(data) % REQUEST_BYTES
            pending = data[complete:]
            if complete:
                await loop.sock_sendall(conn, data[:complete])
    except (ConnectionError, OSError):
        return
    finally:
        conn.close()


async def sock_server(ready_fd: int) -> None:
    loop = asyncio.get_running_loop()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    listener.setblocking(False)
    os.write(ready_fd, f"{listener.getsockname()[1]}\n".encode())
    tasks = set()
    while True:
        conn, _ = await loop.sock_accept(listener)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        task = loop.create_task(serve_connection(loop, conn))
        tasks.add(task)
        task.add_done_callback(tasks.discard)


class EchoProtocol(asyncio.Protocol):
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.pending = b""

    def data_received(self, data: bytes) -> None:
        if self.pending:
            data = self.pending + data
        complete = len(data) - len(data) % REQUEST_BYTES
        self.pending = data[complete:]
        if complete:
            self.transport.write(data[:complete])


async def protocol_server(ready_fd: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(EchoProtocol, "127.0.0.1", 0, backlog=1024)
    os.write(ready_fd, f"{server.sockets[0].getsockname()[1]}\n".encode())
    await asyncio.Event().wait()


def run_server(kind: str, ready_fd: int) -> None:
    os.sched_setaffinity(0, {SERVER_CPU})
    if kind == "uring":
        from laminar.reactor import UringEventLoop

        factory: Any = UringEventLoop
    elif kind == "asyncio":
        factory = asyncio.SelectorEventLoop
    else:
        import uvloop

        factory = uvloop.Loop
    main = protocol_server if kind == "uvloop-protocol" else sock_server
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main(ready_fd))


# -- client --------------------------------------------------------------------


def run_client(port: int, seconds: float, warmup: float, depth: int) -> dict[str, float]:
    """Keep `depth` requests in flight on each connection; count responses."""
    os.sched_setaffinity(0, {CLIENT_CPU})
    request = b"q" * REQUEST_BYTES
    burst = request * depth
    ep = select.epoll()
    socks: dict[int, socket.socket] = {}
    leftover: dict[int, int] = {}
    for _ in range(CONNECTIONS):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        socks[s.fileno()] = s
        leftover[s.fileno()] = 0
        ep.register(s.fileno(), select.EPOLLIN)
    for s in socks.values():
        s.send(burst)
    responses = 0
    total_responses = 0
    counting = False
    start = time.perf_counter()
    warm_end = start + warmup
    end = warm_end + seconds
    cpu0 = 0.0
    t0 = start
    buf = bytearray(1 << 18)
    bursts = [request * n for n in range(depth + 1)]
    conns = {fd: (s, s.recv_into, s.send) for fd, s in socks.items()}
    poll = ep.poll
    while True:
        now = time.perf_counter()
        if not counting and now >= warm_end:
            counting = True
            total_responses += responses
            responses = 0
            t0 = now
            cpu0 = time.process_time()
        if now >= end:
            break
        for fd, _ev in poll(0.5):
            _s, recv_into, send = conns[fd]
            try:
                got = recv_into(buf)
            except BlockingIOError:
                continue
            if not got:
                raise SystemExit("server closed a connection")
            n, leftover[fd] = divmod(leftover[fd] + got, REQUEST_BYTES)
            responses += n
            send(bursts[n] if n <= depth else request * n)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    for s in socks.values():
        s.close()
    total_responses += responses
    return {
        "rps": responses / elapsed,
        "client_cpu": cpu / elapsed,
        "responses": total_responses,
    }


# -- orchestration -------------------------------------------------------------


def one_round(kind: str, seconds: float, warmup: float, depth: int) -> dict[str, float]:
    r, w = os.pipe()
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind, "--ready-fd", str(w)], pass_fds=(w,)
    )
    os.close(w)
    try:
        with os.fdopen(r) as ready:
            port = int(ready.readline())
        proc = psutil.Process(server.pid)
        times_before = proc.cpu_times()
        t_before = time.perf_counter()
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--client",
                str(port),
                "--seconds",
                str(seconds),
                "--warmup",
                str(warmup),
                "--depth",
                str(depth),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        times = proc.cpu_times()
        user = times.user - times_before.user
        system = times.system - times_before.system
        cpu = user + system
        result = dict(json.loads(out))
        result["server_user_share"] = user / cpu if cpu else 0.0
        result["server_cpu"] = cpu / (time.perf_counter() - t_before)
        result["server_cpu_us_per_request"] = cpu / result["responses"] * 1e6
        return result
    finally:
        server.kill()
        server.wait()


def rpc_benchmark(
    seconds: float, warmup: float, rounds: int, loops: list[str], depth: int
) -> dict[str, Any]:
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in loops}
    for _ in range(rounds):
        for kind in loops:
            results[kind].append(one_round(kind, seconds, warmup, depth))
    out: dict[str, Any] = {
        "connections": CONNECTIONS,
        "depth": depth,
        "request_bytes": REQUEST_BYTES,
        "seconds_per_round": seconds,
        "rounds": rounds,
    }
    medians = {}
    for kind, runs in results.items():
        medians[kind] = statistics.median(run["rps"] for run in runs)
        out[kind] = {
            "rps_median": round(medians[kind]),
            "rps_rounds": [round(run["rps"]) for run in runs],
            "client_cpu_median": round(statistics.median(run["client_cpu"] for run in runs), 2),
            "server_cpu_median": round(statistics.median(run["server_cpu"] for run in runs), 2),
            "server_user_share_median": round(
                statistics.median(run["server_user_share"] for run in runs), 2
            ),
            "server_cpu_us_per_request_median": round(
                statistics.median(run["server_cpu_us_per_request"] for run in runs), 3
            ),
        }
    if "uring" in medians:
        for other in ("asyncio", "uvloop", "uvloop-protocol"):
            if other in medians:
                out[f"uring_vs_{other}"] = round(medians["uring"] / medians[other], 3)
    return out


# -- shares --------------------------------------------------------------------


async def share_split(shares: list[int], seconds: float) -> dict[str, Any]:
    loop: Any = asyncio.get_running_loop()
    cpu = [0.0] * len(shares)
    stop = False

    async def busy(index: int) -> None:
        while not stop:
            t0 = time.thread_time()
            deadline = time.perf_counter() + 0.0002
            while time.perf_counter() < deadline:
                pass
            cpu[index] += time.thread_time() - t0
            await asyncio.sleep(0)

    queues = [loop.create_task_queue(f"q{i}-{s}", shares=s) for i, s in enumerate(shares)]
    tasks = [loop.create_task(busy(i), queue=q) for i, q in enumerate(queues)]
    await asyncio.sleep(seconds)
    stop = True
    await asyncio.gather(*tasks)
    runtime = [q.stats().runtime_s for q in queues]
    return {
        "shares": shares,
        "expected_split": [round(s / sum(shares), 4) for s in shares],
        "task_cpu_split": [round(c / sum(cpu), 4) for c in cpu],
        "scheduler_split": [round(r / sum(runtime), 4) for r in runtime],
    }


def shares_benchmark(seconds: float) -> list[dict[str, Any]]:
    from laminar.reactor import UringEventLoop

    out = []
    for shares in ([1000, 1000], [2000, 1000], [1000, 100]):
        with asyncio.Runner(loop_factory=UringEventLoop) as runner:
            out.append(runner.run(share_split(shares, seconds)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", choices=LOOPS)
    parser.add_argument("--ready-fd", type=int)
    parser.add_argument("--client", type=int, metavar="PORT")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--depth", type=int, default=DEPTH, help="requests in flight per connection"
    )
    parser.add_argument("--loops", default=",".join(LOOPS))
    parser.add_argument("--skip-shares", action="store_true")
    args = parser.parse_args()
    if args.serve:
        run_server(args.serve, args.ready_fd)
        return
    if args.client:
        print(json.dumps(run_client(args.client, args.seconds, args.warmup, args.depth)))
        return
    result: dict[str, Any] = {
        "rpc": rpc_benchmark(
            args.seconds, args.warmup, args.rounds, args.loops.split(","), args.depth
        )
    }
    if not args.skip_shares:
        result["shares"] = shares_benchmark(1.0)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
