"""The C text of laminar's BPF programs, and the numbers C and Python share.

Three programs are compiled by bcc from the text here, all on one common part:

- `laminar_steer` (SK_REUSEPORT, attached to the node's UDP reuseport group):
  checks the frame prefix of each datagram, computes the owning shard and
  selects that shard's socket from a REUSEPORT_SOCKARRAY.
- `laminar_xdp` (XDP, attached to the node's interface): classifies UDP
  packets for the node's ports as partition, membership or malformed, drops
  malformed ones, counts every class per CPU.
- `laminar_probe` (XDP, never attached): runs the common part over bytes
  handed to BPF_PROG_TEST_RUN, so tests hold the C to the placement vectors.

Facts the C relies on
---------------------

- A laminar datagram is exactly one frame (`laminar.wire.codec`): a 20-byte
  prefix `u32 frame_len | u8 magic | u8 version | u8 op | u8 flags |
  u32 correlation_id | u64 partition_id`, big-endian, then at least 5 more
  bytes. A datagram is *malformed* when it is shorter than the smallest frame
  (25 bytes), its magic is not 0xA7, its version is not the one spoken here,
  or `frame_len` disagrees with its length (one datagram, one frame). Both
  programs use the one check, `laminar_check_prefix`, and count the same four
  reasons.
- xxh64 of 8 bytes reads them as one little-endian u64 lane. The partition id
  travels big-endian, so the lane is bytes 12..19 of the frame assembled
  little-endian; `laminar_pid_lane` does that byte by byte, which is right on
  either host byte order.
- For 8 bytes, xxh64 is: `acc = seed + P5 + 8; acc ^= rotl(lane * P2, 31) * P1;
  acc = rotl(acc, 27) * P1 + P4;` then the avalanche (xor-shift 33, *P2,
  xor-shift 29, *P3, xor-shift 32). Only the first line depends on the seed,
  so `k1 = rotl(lane * P2, 31) * P1` is computed once per datagram and each
  shard costs three multiplications.
- The owner is the shard with the highest hash, ties to the lower index (the
  strict `>` below), over `n` shards where `n` is read from a one-slot array
  map: a bounded loop of at most `LAMINAR_MAX_SHARDS` (64) iterations with an
  early break at `n`, so changing the shard count needs no recompile.
- In an SK_REUSEPORT program the context's data starts at the UDP header, so
  the frame is at offset 8 and `md->len` counts the UDP header. A select that
  fails (the owner's slot is empty: its socket closed) is counted and the
  program returns SK_PASS without a selection, which makes the kernel pick a
  socket by the usual 4-tuple hash: that shard forwards. SK_DROP drops.
- Verifier pitfalls met on the way (kernel 6.18, clang 14), kept out of the
  code on purpose:
  * a fully unrolled owner loop (`#pragma unroll`) makes the verifier walk
    both sides of every `h > best` branch without pruning: "the sequence of
    8193 jumps is too complex". The loop stays a loop (unroll disabled).
  * clang uses the caller's `n <= 64` check to drop the loop's constant
    bound and exits on `i == n - 1`, which the verifier cannot bound; an
    empty `asm volatile` on `n` hides that knowledge.
  * a "branchless" maximum with masks `0 - (a < b)` (values -1 or 0) makes
    this kernel's verifier fork states in `maybe_fork_scalars`, and on the
    6.18.44 kernel here that path oopsed (NULL dereference, the loading
    process killed). Never use -1/0 masks with AND/OR in these programs.
- XDP sees the whole packet. IPv4 with options and IPv6 without extension
  headers are parsed; IPv4 fragments are passed as "other" (only the first
  carries the UDP header, and the frame check needs the whole datagram).
"""

from __future__ import annotations

import enum
from typing import Final

from laminar.wire import codec
from laminar.wire.ops import MEMBERSHIP_OPS

MAX_SHARDS: Final = 64
MEMBERSHIP_SLOT: Final = MAX_SHARDS
"""The socket-array slot of the membership agent's socket (after the shards')."""
SOCKARRAY_SLOTS: Final = MAX_SHARDS + 1
UDP_HEADER_BYTES: Final = 8


