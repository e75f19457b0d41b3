"""Node settings and the laminar-node command line."""

from __future__ import annotations

import argparse
import os
import socket
from unittest import mock

import pytest

from laminar.cli.node import build_parser, config_from_args, parse_size
from laminar.node import listeners
from laminar.node.listeners import StartupError
from laminar.shards.config import ConfigError, NodeConfig
from laminar.shards.sockets import channel_address


def test_defaults_are_the_embedded_single_node_setup() -> None:
    config = config_from_args(build_parser().parse_args([]))
    assert config.cores == os.cpu_count()
    assert config.host == "127.0.0.1" and config.port == 7070
    assert config.data_dir == os.path.abspath("laminar-data")
    assert [config.shard_port(i) for i in range(2)] == [7071, 7072]
    assert config.admin_port_resolved == 9070
    assert config.flush == "always" and config.runtime == "auto" and config.routing == "auto"


def test_ports_follow_the_flags_and_port_zero_is_ephemeral() -> None:
    base = NodeConfig(cores=1, data_dir="/tmp/x", port=0)
    assert base.shard_port(0) == 0 and base.admin_port_resolved == 0
    fixed = NodeConfig(cores=1, data_dir="/tmp/x", port=8000, shard_port_base=9000, admin_port=1)
    assert fixed.shard_port(0) == 9000 and fixed.admin_port_resolved == 1


def test_bad_settings_say_what_is_allowed() -> None:
    with pytest.raises(ConfigError, match="this machine has"):
        NodeConfig(cores=(os.cpu_count() or 1) + 1, data_dir="/tmp/x")
    with pytest.raises(ConfigError, match=r"0\.\.65535"):
        NodeConfig(cores=1, data_dir="/tmp/x", port=70000)
    with pytest.raises(ConfigError, match="absolute"):
        NodeConfig(cores=1, data_dir="relative")
    with pytest.raises(ConfigError, match="segment-bytes"):
        NodeConfig(cores=1, data_dir="/tmp/x", segment_bytes=10)


def test_a_cluster_never_runs_without_peer_authentication() -> None:
    """--peers without a secret is refused unless --insecure-peers, which is
    loopback only and reported; with a secret peers prove their node keys."""
    peers = ["--node-id", "n1", "--peers", "n2=127.0.0.1:7170"]
    parse = build_parser().parse_args
    with pytest.raises(ConfigError, match="needs --cluster-secret-file"):
        config_from_args(parse(peers))
    insecure = config_from_args(parse([*peers, "--insecure-peers"]))
    assert insecure.peer_auth == "insecure"
    with pytest.raises(ConfigError, match="not a loopback address"):
        config_from_args(parse([*peers, "--insecure-peers", "--host", "10.0.0.1"]))
    secured = config_from_args(parse([*peers, "--cluster-secret-file", "/s"]))
    assert secured.peer_auth == "node-keys"
    assert config_from_args(parse([])).peer_auth == ""
    assert "--insecure-peers" in build_parser().format_help()


def test_config_travels_to_shards_as_json() -> None:
    config = NodeConfig(cores=1, data_dir="/d", flush="never", extra={"steering": {"mode": "x"}})
    assert NodeConfig.from_json(config.to_json()) == config


def test_sizes_accept_binary_units() -> None:
    assert parse_size("4096") == 4096
    assert parse_size("64MiB") == 64 << 20
    assert parse_size("1g") == 1 << 30
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size("lots")


def test_channel_addresses_fall_back_to_the_abstract_namespace() -> None:
    assert channel_address("/data/run", 3) == "/data/run/shard-3.sock"
    deep = "/" + "d" * 120
    address = channel_address(deep, 1)
    assert address.startswith("\0laminar-") and address.endswith("shard-1")
    assert address == channel_address(deep, 1)


def test_port_zero_picks_again_when_the_udp_side_is_taken() -> None:
    """The kernel picks a free TCP port for --port 0; something may hold the
    same port for UDP. A node that asked for any port starts anyway; one that
    named its port is told the port is in use."""
    held = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    held.bind(("127.0.0.1", 0))
    taken = held.getsockname()[1]
    picks = iter([taken, 0])
    real = listeners._probe

    def probe(family: socket.AddressFamily, kind: socket.SocketKind, host: str, port: int,
              what: str) -> int:  # fmt: skip
        if kind == socket.SOCK_STREAM and port == 0:
            port = next(picks)  # the kernel's choice, made to collide once
            if port == taken:
                return taken
        return real(family, kind, host, port, what)

    try:
        with mock.patch.object(listeners, "_probe", probe):
            chosen = listeners._node_port(socket.AF_INET, "127.0.0.1", 0)
            assert chosen not in (0, taken)
            with pytest.raises(StartupError, match=r"node UDP port .* in use"):
                listeners._node_port(socket.AF_INET, "127.0.0.1", taken)
    finally:
        held.close()
