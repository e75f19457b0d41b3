"""Kernel-side request routing for the node port: reuseport steering and XDP.

A UDP datagram for partition p should land on the socket of the shard that
owns p (`laminar.placement.shard_for(p, N)`) without a userspace hop. Three
routing modes do that, best first, and the node reports which one runs:

- `ebpf`: an SK_REUSEPORT program (bcc) reads the partition id from the frame
  prefix, computes the xxh64 rendezvous owner and selects its socket from a
  REUSEPORT_SOCKARRAY; malformed datagrams are counted and dropped. Needs
  CAP_BPF.
- `cbpf`: a classic reuseport program computes the same owner with 32-bit
  arithmetic and returns its socket's bind-order index. No privilege needed,
  no counters, no drops; at most `cbpf.max_shards()` (14) shards.
- `userspace`: plain SO_REUSEPORT; the kernel hashes, shards forward.

Shards check ownership and forward in every mode: correctness never depends
on BPF. Separately, an XDP classifier on the interface counts partition,
membership and malformed packets per CPU and drops the malformed early.

Supervisor side
---------------

    from laminar.xdp import ReuseportSteering, XdpClassifier

    steering = ReuseportSteering.prepare(shard_count=N, host="0.0.0.0", port=7000,
                                         routing="auto")   # or "ebpf"|"cbpf"|"userspace"
    log.info(steering.describe())           # mode, and why better modes were skipped
    steering.mode                           # RoutingMode.EBPF / CBPF / USERSPACE
    spec_json = steering.spec.to_json()     # give to every shard (argv or env)
    Popen([... shard i ...], pass_fds=steering.fds_for_shard(i))
    steering.counters()                     # SteerCounters (eBPF) or None
    # shard i exited for good / must get a fresh socket (after its process is gone):
    steering.retire(i); new_fd = steering.replace(i); spec_json = steering.spec.to_json()
    steering.close()                        # at shutdown (also a context manager)

    classifier = XdpClassifier(ifname, partition_ports=[7000], membership_ports=[7946])
    classifier.attach()                     # replaces a stale laminar_xdp left by a killed run
    classifier.counters().as_dict()         # for /metrics and `laminar status`
    classifier.close()                      # the link also dies with the process, even SIGKILL

`choose_routing(requested, shard_count) -> RoutingPlan` is the chooser
`prepare` uses; call it first to log or report before binding. A forced mode
that cannot load raises `RoutingUnavailable` with the cause.

Shard side
----------

    from laminar.xdp import SteeringSpec, open_shard_socket
    sock = open_shard_socket(SteeringSpec.from_json(spec_json), shard_index)

`fds_for_shard(i)` is shard i's socket, plus in eBPF mode the socket array and
program fds, which `attach_shard_socket(spec, i, sock)` needs to register a
socket the shard bound itself. The spec carries fd numbers: pass_fds keeps
them unchanged in the child.

In the node
-----------

`laminar.node.steering.prepare_steering` does the supervisor side for
`laminar-node` (`--routing`, `--xdp`) and `laminar.node.xdp_attach` owns
the classifier; shards adopt the socket passed to them. `laminar.client.udp`
is a small client for the node port's UDP path.

Modules
-------

- `bcc_env`: bcc in the venv and the fake kernel header tree it compiles with
- `bpf_sys`: raw bpf(2) through ctypes (socket array, test run, links, info)
- `csource`: the C text of the programs and the numbers shared with Python
- `ebpf_steer`: the loaded SK_REUSEPORT program, its socket array, counters
- `cbpf`: the classic program: assembler and xxh64 over 32-bit halves
- `sockets`: reuseport UDP sockets and the attach socket options
- `routing`: `choose_routing`, `RoutingMode`, `RoutingPlan`
- `steering`: `ReuseportSteering`, `SteeringSpec`, the shard-side functions
- `iface`, `classifier`: XDP attachment state and the `XdpClassifier`
"""

from laminar.xdp.classifier import XdpClassifier, XdpCounters
from laminar.xdp.ebpf_steer import SteerCounters
from laminar.xdp.errors import (
    BpfSyscallError,
    BpfUnavailable,
    RoutingUnavailable,
    SteeringUsageError,
    XdpAttachError,
)
from laminar.xdp.routing import RoutingMode, RoutingPlan, choose_routing
from laminar.xdp.steering import (
    ReuseportSteering,
    SteeringSpec,
    attach_shard_socket,
    open_shard_socket,
)

__all__ = [
    "BpfSyscallError",
    "BpfUnavailable",
    "ReuseportSteering",
    "RoutingMode",
    "RoutingPlan",
    "RoutingUnavailable",
    "SteerCounters",
    "SteeringSpec",
    "SteeringUsageError",
    "XdpAttachError",
    "XdpClassifier",
    "XdpCounters",
    "attach_shard_socket",
    "choose_routing",
    "open_shard_socket",
]
