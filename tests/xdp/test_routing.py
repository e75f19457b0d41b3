"""Choosing the routing mode: the best that loads, reasons for the rest, clear errors.

The unprivileged cases run a real node-side process without CAP_BPF: once as
root with CAP_BPF and CAP_SYS_ADMIN dropped from every capability set, and
once as `nobody` (with the system Python, since pyenv's lives under /root).
In both the kernel itself refuses bpf(2) with EPERM, and the node must come
up in cBPF mode, say so, and still steer every datagram to its owner.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from laminar.xdp import RoutingMode, RoutingUnavailable, SteeringUsageError, cbpf, choose_routing

from .conftest import BPF_REASON, needs_bpf

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = Path("/usr/bin/python3")


@needs_bpf
def test_auto_picks_ebpf_when_it_loads() -> None:
    plan = choose_routing("auto", 4)
    try:
        assert plan.mode is RoutingMode.EBPF
        assert plan.skipped == ()
        assert plan.program is not None
        assert plan.describe() == "routing mode ebpf for 4 shards (requested auto)"
    finally:
        plan.close()


def test_forced_modes_are_taken_as_asked() -> None:
    assert choose_routing("cbpf", 3).mode is RoutingMode.CBPF
    assert choose_routing("userspace", 3).mode is RoutingMode.USERSPACE


def test_too_many_shards_for_cbpf_is_a_clear_error() -> None:
    too_many = cbpf.max_shards() + 1
    with pytest.raises(RoutingUnavailable, match=r"'cbpf' is unavailable: .*at most"):
        choose_routing("cbpf", too_many)


def test_auto_explains_every_skipped_mode() -> None:
    plan = choose_routing("auto", 65)  # beyond both programs
    assert plan.mode is RoutingMode.USERSPACE
    assert [mode for mode, _ in plan.skipped] == [RoutingMode.EBPF, RoutingMode.CBPF]
    assert "ebpf unavailable" in plan.describe() and "cbpf unavailable" in plan.describe()


def test_unknown_requests_are_usage_errors() -> None:
    with pytest.raises(SteeringUsageError):
        choose_routing("xdp", 2)
    with pytest.raises(SteeringUsageError):
        choose_routing("auto", 0)


def _run_unprivileged(prefix: list[str], python: str, env: dict[str, str]) -> dict[str, Any]:
    result = subprocess.run(
        [*prefix, python, "-m", "tests.xdp.unprivileged_node"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


def _assert_fell_back_to_cbpf(report: dict[str, Any]) -> None:
    assert report["mode"] == "cbpf", report
    assert "CAP_BPF" in report["skipped"]["ebpf"], report
    assert "ebpf unavailable" in report["described"]
    assert report["delivered"] == 600
    assert report["at_owner"] == 600
    assert "'ebpf' is unavailable" in report["forced_ebpf"] and "CAP_BPF" in report["forced_ebpf"]


def _needs_root_and_setpriv() -> None:
    if os.geteuid() != 0:
        pytest.skip("not root: cannot drop to an unprivileged identity")
    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv (util-linux) to drop privileges")


def test_without_cap_bpf_the_node_falls_back_to_cbpf() -> None:
    _needs_root_and_setpriv()
    drop = "-bpf,-sys_admin,-perfmon"
    prefix = ["setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}", "--"]
    report = _run_unprivileged(prefix, sys.executable, dict(os.environ))
    assert report["uid"] == 0
    assert report["cap_eff"] & (1 << 39) == 0 and report["cap_eff"] & (1 << 21) == 0
    _assert_fell_back_to_cbpf(report)


def test_as_nobody_the_node_falls_back_to_cbpf() -> None:
    _needs_root_and_setpriv()
    version = subprocess.run(
        [str(SYSTEM_PYTHON), "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    )
    if version.stdout.strip() != str(sys.version_info[:2]):
        pytest.skip(
            f"{SYSTEM_PYTHON} is not Python {sys.version_info[:2]} (for the venv's C extensions)"
        )
    site_packages = sysconfig.get_paths()["purelib"]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{ROOT}:{site_packages}", "HOME": "/tmp"}
    prefix = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]
    report = _run_unprivileged(prefix, str(SYSTEM_PYTHON), env)
    assert report["uid"] != 0 and report["cap_eff"] == 0
    _assert_fell_back_to_cbpf(report)


def test_skip_reason_is_stated_when_bpf_is_missing() -> None:
    # The eBPF tests skip with the cause rather than fail when run unprivileged.
    if BPF_REASON is None:
        assert os.geteuid() == 0
    else:
        assert any(word in BPF_REASON for word in ("root", "CAP_BPF", "bcc"))