class FrameVerdict(enum.IntEnum):
    """What `laminar_check_prefix` says about a datagram."""

    OK = 0
    SHORT = 1
    BAD_MAGIC = 2
    BAD_VERSION = 3
    BAD_LENGTH = 4


class SteerCounter(enum.IntEnum):
    """Per-CPU counters of the SK_REUSEPORT program (slots of `steer_counters`).

    Slots 1-4 are the malformed reasons, numbered like `FrameVerdict`.
    """

    STEERED = 0
    SHORT = 1
    BAD_MAGIC = 2
    BAD_VERSION = 3
    BAD_LENGTH = 4
    NO_SOCKET = 5  # the owner's slot is empty: the kernel hashed it to some shard
    UNCONFIGURED = 6  # shard count not set (0): the kernel hashed it
    MEMBERSHIP = 7  # a membership op (96-127): sent to the agent's socket


class XdpCounter(enum.IntEnum):
    """Per-CPU counters of the XDP classifier (slots of `xdp_counters`).

    Slots 1-4 are the malformed reasons, numbered like `FrameVerdict`.
    """

    PARTITION = 0
    SHORT = 1
    BAD_MAGIC = 2
    BAD_VERSION = 3
    BAD_LENGTH = 4
    MEMBERSHIP = 5
    OTHER = 6  # not UDP to a node port (or an IPv4 fragment): passed untouched


MALFORMED_REASONS: Final = (
    FrameVerdict.SHORT,
    FrameVerdict.BAD_MAGIC,
    FrameVerdict.BAD_VERSION,
    FrameVerdict.BAD_LENGTH,
)


class PortClass(enum.IntEnum):
    """What the classifier expects on a UDP port (values of `xdp_ports`)."""

    PARTITION = 1  # the node port: laminar frames, checked
    MEMBERSHIP = 2  # the SWIM port: its own format, counted and passed


def _enum_defines(prefix: str, members: type[enum.IntEnum]) -> str:
    return "".join(f"#define {prefix}_{m.name} {int(m)}\n" for m in members)


def common_c() -> str:
    """Constants, the frame check and xxh64: included by every program."""
    return (
        "/* laminar: generated from laminar/xdp/csource.py; numbers from laminar.wire. */\n"
        f"#define LAMINAR_MAGIC {codec.MAGIC:#x}\n"
        f"#define LAMINAR_VERSION {codec.VERSION}\n"
        f"#define LAMINAR_PREFIX_BYTES {codec.PREFIX_BYTES}\n"
        f"#define LAMINAR_MIN_FRAME_BYTES {codec.MIN_FRAME_BYTES}\n"
        f"#define LAMINAR_OFFSET_MAGIC {codec.OFFSET_MAGIC}\n"
        f"#define LAMINAR_OFFSET_VERSION {codec.OFFSET_VERSION}\n"
        f"#define LAMINAR_OFFSET_OP {codec.OFFSET_OP}\n"
        f"#define LAMINAR_OFFSET_PARTITION_ID {codec.OFFSET_PARTITION_ID}\n"
        f"#define LAMINAR_MEMBERSHIP_OP_FIRST {MEMBERSHIP_OPS.start}\n"
        f"#define LAMINAR_MEMBERSHIP_OP_END {MEMBERSHIP_OPS.stop}\n"
        f"#define LAMINAR_MAX_SHARDS {MAX_SHARDS}\n"
        f"#define LAMINAR_MEMBERSHIP_SLOT {MEMBERSHIP_SLOT}\n"
        f"#define LAMINAR_UDP_HEADER_BYTES {UDP_HEADER_BYTES}\n"
        + _enum_defines("VERDICT", FrameVerdict)
        + _enum_defines("STEER", SteerCounter)
        + _enum_defines("XDPC", XdpCounter)
        + _enum_defines("PORT", PortClass)
        + _COMMON_C
    )


