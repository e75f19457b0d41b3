"""Helpers run inside the XDP tests' network namespaces (under `ip netns exec`).

    python -m tests.xdp.netns_node serve --ifname vb [--mode auto|native|generic]
                                         [--attach-with link|netlink]
    python -m tests.xdp.netns_node send --counts JSON
    python -m tests.xdp.netns_node foreign --ifname vb

`serve` is the node: attaches the classifier, listens on the partition port
(v4 and v6) and the membership port, prints one JSON line when ready, then
answers stdin commands: `report` (counters and what the sockets received,
one JSON line) and `exit` (detach and leave). Errors are one JSON line with
"error" and exit status 1.

`send` is the peer: sends each kind of datagram in `KINDS` as many times as
`--counts` says, paced so that nothing is lost on the way.

`foreign` attaches a program that is not laminar's through netlink and exits,
leaving it attached.
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable

from laminar.wire import codec
from laminar.wire.ops import Op
from laminar.xdp import XdpClassifier, bcc_env

NODE_V4 = "10.77.0.2"
NODE_V6 = "fd77::2"
PEER_V4 = "10.77.0.1"
PEER_V6 = "fd77::1"
PARTITION_PORT = 7000
MEMBERSHIP_PORT = 7946
OTHER_PORT = 7001
PACE_EVERY = 25  # datagrams between short pauses: veth and the backlog never overflow


def _frame(pid: int, op: int = Op.PING) -> bytes:
    return codec.encode_frame(op, pid & 0xFFFF, pid, {"n": pid})


def _bad_magic(i: int) -> bytes:
    data = bytearray(_frame(i))
    data[codec.OFFSET_MAGIC] = 0x41
    return bytes(data)


def _bad_version(i: int) -> bytes:
    data = bytearray(_frame(i))
    data[codec.OFFSET_VERSION] = 7
    return bytes(data)


# kind -> (address family, destination port, datagram for the i-th send)
KINDS: dict[str, tuple[socket.AddressFamily, int, Callable[[int], bytes]]] = {
    "partition_v4": (socket.AF_INET, PARTITION_PORT, lambda i: _frame(1000 + i)),
    "partition_v6": (socket.AF_INET6, PARTITION_PORT, lambda i: _frame(5000 + i)),
    "membership_port": (socket.AF_INET, MEMBERSHIP_PORT, lambda i: b"swim-ping %d" % i),
    "membership_op": (socket.AF_INET, PARTITION_PORT, lambda i: _frame(i, op=100)),
    "short": (socket.AF_INET, PARTITION_PORT, lambda i: _frame(i)[: i % 25]),
    "bad_magic": (socket.AF_INET, PARTITION_PORT, _bad_magic),
    "bad_version": (socket.AF_INET6, PARTITION_PORT, _bad_version),
    "bad_length": (socket.AF_INET, PARTITION_PORT, lambda i: _frame(i) + b"\0" * (1 + i % 3)),
    "other": (socket.AF_INET, OTHER_PORT, lambda i: b"not for laminar"),
}


def send(counts: dict[str, int]) -> None:
    socks = {
        socket.AF_INET: socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
        socket.AF_INET6: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM),
    }
    sent = 0
    for kind, count in counts.items():
        family, port, make = KINDS[kind]
        address = NODE_V4 if family == socket.AF_INET else NODE_V6
        for i in range(count):
            socks[family].sendto(make(i), (address, port))
            sent += 1
            if sent % PACE_EVERY == 0:
                time.sleep(0.002)
    print(json.dumps({"sent": sent}), flush=True)


def _listener(family: socket.AddressFamily, port: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_DGRAM)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # v4 too
    sock.setsockopt(socket.SOL_SOCKET, 33, 4 << 20)  # SO_RCVBUFFORCE: root only
    sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
    return sock


def serve(args: argparse.Namespace) -> int:
    classifier = XdpClassifier(
        args.ifname,
        [PARTITION_PORT],
        [MEMBERSHIP_PORT],
        mode=args.mode,
        attach_with=args.attach_with,
    )
    try:
        classifier.attach()
    except Exception as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    listeners = {
        "partition": _listener(socket.AF_INET6, PARTITION_PORT),
        "membership": _listener(socket.AF_INET, MEMBERSHIP_PORT),
    }
    received: Counter[str] = Counter()
    payloads: list[bytes] = []
    stop = threading.Event()

    def drain() -> None:
        names = {s.fileno(): name for name, s in listeners.items()}
        while not stop.is_set():
            for fd in select.select(list(names), [], [], 0.05)[0]:
                data = listeners[names[fd]].recv(65536)
                received[names[fd]] += 1
                payloads.append(data)

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    print(
        json.dumps(
            {
                "ready": True,
                "mode": classifier.attached_mode,
                "prog_id": classifier.prog_id,
                "replaced_stale": [s.prog_id for s in classifier.replaced_stale],
            }
        ),
        flush=True,
    )
    for line in sys.stdin:
        command = line.strip()
        if command == "report":
            _settle(received)
            malformed_seen = sum(1 for p in payloads if _is_malformed(p))
            print(
                json.dumps(
                    {
                        "counters": classifier.counters().as_dict(),
                        "per_cpu": classifier.counters().per_cpu,
                        "received": dict(received),
                        "malformed_received": malformed_seen,
                    }
                ),
                flush=True,
            )
        elif command == "exit":
            break
    stop.set()
    drainer.join()
    classifier.close()
    print(json.dumps({"detached": True}), flush=True)
    return 0


def _settle(received: Counter[str]) -> None:
    """Wait until the drain thread has seen nothing new for a few polls."""
    quiet, last = 0, -1
    while quiet < 3:
        time.sleep(0.05)
        total = sum(received.values())
        quiet = quiet + 1 if total == last else 0
        last = total


def _is_malformed(data: bytes) -> bool:
    try:
        codec.decode_frame(data)
    except Exception:
        return not data.startswith(b"swim-ping")
    return False


def foreign(ifname: str) -> int:
    bcc = bcc_env.import_bcc()
    bpf = bcc.BPF(text=b"int foreign_xdp(struct xdp_md *ctx) { return XDP_PASS; }")
    fn = bpf.load_func(b"foreign_xdp", bcc.BPF.XDP)
    bcc.BPF.attach_xdp(ifname.encode(), fn, 2)  # generic, netlink: outlives this process
    print(json.dumps({"attached": True}), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p_serve = sub.add_parser("serve")
    p_serve.add_argument("--ifname", required=True)
    p_serve.add_argument("--mode", default="auto", choices=["auto", "native", "generic"])
    p_serve.add_argument("--attach-with", default="link", choices=["link", "netlink"])
    p_send = sub.add_parser("send")
    p_send.add_argument("--counts", required=True)
    p_foreign = sub.add_parser("foreign")
    p_foreign.add_argument("--ifname", required=True)
    args = parser.parse_args()
    if args.command == "serve":
        return serve(args)
    if args.command == "send":
        send(json.loads(args.counts))
        return 0
    return foreign(args.ifname)


if __name__ == "__main__":
    sys.exit(main())
