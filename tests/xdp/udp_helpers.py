"""Send datagrams to a reuseport group and see which socket got each one."""

from __future__ import annotations

import random
import select
import socket
from collections.abc import Sequence

from laminar import placement
from laminar.wire import codec
from laminar.wire.ops import Op

BATCH = 200  # datagrams in flight: well under a socket's default receive buffer
QUIET_S = 1.0  # give up on a batch after this long without a datagram


def many_pids(count: int, seed: int = 1) -> list[int]:
    """Partition ids as a node sees them: many topics and partitions, plus random u64s."""
    rng = random.Random(seed)
    pids = [placement.partition_id(t, p) for t in range(1, 21) for p in range(count // 40)]
    pids += [rng.getrandbits(64) for _ in range(count - len(pids))]
    return pids


def request(pid: int, correlation_id: int) -> bytes:
    return codec.encode_frame(Op.PING, correlation_id, pid, {})


def deliver(
    port: int,
    receivers: Sequence[socket.socket | None],
    datagrams: Sequence[bytes],
    host: str = "127.0.0.1",
) -> list[tuple[int, bytes]]:
    """Send `datagrams` to (host, port); return (receiver index, data) per arrival.

    Sends in batches and drains every receiver after each batch; a batch ends
    when all its datagrams arrived or nothing came for QUIET_S (dropped ones).
    """
    live = {s.fileno(): i for i, s in enumerate(receivers) if s is not None}
    for s in receivers:
        if s is not None:
            s.setblocking(False)
    got: list[tuple[int, bytes]] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        for start in range(0, len(datagrams), BATCH):
            batch = datagrams[start : start + BATCH]
            for data in batch:
                tx.sendto(data, (host, port))
            want = len(got) + len(batch)
            while len(got) < want:
                ready, _, _ = select.select(list(live), [], [], QUIET_S)
                if not ready:
                    break
                for fd in ready:
                    sock = receivers[live[fd]]
                    assert sock is not None
                    while True:
                        try:
                            got.append((live[fd], sock.recv(65536)))
                        except BlockingIOError:
                            break
    return got


def owners_seen(arrivals: list[tuple[int, bytes]]) -> dict[int, tuple[int, int]]:
    """correlation id -> (receiver index, partition id) for laminar frames."""
    seen = {}
    for index, data in arrivals:
        frame = codec.decode_frame(data)
        seen[frame.correlation_id] = (index, frame.partition_id)
    return seen