_COMMON_C: Final = r"""
#define XXH_P1 0x9E3779B185EBCA87ULL
#define XXH_P2 0xC2B2AE3D27D4EB4FULL
#define XXH_P3 0x165667B19E3779F9ULL
#define XXH_P4 0x85EBCA77C2B2AE63ULL
#define XXH_P5 0x27D4EB2F165667C5ULL

static __always_inline u64 laminar_rotl64(u64 x, int r) {
    return (x << r) | (x >> (64 - r));
}

/* The malformed reason of a datagram whose first 20 bytes are `p`. */
static __always_inline u32 laminar_check_prefix(const u8 *p, u32 payload_len) {
    if (payload_len < LAMINAR_MIN_FRAME_BYTES)
        return VERDICT_SHORT;
    if (p[LAMINAR_OFFSET_MAGIC] != LAMINAR_MAGIC)
        return VERDICT_BAD_MAGIC;
    if (p[LAMINAR_OFFSET_VERSION] != LAMINAR_VERSION)
        return VERDICT_BAD_VERSION;
    u32 frame_len = ((u32)p[0] << 24) | ((u32)p[1] << 16) | ((u32)p[2] << 8) | (u32)p[3];
    if (frame_len != payload_len - 4)
        return VERDICT_BAD_LENGTH;
    return VERDICT_OK;
}

/* The xxh64 lane of the partition id: bytes 12..19 read little-endian. */
static __always_inline u64 laminar_pid_lane(const u8 *p) {
    u64 lane = 0;
#pragma unroll
    for (int i = 7; i >= 0; i--)
        lane = (lane << 8) | (u64)p[LAMINAR_OFFSET_PARTITION_ID + i];
    return lane;
}

/* The seed-independent half of xxh64 over one 8-byte lane. */
static __always_inline u64 laminar_xxh64_k1(u64 lane) {
    return laminar_rotl64(lane * XXH_P2, 31) * XXH_P1;
}

/* xxh64(lane bytes, seed) given k1 = laminar_xxh64_k1(lane). */
static __always_inline u64 laminar_xxh64_seeded(u64 k1, u64 seed) {
    u64 acc = seed + XXH_P5 + 8;
    acc ^= k1;
    acc = laminar_rotl64(acc, 27) * XXH_P1 + XXH_P4;
    acc ^= acc >> 33;
    acc *= XXH_P2;
    acc ^= acc >> 29;
    acc *= XXH_P3;
    acc ^= acc >> 32;
    return acc;
}

/* Rendezvous owner among shards 0..n-1: highest xxh64, ties to the lower index.
 *
 * The empty asm hides what the compiler knows about n (callers check n <= 64):
 * without it clang drops the constant bound and exits on i == n - 1, a loop
 * the verifier cannot bound. With it, every iteration has the i < 64 exit. */
static __always_inline u32 laminar_owner(u64 lane, u32 n) {
    asm volatile("" : "+r"(n));
    u64 k1 = laminar_xxh64_k1(lane);
    u32 best = 0;
    u64 best_hash = laminar_xxh64_seeded(k1, 0);
#pragma clang loop unroll(disable)
    for (u32 i = 1; i < LAMINAR_MAX_SHARDS; i++) {
        if (i >= n)
            break;
        u64 h = laminar_xxh64_seeded(k1, i);
        if (h > best_hash) {
            best = i;
            best_hash = h;
        }
    }
    return best;
}
"""


def steer_program_c(sockarray_fd: int) -> str:
    """The SK_REUSEPORT program, bound to the socket array with fd `sockarray_fd`."""
    return (
        "#include <uapi/linux/bpf.h>\n"
        + common_c()
        + f"#define LAMINAR_SOCKARRAY_FD {int(sockarray_fd)}\n"
        + f"#define LAMINAR_STEER_COUNTERS {len(SteerCounter)}\n"
        + _STEER_C
    )


