"""The C half of the BPF programs, run in the kernel by BPF_PROG_TEST_RUN.

`laminar_probe` is compiled from the same C (`csource.common_c`) as the
steering program and the classifier; it is given a frame prefix and a shard
count and writes back the frame verdict, the owner and xxh64 for seeds
0..63. Everything is compared with the committed placement vectors and with
`laminar.placement`.
"""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path
from typing import Any

import pytest
import xxhash

from laminar import placement
from laminar.wire import codec
from laminar.xdp import bcc_env, bpf_sys, csource
from laminar.xdp.csource import FrameVerdict

from .conftest import needs_bpf

pytestmark = needs_bpf

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "placement.json"


class Probe:
    def __init__(self) -> None:
        bcc = bcc_env.import_bcc()
        self.bpf = bcc.BPF(text=csource.probe_program_c().encode())
        self.fd = int(self.bpf.load_func(b"laminar_probe", bcc.BPF.XDP).fd)

    def run(self, prefix: bytes, payload_len: int, shards: int) -> tuple[int, int, list[int]]:
        record = struct.pack("<IIII", payload_len, shards, 0xEEEE, 0xEEEE) + prefix.ljust(24, b"\0")
        record = record.ljust(csource.PROBE_RECORD_BYTES, b"\0")
        result = bpf_sys.prog_test_run(self.fd, record)
        verdict, owner = struct.unpack_from("<II", result.data_out, 8)
        hashes = list(struct.unpack_from(f"<{csource.MAX_SHARDS}Q", result.data_out, 40))
        return verdict, owner, hashes


@pytest.fixture(scope="module")
def probe() -> Any:
    p = Probe()
    yield p
    p.bpf.cleanup()


def _prefix(
    pid: int, magic: int = codec.MAGIC, version: int = codec.VERSION, length: int = 21
) -> bytes:
    return codec.PREFIX.pack(length, magic, version, 1, 0, 7, pid)


def test_owner_and_hashes_match_the_placement_vectors(probe: Probe) -> None:
    shard = json.loads(VECTORS.read_text())["shard"]
    assert len(shard["cases"]) > 100
    for case in shard["cases"]:
        pid = int(case["pid"], 16)
        for n in range(1, shard["max_shard_count"] + 1):
            verdict, owner, hashes = probe.run(_prefix(pid), 25, n)
            assert verdict == FrameVerdict.OK
            assert owner == case["owner"][n - 1], (case["pid"], n)
        assert [f"{h:016x}" for h in hashes[: len(case["xxh64"])]] == case["xxh64"]


def test_owner_matches_placement_up_to_64_shards(probe: Probe) -> None:
    rng = random.Random(20261122)
    for _ in range(200):
        pid = rng.getrandbits(64)
        n = rng.randint(1, csource.MAX_SHARDS)
        _, owner, hashes = probe.run(_prefix(pid), 25, n)
        assert owner == placement.shard_for_uncached(pid, n), (hex(pid), n)
        key = placement.pid_bytes(pid)
        assert hashes == [xxhash.xxh64_intdigest(key, seed) for seed in range(csource.MAX_SHARDS)]


@pytest.mark.parametrize(
    ("prefix", "payload_len", "verdict"),
    [
        (_prefix(1), 25, FrameVerdict.OK),
        (_prefix(1, length=996), 1000, FrameVerdict.OK),
        (_prefix(1), 24, FrameVerdict.SHORT),
        (_prefix(1), 0, FrameVerdict.SHORT),
        (_prefix(1, magic=0xA6), 25, FrameVerdict.BAD_MAGIC),
        (_prefix(1, version=2), 25, FrameVerdict.BAD_VERSION),
        (_prefix(1, length=22), 25, FrameVerdict.BAD_LENGTH),
        (_prefix(1, length=0xFFFF_FFFF), 25, FrameVerdict.BAD_LENGTH),
    ],
)
def test_frame_verdicts(probe: Probe, prefix: bytes, payload_len: int, verdict: int) -> None:
    assert probe.run(prefix, payload_len, 1)[0] == verdict
