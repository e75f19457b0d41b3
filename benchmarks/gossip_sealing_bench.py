"""What authenticating a membership datagram costs: the cluster secret's HMAC
tag (`laminar.swim.auth.PacketSealer`) next to a node certificate's signature
(`laminar.swim.signing.CertificateSealer`, ECDSA P-256 as `make certs` makes
them), per datagram sealed and opened, and the room each leaves a packet.

    .venv/bin/python benchmarks/gossip_sealing_bench.py [--rounds 5] [--datagrams 2000]

CPU time (`time.process_time`) per operation, median of rotated rounds; the
packet is a ping carrying eight `Alive` updates (a busy cluster's piggyback).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from laminar.certs import make_ca, make_cert
from laminar.swim.auth import PacketSealer, Sealer
from laminar.swim.config import SwimConfig
from laminar.swim.messages import Alive, Packet, Ping
from laminar.swim.signing import CertificateSealer

T = TypeVar("T")


def _per_op_us(operation: Callable[[T], object], argument: T, count: int) -> float:
    started = time.process_time()
    for _ in range(count):
        operation(argument)
    return (time.process_time() - started) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--datagrams", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        ca = make_ca(folder, "ca")
        pems = {n: make_cert(folder, ca, n, node_id=n) for n in ("n1", "n2")}
        ca_pem = Path(ca.cert).read_bytes()

        def signer(node: str) -> CertificateSealer:
            pem = pems[node]
            return CertificateSealer(
                Path(pem.cert).read_bytes(), Path(pem.key).read_bytes(), ca_pem, node_id=node
            )

        secret = b"a cluster secret of 32 bytes...."
        sealers: dict[str, tuple[Sealer, Sealer]] = {
            "cluster secret (HMAC-SHA256)": (PacketSealer(secret), PacketSealer(secret)),
            "node certificate (ECDSA P-256)": (signer("n1"), signer("n2")),
        }
        updates = tuple(
            Alive(f"n{i}", 1_700_000_000 + i, f"10.0.0.{i}:7070", 1.0) for i in range(8)
        )
        packet = Packet(Ping(1, "n2", "n1", "10.0.0.1:8070"), updates)
        results: dict[str, dict[str, list[float]]] = {n: {"seal": [], "open": []} for n in sealers}
        names = list(sealers)
        for round_ in range(args.rounds):
            for name in names[round_ % 2 :] + names[: round_ % 2]:
                mine, theirs = sealers[name]
                datagram = mine.seal(packet)
                results[name]["seal"].append(_per_op_us(mine.seal, packet, args.datagrams))
                results[name]["open"].append(_per_op_us(theirs.open, datagram, args.datagrams))
        packet_max = SwimConfig().packet_bytes_max
        print(
            f"{'authentication':32} {'seal us':>8} {'open us':>8} {'trailer B':>10} {'room B':>7}"
        )
        for name, (mine, _) in sealers.items():
            seal = statistics.median(results[name]["seal"])
            open_ = statistics.median(results[name]["open"])
            trailer = mine.overhead_bytes
            print(f"{name:32} {seal:8.1f} {open_:8.1f} {trailer:10d} {packet_max - trailer:7d}")


if __name__ == "__main__":
    main()
