"""Interfaces as iproute2 reports them: which one has an address, and what XDP
program it carries.

`interface_of(host)` finds the interface a node's --host address is on
(`ip -j addr show`): 127.0.0.1 is on `lo`; an address inside an interface's
prefix counts too (127.0.0.2 is on `lo` through 127.0.0.1/8). Wildcards
(0.0.0.0, ::) are on every interface, so they name none.

`ip -j -d link show dev IF` lists the attached program under "xdp": its mode
(IFLA_XDP_ATTACHED: 1 native/driver, 2 generic/skb, 3 offload) and the
program's id and name. An interface carries at most one program per mode
and never native and generic at once. The answer is about the network
namespace of the calling process.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import socket
import subprocess
from dataclasses import dataclass
from typing import Final, Literal

from laminar.xdp.errors import XdpAttachError

XdpMode = Literal["native", "generic", "offload"]

XDP_FLAGS_UPDATE_IF_NOEXIST: Final = 1
XDP_FLAGS_SKB_MODE: Final = 2
XDP_FLAGS_DRV_MODE: Final = 4
XDP_FLAGS_HW_MODE: Final = 8

MODE_FLAGS: Final[dict[XdpMode, int]] = {
    "native": XDP_FLAGS_DRV_MODE,
    "generic": XDP_FLAGS_SKB_MODE,
    "offload": XDP_FLAGS_HW_MODE,
}
_ATTACHED_MODES: Final[dict[int, XdpMode]] = {1: "native", 2: "generic", 3: "offload"}


@dataclass(frozen=True, slots=True)
class AttachedXdp:
    """One XDP program attached to an interface."""

    mode: XdpMode
    prog_id: int
    name: str


def ifindex(ifname: str) -> int:
    """The interface's index in this network namespace."""
    try:
        return socket.if_nametoindex(ifname)
    except OSError as exc:
        raise XdpAttachError(f"no interface {ifname!r} in this network namespace") from exc


WILDCARD_HOSTS: Final = frozenset({"", "0.0.0.0", "::"})


def _ip_json(*args: str) -> list[dict[str, object]]:
    ip = shutil.which("ip")
    if ip is None:
        raise XdpAttachError("the `ip` command (iproute2) is needed to inspect interfaces")
    result = subprocess.run([ip, "-j", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise XdpAttachError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    data = json.loads(result.stdout or "[]")
    return data if isinstance(data, list) else []


def interface_of(host: str) -> str | None:
    """The interface holding `host` (a literal or a name) in this network namespace;
    None for a wildcard or an address no interface has."""
    if host in WILDCARD_HOSTS:
        return None
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    except socket.gaierror:
        return None
    wanted = {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos}
    if any(w.is_unspecified for w in wanted):
        return None
    containing = None
    for link in _ip_json("addr", "show"):
        name = str(link.get("ifname", ""))
        addr_info = link.get("addr_info")
        for entry in addr_info if isinstance(addr_info, list) else []:
            local = ipaddress.ip_address(str(entry.get("local")).split("%")[0])
            if local in wanted:
                return name
            network = ipaddress.ip_network(f"{local}/{entry.get('prefixlen')}", strict=False)
            if containing is None and any(w in network for w in wanted) and local.is_loopback:
                containing = name
    return containing


def attached_xdp(ifname: str, netns: str | None = None) -> list[AttachedXdp]:
    """The XDP programs attached to `ifname` (empty when none), in this process's
    network namespace or in the named one (`ip -n`)."""
    ip = shutil.which("ip")
    if ip is None:
        raise XdpAttachError("the `ip` command (iproute2) is needed to inspect XDP attachments")
    where = [] if netns is None else ["-n", netns]
    result = subprocess.run(
        [ip, *where, "-j", "-d", "link", "show", "dev", ifname],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise XdpAttachError(f"ip link show {ifname}: {result.stderr.strip()}")
    links = json.loads(result.stdout or "[]")
    xdp = links[0].get("xdp") if links else None
    if not xdp:
        return []
    entries = xdp.get("attached") or [xdp]
    found = []
    for entry in entries:
        prog = entry.get("prog")
        mode = _ATTACHED_MODES.get(int(entry.get("mode", 0)))
        if prog and mode:
            found.append(AttachedXdp(mode, int(prog["id"]), str(prog.get("name", ""))))
    return found
