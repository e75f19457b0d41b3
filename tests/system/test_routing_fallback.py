"""A node without CAP_BPF falls back to classic BPF and says so; a forced mode
that cannot load stops start-up with the reason.

The unprivileged node is root with CAP_BPF, CAP_SYS_ADMIN and CAP_NET_ADMIN
dropped from the bounding and inheritable sets (`setpriv`), so the kernel
itself refuses bpf(2) with EPERM, as it does for any user here
(kernel.unprivileged_bpf_disabled).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from laminar.client import Client
from laminar.placement import partition_id, shard_for
from laminar.wire import Ping
from tests.system.nodes import node_command, start_node
from tests.system.routed import call_spread, laminar_cli, metrics, pongs, total

DROP = "-bpf,-sys_admin,-net_admin"
WITHOUT_BPF = ["setpriv", f"--inh-caps={DROP}", f"--bounding-set={DROP}", "--"]


@pytest.fixture
def setpriv() -> None:
    if os.geteuid() != 0:
        pytest.skip("not root: there is no CAP_BPF to drop (the node falls back by itself)")
    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv (util-linux) to drop capabilities")


def _cap_eff(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    raise AssertionError("no CapEff line")


@pytest.mark.usefixtures("setpriv")
def test_without_cap_bpf_auto_falls_back_to_cbpf_and_says_why(tmp_path: Path) -> None:
    with start_node(tmp_path, cores=2, prefix=WITHOUT_BPF, xdp="auto") as node:
        assert _cap_eff(node.pid) & (1 << 39) == 0  # CAP_BPF
        assert node.routing_mode == "cbpf"
        log = node.log_text()
        assert "routing cbpf" in log and "ebpf unavailable: bpf(2) needs CAP_BPF" in log
        assert "xdp classifier not attached: routing is cbpf" in log

        admin = f"{node.admin_host}:{node.admin_port}"
        status = laminar_cli(node, "status", "--json", "--admin", admin)
        assert status.returncode == 0, status.stderr
        doc = json.loads(status.stdout)
        assert doc["routing_mode"] == "cbpf"
        assert doc["xdp"]["attached"] is False and "routing is cbpf" in doc["xdp"]["reason"]

        # Classic BPF still steers every request to its owner.
        with Client(node.bootstrap) as client:
            topic = client.create_topic("plain", partitions=32)
        pids = [partition_id(topic.topic_id, p) for p in range(32)]
        answers = pongs(call_spread(node, [Ping(pids[i % 32]) for i in range(600)]))
        assert all(p.shard_id == shard_for(p.partition_id, 2) == p.received_by for p in answers)
        assert total(metrics(node), "laminar_forwarded_out_total") == 0


@pytest.mark.usefixtures("setpriv")
def test_forcing_ebpf_without_cap_bpf_is_a_start_up_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [*WITHOUT_BPF, *node_command(tmp_path / "data", 2, {"routing": "ebpf"})],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "--routing ebpf: routing mode 'ebpf' is unavailable" in result.stderr
    assert "CAP_BPF" in result.stderr


def test_forcing_cbpf_beyond_its_shard_limit_is_a_start_up_error(tmp_path: Path) -> None:
    flags = {"routing": "cbpf", "allow_oversubscribe": True}
    result = subprocess.run(
        node_command(tmp_path / "data", 15, flags),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "--routing cbpf: routing mode 'cbpf' is unavailable" in result.stderr
    assert "at most 14 shards" in result.stderr
