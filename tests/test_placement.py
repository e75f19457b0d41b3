"""laminar.placement against the committed vectors, plus the properties that make
rendezvous hashing worth having: balance and minimal movement."""

from __future__ import annotations

import importlib.util
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import xxhash

from laminar import placement
from laminar.placement import (
    U32_MAX,
    U64_MAX,
    partition_id,
    pid_bytes,
    replica_hash,
    replica_nodes,
    replica_score,
    shard_for,
    shard_for_uncached,
    shard_hash,
    split_partition_id,
)

VECTORS = json.loads(
    (Path(__file__).parent / "vectors" / "placement.json").read_text(encoding="utf-8")
)
SHARD_CASES: list[dict[str, Any]] = VECTORS["shard"]["cases"]
REPLICA_CASES: list[dict[str, Any]] = VECTORS["replica"]["cases"]
MEMBER_SETS: dict[str, dict[str, float]] = VECTORS["replica"]["member_sets"]

# Many pids spread over topics and partitions, the way a cluster numbers them.
MANY_PIDS = [partition_id(t, i) for t in range(1, 201) for i in range(100)]


# --- vectors ----------------------------------------------------------------


def test_vectors_cover_the_edge_cases() -> None:
    pids = {int(c["pid"], 16) for c in SHARD_CASES}
    assert {0, U64_MAX, U32_MAX, U32_MAX << 32} <= pids
    assert len(SHARD_CASES) >= 200
    assert VECTORS["shard"]["max_shard_count"] == 8


def test_xxh64_is_the_reference_algorithm() -> None:
    # Published xxh64 known answers: the vectors mean nothing if the library differs.
    assert xxhash.xxh64_intdigest(b"") == 0xEF46DB3751D8E999
    assert xxhash.xxh64_intdigest(b"a") == 0xD24EC4F1A98C6E5B


def test_generator_reproduces_the_committed_vectors() -> None:
    # The generator is a second, plain implementation; it must agree with the JSON.
    path = Path(__file__).parent.parent / "scripts" / "gen_placement_vectors.py"
    spec = importlib.util.spec_from_file_location("gen_placement_vectors", path)
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.build() == VECTORS


@pytest.mark.parametrize("case", SHARD_CASES, ids=lambda c: c["pid"])
def test_shard_vectors(case: dict[str, Any]) -> None:
    pid = partition_id(case["topic_id"], case["partition_idx"])
    assert pid == int(case["pid"], 16)
    assert pid_bytes(pid) == bytes.fromhex(case["pid"])
    assert split_partition_id(pid) == (case["topic_id"], case["partition_idx"])
    for seed, expected in enumerate(case["xxh64"]):
        assert shard_hash(pid, seed) == int(expected, 16)
    for n, owner in enumerate(case["owner"], start=1):
        assert shard_for_uncached(pid, n) == owner
        assert shard_for(pid, n) == owner


@pytest.mark.parametrize("case", REPLICA_CASES, ids=lambda c: f"{c['members']}-{c['pid']}")
def test_replica_vectors(case: dict[str, Any]) -> None:
    pid = int(case["pid"], 16)
    members = MEMBER_SETS[case["members"]]
    for node_id, weight in members.items():
        h = replica_hash(pid, node_id)
        assert h == int(case["xxh64"][node_id], 16)
        assert math.isclose(replica_score(h, weight), case["score"][node_id], rel_tol=1e-12)
    for rf, expected in case["replicas"].items():
        assert replica_nodes(pid, members, int(rf)) == expected


# --- identity and validation --------------------------------------------------


def test_partition_id_layout() -> None:
    assert partition_id(0, 0) == 0
    assert partition_id(1, 2) == (1 << 32) | 2
    assert partition_id(U32_MAX, U32_MAX) == U64_MAX
    assert pid_bytes(partition_id(0x01020304, 0x05060708)) == bytes(range(1, 9))


@pytest.mark.parametrize(("topic", "idx"), [(-1, 0), (0, -1), (U32_MAX + 1, 0), (0, 1 << 32)])
def test_partition_id_rejects_out_of_range(topic: int, idx: int) -> None:
    with pytest.raises(ValueError, match="u32"):
        partition_id(topic, idx)


@pytest.mark.parametrize("pid", [-1, U64_MAX + 1, 1.0, True])
def test_pid_must_be_a_u64_int(pid: Any) -> None:
    with pytest.raises(ValueError, match="u64"):
        pid_bytes(pid)
    with pytest.raises(ValueError, match="u64"):
        shard_for(pid, 4)