_STEER_C: Final = r"""
BPF_PERCPU_ARRAY(steer_counters, u64, LAMINAR_STEER_COUNTERS);
BPF_ARRAY(steer_config, u32, 1); /* [0]: number of shards */

static __always_inline void steer_count(u32 slot) {
    u64 *c = steer_counters.lookup(&slot);
    if (c)
        *c += 1;
}

int laminar_steer(struct sk_reuseport_md *md) {
    u8 prefix[LAMINAR_PREFIX_BYTES] = {};
    u32 len = md->len;
    if (len < LAMINAR_UDP_HEADER_BYTES + LAMINAR_MIN_FRAME_BYTES) {
        steer_count(STEER_SHORT);
        return SK_DROP;
    }
    if (bpf_skb_load_bytes(md, LAMINAR_UDP_HEADER_BYTES, prefix, LAMINAR_PREFIX_BYTES) < 0) {
        steer_count(STEER_SHORT);
        return SK_DROP;
    }
    u32 verdict = laminar_check_prefix(prefix, len - LAMINAR_UDP_HEADER_BYTES);
    if (verdict != VERDICT_OK) {
        steer_count(verdict);
        return SK_DROP;
    }
    void *sockarray = (void *)bpf_pseudo_fd(1, LAMINAR_SOCKARRAY_FD);
    u8 op = prefix[LAMINAR_OFFSET_OP];
    if (op >= LAMINAR_MEMBERSHIP_OP_FIRST && op < LAMINAR_MEMBERSHIP_OP_END) {
        /* Membership traffic goes to the agent's socket, never to a shard; with
         * no agent (membership off) it is dropped, not hashed to a shard. */
        u32 agent = LAMINAR_MEMBERSHIP_SLOT;
        if (bpf_sk_select_reuseport(md, sockarray, &agent, 0) != 0) {
            steer_count(STEER_NO_SOCKET);
            return SK_DROP;
        }
        steer_count(STEER_MEMBERSHIP);
        return SK_PASS;
    }
    u32 zero = 0;
    u32 *shards = steer_config.lookup(&zero);
    if (!shards || *shards == 0 || *shards > LAMINAR_MAX_SHARDS) {
        steer_count(STEER_UNCONFIGURED);
        return SK_PASS;
    }
    u32 slot = laminar_owner(laminar_pid_lane(prefix), *shards);
    if (bpf_sk_select_reuseport(md, sockarray, &slot, 0) != 0) {
        steer_count(STEER_NO_SOCKET);
        return SK_PASS;
    }
    steer_count(STEER_STEERED);
    return SK_PASS;
}
"""


def classifier_program_c() -> str:
    """The XDP classifier."""
    return (
        "#include <uapi/linux/bpf.h>\n"
        "#include <linux/if_ether.h>\n"
        "#include <linux/in.h>\n"
        "#include <linux/ip.h>\n"
        "#include <linux/ipv6.h>\n"
        "#include <linux/udp.h>\n"
        + common_c()
        + f"#define LAMINAR_XDP_COUNTERS {len(XdpCounter)}\n"
        + _CLASSIFIER_C
    )


