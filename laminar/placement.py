"""Placement: which shard of a node, and which nodes of a cluster, hold a partition.

This module is the one definition. Clients, shards, forwarders and the eBPF
program all compute the same functions, so a request reaches its owner without
asking anyone; `tests/vectors/placement.json` pins the results so that other
implementations (the C of the BPF program, a future client) can be checked
against exactly the same numbers.

- A partition id is the u64 `(topic_id << 32) | partition_idx`. Wherever it is
  hashed or sent it is 8 bytes big-endian (`pid_bytes`).
- Shard of a partition within a node (`shard_for`): rendezvous hashing over the
  shard ids. Shard `i` in `0..N-1` scores `xxh64(pid_be8, seed=i)`; the highest
  score wins and a tie (never seen in practice) goes to the lower `i`. Adding a
  shard moves only the partitions the new shard wins, about 1/(N+1) of them.
- Replica nodes of a partition (`replica_nodes`): weighted rendezvous over the
  live members. Node `n` with weight `w` scores `-w / ln(u)` where
  `u = (xxh64(pid_be8 + n.encode()) + 0.5) / 2**64`, a number strictly inside
  (0, 1); the best `replication_factor` scores win, best first, ties broken by
  node id. `ln(u)` is computed with `log1p` for `u > 1/2` so that hashes close
  to 2**64 (where `u` would round to 1.0 and `ln(u)` to 0) keep their order.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

import xxhash

U32_MAX = 0xFFFF_FFFF
U64_MAX = 0xFFFF_FFFF_FFFF_FFFF

_xxh64 = xxhash.xxh64_intdigest
_TWO_64 = float(2**64)
_HALF_64 = 2**63

# Bounded so a client that touches millions of partitions cannot grow it forever;
# 64k entries cover every partition a node or client works with in practice.
SHARD_CACHE_SIZE = 1 << 16


def partition_id(topic_id: int, partition_idx: int) -> int:
    """The u64 partition id of partition `partition_idx` of topic `topic_id`."""
    if not 0 <= topic_id <= U32_MAX:
        raise ValueError(f"topic_id must be a u32 (0..{U32_MAX}), got {topic_id}")
    if not 0 <= partition_idx <= U32_MAX:
        raise ValueError(f"partition_idx must be a u32 (0..{U32_MAX}), got {partition_idx}")
    return (topic_id << 32) | partition_idx


def split_partition_id(pid: int) -> tuple[int, int]:
    """The `(topic_id, partition_idx)` a partition id was made from."""
    _check_pid(pid)
    return pid >> 32, pid & U32_MAX


def pid_bytes(pid: int) -> bytes:
    """The 8 big-endian bytes of a partition id: what is hashed and what is sent."""
    _check_pid(pid)
    return pid.to_bytes(8, "big")


def shard_hash(pid: int, shard: int) -> int:
    """Shard `shard`'s rendezvous score for `pid`: `xxh64(pid_be8, seed=shard)`."""
    return int(_xxh64(pid_bytes(pid), shard))


def shard_for(pid: int, shard_count: int) -> int:
    """The shard in `0..shard_count-1` that owns partition `pid` on one node.

    Called for every request, so results are kept in a bounded LRU cache; a miss
    costs `shard_count` xxh64 calls.
    """
    return _shard_for_cached(pid, shard_count)


@functools.lru_cache(maxsize=SHARD_CACHE_SIZE, typed=True)
def _shard_for_cached(pid: int, shard_count: int) -> int:
    return shard_for_uncached(pid, shard_count)


def shard_for_uncached(pid: int, shard_count: int) -> int:
    """`shard_for` without the cache: the definition itself, for tests and vectors."""
    if type(shard_count) is not int or shard_count < 1:
        raise ValueError(f"shard_count must be an int >= 1, got {shard_count!r}")
    key = pid_bytes(pid)
    best = 0
    best_hash = -1
    for shard in range(shard_count):
        h = _xxh64(key, shard)
        if h > best_hash:  # strict: a tie keeps the lower shard
            best, best_hash = shard, h
    return best


def replica_score(hash64: int, weight: float) -> float:
    """The weighted rendezvous score `-weight / ln(u)`, `u = (hash64 + 0.5) / 2**64`.

    Exposed so other implementations can be checked score by score. For
    `hash64 >= 2**63` the logarithm is taken as `log1p(-(2**64 - hash64 - 0.5) / 2**64)`,
    which is the same number computed without rounding `u` up to 1.0.
    """
    if hash64 < _HALF_64:
        ln_u = math.log((hash64 + 0.5) / _TWO_64)
    else:
        ln_u = math.log1p(-((2**64 - hash64) - 0.5) / _TWO_64)
    return -weight / ln_u


def replica_hash(pid: int, node_id: str) -> int:
    """Node `node_id`'s rendezvous hash for `pid`: `xxh64(pid_be8 + node_id_utf8)`."""
    return int(_xxh64(pid_bytes(pid) + node_id.encode("utf-8")))


def replica_nodes(pid: int, members: Mapping[str, float], replication_factor: int) -> list[str]:
    """The nodes that hold partition `pid`'s replicas, best first.

    `members` maps live node ids to their weights (finite, > 0). When there are
    fewer members than `replication_factor`, every member is returned: the caller
    decides whether an under-replicated partition is acceptable.
    """
    if type(replication_factor) is not int or replication_factor < 1:
        raise ValueError(f"replication_factor must be an int >= 1, got {replication_factor!r}")
    key = pid_bytes(pid)
    scored: list[tuple[float, str]] = []
    for node_id, weight in members.items():
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"weight of node {node_id!r} must be finite and > 0, got {weight}")
        h = _xxh64(key + node_id.encode("utf-8"))
        scored.append((replica_score(h, weight), node_id))
    # Highest score first; equal scores fall back to the node id, ascending.
    scored.sort(key=lambda s: (-s[0], s[1]))
    return [node_id for _, node_id in scored[:replication_factor]]


def _check_pid(pid: int) -> None:
    if type(pid) is not int or not 0 <= pid <= U64_MAX:
        raise ValueError(f"partition id must be a u64 int (0..{U64_MAX}), got {pid!r}")
