"""A stand-in shard: adopts its node-port socket and answers each request with its index.

    python -m tests.xdp.shard_child SPEC_JSON SHARD_INDEX

Prints "ready" once the socket is adopted, then answers every frame with a
response frame whose header names the shard, until killed.
"""

from __future__ import annotations

import sys

from laminar.wire import codec
from laminar.wire.ops import Flags
from laminar.xdp import SteeringSpec, open_shard_socket


def main() -> None:
    spec = SteeringSpec.from_json(sys.argv[1])
    shard = int(sys.argv[2])
    sock = open_shard_socket(spec, shard)
    print("ready", flush=True)
    while True:
        data, addr = sock.recvfrom(65536)
        frame = codec.decode_frame(data)
        reply = codec.encode_frame(
            frame.op,
            frame.correlation_id,
            frame.partition_id,
            {"shard": shard},
            flags=Flags.RESPONSE,
        )
        sock.sendto(reply, addr)


if __name__ == "__main__":
    main()
