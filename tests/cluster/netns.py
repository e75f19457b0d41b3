"""A throwaway network of namespaces for multi-node tests: hosts on a bridge, and faults.

    with TestNetwork(3) as net:
        start_node(..., host=net.address(0), prefix=net.exec_prefix(0))
        net.isolate(0)              # node 0's cable pulled: it reaches nobody
        net.drop(0, 1)              # 0 -> 1 dropped (one way); net.drop(1, 0) for both
        net.split(0)                # 0 and the other hosts cut apart; the test reaches all
        net.loss(2, 20)             # 20% of node 2's packets lost, both directions
        net.heal()                  # everything back

Layout: a hub namespace holds a bridge; each host namespace has `eth0`
(address `10.A.B.(i+1)/24`) on a veth whose other end is on the bridge; the
test process itself gets one more veth into the bridge (address `.254`) so
clients in the test reach every host, and lose them as a host's client would.
Faults use what this kernel has: links set down (cuts), nftables rules in a
host's namespace (one-way drops, random loss with `numgen`). The kernel has no
`netem` (CONFIG_NET_SCH_NETEM is off), so there is no added delay.

Every name is unique per instance (tests may run side by side) and everything
is removed on exit, also when the test fails.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import uuid
from types import TracebackType

from tests.xdp.conftest import NETNS_REASON

NFT_TABLE = "laminar_faults"


def netns_reason() -> str | None:
    """Why this machine cannot run the namespace tests, or None."""
    if NETNS_REASON is not None:
        return NETNS_REASON
    if shutil.which("nft") is None:
        return "no `nft` command (Debian nftables; scripts/setup installs it)"
    return None


def _run(*args: str) -> None:
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {result.stderr.strip()}")


class TestNetwork:
    """Network namespaces joined by a bridge (see the module docstring)."""

    __test__ = False  # not a pytest class

    def __init__(self, hosts: int) -> None:
        if not 1 <= hosts <= 200:
            raise ValueError("1..200 hosts")
        tag = uuid.uuid4().hex[:6]
        self.hosts = hosts
        self.hub = f"lxh{tag}"
        self._ns = [f"lx{tag}n{i}" for i in range(hosts)]
        self._hub_ends = [f"lx{tag}h{i}" for i in range(hosts)]
        self._root_end = f"lx{tag}r"
        seed = int(tag, 16)
        self._prefix = f"10.{100 + seed % 150}.{(seed >> 8) % 250}"
        self._made: list[str] = []

    def address(self, host: int) -> str:
        return f"{self._prefix}.{host + 1}"

    @property
    def client_address(self) -> str:
        return f"{self._prefix}.254"

    def namespace(self, host: int) -> str:
        return self._ns[host]

    def exec_prefix(self, host: int) -> list[str]:
        """The command prefix that runs a process on `host`."""
        return ["ip", "netns", "exec", self._ns[host]]

    # -- set-up and tear-down ----------------------------------------------------

    def __enter__(self) -> TestNetwork:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _build(self) -> None:
        _run("ip", "netns", "add", self.hub)
        self._made.append(self.hub)
        _run("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.hub, "link", "set", "br0", "up")
        for i in range(self.hosts):
            ns = self._ns[i]
            _run("ip", "netns", "add", ns)
            self._made.append(ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            self._plug(self._hub_ends[i], ns, "eth0", self.address(i))
        # The test process's own cable into the bridge.
        _run(
            "ip",
            "link",
            "add",
            self._root_end,
            "type",
            "veth",
            "peer",
            "name",
            "up0",
            "netns",
            self.hub,
        )
        _run("ip", "-n", self.hub, "link", "set", "up0", "name", f"{self._root_end}b")
        _run("ip", "-n", self.hub, "link", "set", f"{self._root_end}b", "master", "br0", "up")
        _run("ip", "addr", "add", f"{self.client_address}/24", "dev", self._root_end)
        _run("ip", "link", "set", self._root_end, "up")

    def _plug(self, hub_end: str, ns: str, ifname: str, address: str) -> None:
        _run(
            "ip",
            "-n",
            self.hub,
            "link",
            "add",
            hub_end,
            "type",
            "veth",
            "peer",
            "name",
            ifname,
            "netns",
            ns,
        )
        _run("ip", "-n", self.hub, "link", "set", hub_end, "master", "br0", "up")
        _run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", ifname)
        _run("ip", "-n", ns, "link", "set", ifname, "up")

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):
            _run("ip", "link", "del", self._root_end)
        for ns in reversed(self._made):
            with contextlib.suppress(RuntimeError):
                _run("ip", "netns", "del", ns)
        self._made.clear()

    # -- faults ---------------------------------------------------------------

    def isolate(self, host: int) -> None:
        """Pull `host`'s cable: it reaches nobody and nobody reaches it."""
        _run("ip", "-n", self.hub, "link", "set", self._hub_ends[host], "down")

    def drop(self, src: int, dst: int) -> None:
        """Drop every packet `src` sends to `dst` (one way)."""
        self._rule(src, "output", f"ip daddr {self.address(dst)} drop")

    def split(self, host: int) -> None:
        """Cut `host` off from every other host, both ways; the test process still
        reaches all of them (a client on the minority's side of a partition)."""
        for other in range(self.hosts):
            if other != host:
                self.drop(host, other)
                self.drop(other, host)

    def loss(self, host: int, percent: int) -> None:
        """Lose `percent`% of the packets `host` sends and receives, at random."""
        if not 0 <= percent <= 100:
            raise ValueError("percent is 0..100")
        for hook in ("input", "output"):
            self._rule(host, hook, f"numgen random mod 100 < {percent} drop")

    def heal(self) -> None:
        """Every cable back in, every rule gone, and neighbour entries that
        failed during the fault forgotten (the kernel would retry them only later)."""
        for i in range(self.hosts):
            _run("ip", "-n", self.hub, "link", "set", self._hub_ends[i], "up")
            _run("ip", "-n", self._ns[i], "neigh", "flush", "dev", "eth0")
            with contextlib.suppress(RuntimeError):
                _run(
                    "ip", "netns", "exec", self._ns[i], "nft", "delete", "table", "inet", NFT_TABLE
                )
        _run("ip", "neigh", "flush", "dev", self._root_end)

    def _rule(self, host: int, hook: str, rule: str) -> None:
        nft = ["ip", "netns", "exec", self._ns[host], "nft"]
        _run(*nft, "add", "table", "inet", NFT_TABLE)
        _run(
            *nft,
            "add",
            "chain",
            "inet",
            NFT_TABLE,
            hook,
            f"{{ type filter hook {hook} priority 0; }}",
        )
        _run(*nft, "add", "rule", "inet", NFT_TABLE, hook, *rule.split())