_CLASSIFIER_C: Final = r"""
BPF_PERCPU_ARRAY(xdp_counters, u64, LAMINAR_XDP_COUNTERS);
BPF_HASH(xdp_ports, u16, u8, 64); /* UDP port, network byte order -> PORT_* */

static __always_inline int xdp_count(u32 slot, int action) {
    u64 *c = xdp_counters.lookup(&slot);
    if (c)
        *c += 1;
    return action;
}

int laminar_xdp(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data;
    void *data_end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    struct udphdr *udp;

    if ((void *)(eth + 1) > data_end)
        return xdp_count(XDPC_OTHER, XDP_PASS);
    if (eth->h_proto == htons(ETH_P_IP)) {
        struct iphdr *ip = (void *)(eth + 1);
        if ((void *)(ip + 1) > data_end)
            return xdp_count(XDPC_OTHER, XDP_PASS);
        if (ip->protocol != IPPROTO_UDP || (ip->frag_off & htons(0x3FFF)) || ip->ihl < 5)
            return xdp_count(XDPC_OTHER, XDP_PASS);
        udp = (void *)ip + ip->ihl * 4;
    } else if (eth->h_proto == htons(ETH_P_IPV6)) {
        struct ipv6hdr *ip6 = (void *)(eth + 1);
        if ((void *)(ip6 + 1) > data_end)
            return xdp_count(XDPC_OTHER, XDP_PASS);
        if (ip6->nexthdr != IPPROTO_UDP)
            return xdp_count(XDPC_OTHER, XDP_PASS);
        udp = (void *)(ip6 + 1);
    } else {
        return xdp_count(XDPC_OTHER, XDP_PASS);
    }
    if ((void *)(udp + 1) > data_end)
        return xdp_count(XDPC_OTHER, XDP_PASS);

    u16 dport = udp->dest;
    u8 *port_class = xdp_ports.lookup(&dport);
    if (!port_class)
        return xdp_count(XDPC_OTHER, XDP_PASS);
    if (*port_class == PORT_MEMBERSHIP)
        return xdp_count(XDPC_MEMBERSHIP, XDP_PASS);

    u32 udp_len = ntohs(udp->len);
    u8 *payload = (void *)(udp + 1);
    if (udp_len < LAMINAR_UDP_HEADER_BYTES + LAMINAR_MIN_FRAME_BYTES)
        return xdp_count(XDPC_SHORT, XDP_DROP);
    if ((void *)(payload + LAMINAR_PREFIX_BYTES) > data_end)
        return xdp_count(XDPC_SHORT, XDP_DROP);
    u8 prefix[LAMINAR_PREFIX_BYTES];
    __builtin_memcpy(prefix, payload, LAMINAR_PREFIX_BYTES);
    u32 verdict = laminar_check_prefix(prefix, udp_len - LAMINAR_UDP_HEADER_BYTES);
    if (verdict != VERDICT_OK)
        return xdp_count(verdict, XDP_DROP);
    u8 op = prefix[LAMINAR_OFFSET_OP];
    if (op >= LAMINAR_MEMBERSHIP_OP_FIRST && op < LAMINAR_MEMBERSHIP_OP_END)
        return xdp_count(XDPC_MEMBERSHIP, XDP_PASS);
    return xdp_count(XDPC_PARTITION, XDP_PASS);
}
"""

# The probe's in/out record, all little-endian u32/u64 (the host is x86/arm64):
#   0 u32 payload_len (in)   4 u32 shard count n (in)
#   8 u32 verdict (out)     12 u32 owner (out)
#  16 prefix (20 bytes, in) 36 pad (4)
#  40 u64 xxh64 for seeds 0..63 (out)
PROBE_RECORD_BYTES: Final = 40 + 8 * MAX_SHARDS


def probe_program_c() -> str:
    """An XDP program that runs the common part over a probe record, for tests."""
    return (
        "#include <uapi/linux/bpf.h>\n"
        + common_c()
        + f"#define PROBE_RECORD_BYTES {PROBE_RECORD_BYTES}\n"
        + _PROBE_C
    )


_PROBE_C: Final = r"""
int laminar_probe(struct xdp_md *ctx) {
    u8 *data = (void *)(long)ctx->data;
    void *data_end = (void *)(long)ctx->data_end;
    if ((void *)(data + PROBE_RECORD_BYTES) > data_end)
        return XDP_ABORTED;
    u32 payload_len = *(u32 *)(data + 0);
    u32 n = *(u32 *)(data + 4);
    u8 prefix[LAMINAR_PREFIX_BYTES];
    __builtin_memcpy(prefix, data + 16, LAMINAR_PREFIX_BYTES);
    *(u32 *)(data + 8) = laminar_check_prefix(prefix, payload_len);
    u64 lane = laminar_pid_lane(prefix);
    *(u32 *)(data + 12) = laminar_owner(lane, n);
    u64 k1 = laminar_xxh64_k1(lane);
#pragma clang loop unroll(disable)
    for (u32 seed = 0; seed < LAMINAR_MAX_SHARDS; seed++) {
        u64 *out = (u64 *)(data + 40) + seed;
        if ((void *)(out + 1) > data_end)
            break;
        *out = laminar_xxh64_seeded(k1, seed);
    }
    return XDP_PASS;
}
"""