@pytest.mark.parametrize("n", [0, -1, 2.0])
def test_shard_count_must_be_positive_int(n: Any) -> None:
    with pytest.raises(ValueError, match="shard_count"):
        shard_for(1, n)


def test_one_shard_owns_everything() -> None:
    assert {shard_for(pid, 1) for pid in MANY_PIDS[:500]} == {0}


def test_cache_agrees_with_definition_and_is_bounded() -> None:
    for pid in MANY_PIDS[:2000]:
        for n in (2, 3, 5):
            assert shard_for(pid, n) == shard_for_uncached(pid, n)
    info = placement._shard_for_cached.cache_info()
    assert info.maxsize == placement.SHARD_CACHE_SIZE
    assert info.currsize <= placement.SHARD_CACHE_SIZE


def test_shard_ties_go_to_the_lower_shard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement, "_xxh64", lambda key, seed=0: 42)
    assert shard_for_uncached(7, 5) == 0


# --- shard properties ---------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_shards_are_balanced(n: int) -> None:
    counts = Counter(shard_for_uncached(pid, n) for pid in MANY_PIDS)
    mean = len(MANY_PIDS) / n
    assert set(counts) == set(range(n))
    # 20k pids: one standard deviation is under 1% of the mean here; allow 6%.
    assert max(abs(c - mean) for c in counts.values()) < 0.06 * mean, counts


@pytest.mark.parametrize("n", range(1, 8))
def test_adding_a_shard_moves_only_to_the_new_shard(n: int) -> None:
    moved = 0
    for pid in MANY_PIDS:
        before, after = shard_for_uncached(pid, n), shard_for_uncached(pid, n + 1)
        if before != after:
            assert after == n, "a partition moved between two old shards"
            moved += 1
    expected = len(MANY_PIDS) / (n + 1)
    assert abs(moved - expected) < 0.1 * expected


# --- replica properties -------------------------------------------------------


def test_replica_validation() -> None:
    with pytest.raises(ValueError, match="replication_factor"):
        replica_nodes(1, {"a": 1.0}, 0)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="weight"):
            replica_nodes(1, {"a": 1.0, "b": bad}, 1)
    assert replica_nodes(1, {}, 3) == []
    assert sorted(replica_nodes(1, {"a": 1.0, "b": 2.0}, 5)) == ["a", "b"]


def test_replica_score_extremes_are_finite_and_ordered() -> None:
    hashes = [0, 1, 2**32, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 2**11, 2**64 - 2, 2**64 - 1]
    scores = [replica_score(h, 1.0) for h in hashes]
    assert all(math.isfinite(s) and s > 0 for s in scores)
    assert scores == sorted(scores)  # never decreasing (doubles merge neighbours near 2**63)
    # Near 2**64 the log1p form keeps hashes a few apart distinct instead of dividing by 0.
    assert len({replica_score(2**64 - k, 1.0) for k in (1, 2, 3, 2**11)}) == 4
    assert replica_score(2**64 - 1, 2.0) == 2 * replica_score(2**64 - 1, 1.0)


def test_replica_ties_go_to_the_lower_node_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement, "_xxh64", lambda key, seed=0: 2**62)
    assert replica_nodes(7, {"c": 1.0, "a": 1.0, "b": 1.0}, 2) == ["a", "b"]


def test_replicas_follow_weights() -> None:
    members = {"light": 1.0, "mid": 2.0, "heavy": 3.0}
    firsts = Counter(replica_nodes(pid, members, 1)[0] for pid in MANY_PIDS[:6000])
    for node_id, weight in members.items():
        share = firsts[node_id] / 6000
        assert abs(share - weight / 6) < 0.03, firsts


def test_membership_change_moves_only_affected_replicas() -> None:
    members = {f"n{i}": 1.0 for i in range(6)}
    grown = {**members, "n6": 1.0}
    shrunk = {k: v for k, v in members.items() if k != "n2"}
    for pid in MANY_PIDS[:3000]:
        before = replica_nodes(pid, members, 3)
        after_join = replica_nodes(pid, grown, 3)
        if after_join != before:
            assert "n6" in after_join
            assert [n for n in after_join if n != "n6"] == before[: len(after_join) - 1]
        after_leave = replica_nodes(pid, shrunk, 3)
        if "n2" not in before:
            assert after_leave == before
        else:
            assert after_leave[:2] == [n for n in before if n != "n2"]
