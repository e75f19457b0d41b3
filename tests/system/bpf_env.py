"""What BPF this test process can use, so tests know which routing mode `auto` gives.

`BPF_REASON` is None when eBPF programs compile and load here (root with
CAP_BPF, bcc importable); otherwise it says why not, for skip messages.
`AUTO_ROUTING` is the mode a node started with `--routing auto` reports.
"""

from __future__ import annotations

import os

from laminar.xdp import bcc_env, bpf_sys
from laminar.xdp.errors import BpfSyscallError, BpfUnavailable


def _bpf_reason() -> str | None:
    if os.geteuid() != 0:
        return "not root: eBPF steering needs CAP_BPF"
    try:
        bpf_sys.probe_bpf()
    except BpfSyscallError as exc:
        return f"no CAP_BPF: {exc}"
    try:
        bcc_env.import_bcc()
    except BpfUnavailable as exc:
        return f"bcc unavailable: {exc}"
    return None


BPF_REASON = _bpf_reason()
AUTO_ROUTING = "ebpf" if BPF_REASON is None else "cbpf"
