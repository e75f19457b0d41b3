"""BPF tests run as root with CAP_BPF and bcc; otherwise they skip and say why.

Marks (applied by the fixtures below):
- `bpf_reason` is None when eBPF programs can be compiled and loaded here;
- `netns_reason` is None when the XDP tests can make network namespaces.
Classic BPF tests need nothing and always run.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator

import pytest

from laminar.xdp import bcc_env, bpf_sys
from laminar.xdp.errors import BpfSyscallError, BpfUnavailable


def _bpf_reason() -> str | None:
    if os.geteuid() != 0:
        return "not root: the eBPF tests load programs (CAP_BPF)"
    try:
        bpf_sys.probe_bpf()
    except BpfSyscallError as exc:
        return f"no CAP_BPF: {exc}"
    try:
        bcc_env.import_bcc()
    except BpfUnavailable as exc:
        return f"bcc unavailable: {exc}"
    return None


def _netns_reason() -> str | None:
    if (reason := _bpf_reason()) is not None:
        return reason
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) to make network namespaces"
    return None


BPF_REASON = _bpf_reason()
NETNS_REASON = _netns_reason()

needs_bpf = pytest.mark.skipif(BPF_REASON is not None, reason=str(BPF_REASON))
needs_netns = pytest.mark.skipif(NETNS_REASON is not None, reason=str(NETNS_REASON))


@pytest.fixture
def unique_name() -> Iterator[str]:
    """A short name for test-made kernel objects (netns, links): IFNAMSIZ is 16."""
    yield f"lx{uuid.uuid4().hex[:8]}"
