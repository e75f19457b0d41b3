"""The peer of the XDP system test, run inside its network namespace:

    python -m tests.system.netns_peer HOST PORT PIDS_JSON

Sends a ping for every partition id in PIDS_JSON (several rounds) and reads
the answers, then the malformed datagrams of `MALFORMED` and frames with a
membership op, paced so that veth and socket queues never overflow. Prints
one JSON object: datagrams sent per kind (resends included) and what the
answers said about where each request was served.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Callable

from laminar.client.udp import UdpClient
from laminar.placement import shard_for
from laminar.wire import Ping, Pong, codec

ROUNDS = 4
MEMBERSHIP_OP = 100
PACE_EVERY = 25


def _bad(offset: int, value: int) -> Callable[[int], bytes]:
    def make(i: int) -> bytes:
        data = bytearray(Ping(i).encode(i))
        data[offset] = value
        return bytes(data)

    return make


MALFORMED: dict[str, tuple[int, Callable[[int], bytes]]] = {
    "short": (11, lambda i: Ping(i).encode(i)[: i * 2]),
    "bad_magic": (12, _bad(codec.OFFSET_MAGIC, 0x41)),
    "bad_version": (13, _bad(codec.OFFSET_VERSION, 9)),
    "bad_length": (14, lambda i: Ping(i).encode(i) + b"\0" * (1 + i % 3)),
}


def main() -> int:
    host, port, pids = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    shards = int(sys.argv[4])
    with UdpClient((host, port), timeout_s=2.0, retries=10) as udp:
        answers = udp.call_many([Ping(p) for p in pids * ROUNDS], window=32)
        partition_sent = udp.datagrams_sent
    at_owner = sum(
        1
        for a in answers
        if isinstance(a, Pong) and a.shard_id == shard_for(a.partition_id, shards) == a.received_by
    )
    sent: dict[str, int] = {"partition": partition_sent}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
        count = 0
        kinds = [*MALFORMED.items(), ("membership", (9, _membership))]
        for kind, (times, make) in kinds:
            for i in range(times):
                raw.sendto(make(i), (host, port))
                count += 1
                if count % PACE_EVERY == 0:
                    time.sleep(0.002)
            sent[kind] = times
    print(json.dumps({"sent": sent, "answers": len(answers), "at_owner": at_owner}), flush=True)
    return 0


def _membership(i: int) -> bytes:
    return codec.encode_frame(MEMBERSHIP_OP, i, 0, {})


if __name__ == "__main__":
    sys.exit(main())
