"""Node settings and the laminar-node command line."""

from __future__ import annotations

import argparse
import math
import os
import socket
from dataclasses import fields
from typing import Any
from unittest import mock

import pytest

from laminar.channels.sockets import channel_address
from laminar.cli.node import build_parser, config_from_args, main, parse_size
from laminar.node import listeners
from laminar.node.listeners import StartupError
from laminar.shards.config import MAX_TOPICS_CEILING, ConfigError, NodeConfig
from laminar.shards.settings import settings_of


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


def test_membership_is_authenticated_by_the_secret_or_signed_by_certificates() -> None:
    """--join and --gossip run membership: with TLS between nodes its datagrams
    are signed by certificate and no secret is needed, else the secret tags them."""
    parse = build_parser().parse_args
    tls = ["--tls-cert-file", "/c.pem", "--tls-key-file", "/k.pem", "--tls-ca-file", "/ca.pem"]
    for flags in (["--gossip"], ["--join", "127.0.0.1:8070"]):
        with pytest.raises(ConfigError, match="runs membership, whose datagrams must be"):
            config_from_args(parse(["--node-id", "n1", *flags]))
        signed = config_from_args(parse(["--node-id", "n1", *flags, *tls]))
        assert signed.gossiped and signed.gossip_signed and signed.peer_auth == "certificates"
        tagged = config_from_args(parse(["--node-id", "n1", *flags, "--cluster-secret-file", "/s"]))
        assert tagged.gossiped and not tagged.gossip_signed
    seed = config_from_args(parse(["--node-id", "n1", "--cluster-secret-file", "/s"]))
    assert seed.gossiped and seed.membership and not seed.gossip_signed
    alone = config_from_args(parse(["--node-id", "n1", *tls]))
    assert not alone.membership and not alone.clustered


def test_a_node_facing_a_network_needs_tls_and_logins_unless_insecure() -> None:
    """Safe by default: a non-loopback --host without TLS and --auth is refused
    (the message names what is missing), --insecure lets it run."""
    parse = build_parser().parse_args
    tls = ["--tls-cert-file", "/c.pem", "--tls-key-file", "/k.pem"]
    exposed = ["--host", "0.0.0.0"]
    with pytest.raises(ConfigError, match=r"needs TLS .* and client authentication"):
        config_from_args(parse(exposed))
    with pytest.raises(ConfigError, match=r"needs client authentication \(--auth scram\)"):
        config_from_args(parse([*exposed, *tls]))
    with pytest.raises(ConfigError, match=r"needs TLS \(--tls-cert-file"):
        config_from_args(parse([*exposed, "--auth", "scram"]))
    assert config_from_args(parse([*exposed, *tls, "--auth", "scram"])).authenticated
    assert config_from_args(parse([*exposed, "--insecure"])).insecure
    assert not config_from_args(parse([])).authenticated  # loopback: as before


def test_login_settings_go_with_auth() -> None:
    parse = build_parser().parse_args
    with pytest.raises(ConfigError, match="--bootstrap-user-file needs --auth scram"):
        config_from_args(parse(["--bootstrap-user-file", "/admin.cred"]))
    with pytest.raises(ConfigError, match="--superusers needs --auth scram"):
        config_from_args(parse(["--superusers", "User:ops"]))
    with pytest.raises(ConfigError, match="--superusers"):
        config_from_args(parse(["--auth", "scram", "--superusers", "ops"]))
    config = config_from_args(parse(["--auth", "scram", "--superusers", "User:ops,User:sre"]))
    assert config.superusers == ("User:ops", "User:sre")
    assert NodeConfig.from_json(config.to_json()) == config


def test_every_setting_has_a_flag_a_help_and_a_default_it_accepts() -> None:
    """The table is complete: every field but the plug-ins' `extra` is a setting,
    each with its own flag in --help, and each flag's default passes the checks."""
    table = list(settings_of(NodeConfig))
    assert {f.name for f in fields(NodeConfig)} - {f.name for f, _ in table} == {"extra"}
    assert len({s.flag for _, s in table}) == len(table)
    help_text = build_parser().format_help()
    defaults = build_parser().parse_args([])
    for f, s in table:
        assert s.flag.startswith("--") and s.flag in help_text and s.help.strip(), f.name
        assert s.complaint(getattr(defaults, f.name)) is None, f.name


def test_flags_set_their_fields() -> None:
    parse = build_parser().parse_args
    flags = ["--max-open-files", "64", "--move-rate", "0", "--idle-timeout", "5"]
    flags += ["--join", "a:1, b:2", "--cluster-secret-file", "s", "--log-level", "debug"]
    config = config_from_args(parse([*flags, "--segment-bytes", "1MiB", "--udp-writes"]))
    assert (config.open_files_max, config.move_bytes_per_s, config.idle_timeout_s) == (64, 0, 5)
    assert config.join == ("a:1", "b:2") and config.cluster_secret_file == os.path.abspath("s")
    assert config.log_level == "DEBUG" and config.segment_bytes == 1 << 20 and config.udp_writes


BASE: dict[str, Any] = {"cores": 1, "data_dir": "/tmp/x"}
PEERS: dict[str, Any] = {"node_id": "n1", "peers": "n2=127.0.0.1:7170"}
TLS: dict[str, Any] = {"tls_cert_file": "/c.pem", "tls_key_file": "/k.pem"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # between
        ({"membership_port": 65536}, "--membership-port must be in 0..65535, got 65536"),
        ({"dead_grace_s": math.nan}, "--dead-grace must be in 0..86400, got nan"),
        ({"udp_max_bytes": 70_000}, "--udp-max-bytes must be in 25..65507, got 70000"),
        # at_least
        ({"segment_bytes": 10}, "--segment-bytes must be at least 4096, got 10"),
        ({"staging_bytes_max": 100}, "--staging-bytes-max must be at least 64KiB, got 100"),
        ({"max_wait_ms": -1}, "--max-wait-ms must be at least 0, got -1"),
        ({"move_bytes_per_s": -1}, "--move-rate must be at least 0 bytes/s, got -1"),
        # at_most
        (
            {"max_topics": MAX_TOPICS_CEILING + 1},
            f"--max-topics must be at most {MAX_TOPICS_CEILING} (every topic is in every "
            f"metadata answer), got {MAX_TOPICS_CEILING + 1}",
        ),
        # positive
        ({"idle_timeout_s": 0}, "--idle-timeout must be positive, got 0"),
        ({"frame_timeout_s": math.nan}, "--frame-timeout must be positive, got nan"),
        ({"weight": "2"}, "--weight must be a number in (0, 1e+09], got '2'"),
        ({"weight": 2e9}, "--weight must be a number in (0, 1e+09], got 2000000000.0"),
        # one_of, from choices and from checks
        ({"routing": "x"}, "--routing must be one of auto, ebpf, cbpf, userspace, got 'x'"),
        ({"log_level": "debug"}, "--log-level must be one of DEBUG, INFO, WARNING, ERROR"),
        ({"metadata_voters": 4}, "--metadata-voters must be one of 1, 3, 5, 7, got 4"),
        # absolute_path, host_ports
        ({"data_dir": "rel"}, "--data-dir must be absolute, got 'rel'"),
        ({"join": ("a:1", "b:x")}, "--join wants HOST:PORT addresses, got 'b:x'"),
        # rules relating two settings
        ({"cores": 0}, "--cores 0 is not possible here"),
        ({"shard_port_base": 65535, "cores": 2}, "--shard-port-base 65535 leaves no room"),
        ({"open_files_max": 7}, "--max-open-files must be at least 8, got 7"),
        ({"max_input_bytes": 1 << 20, "max_frame_bytes": 1 << 20}, "must hold two frames"),
        ({"peers": "n2"}, "--peers / --node-id: peer 'n2' is not ID=HOST:PORT"),
        ({"peers": PEERS["peers"]}, "a node with --peers needs --node-id"),
        ({**PEERS, "node_id": "n2"}, "--peers names this node's own id 'n2'"),
        ({**PEERS, "flush": "never"}, "a node with --peers needs --flush always"),
        ({**PEERS, "host": "10.0.0.1"}, "10.0.0.1 is not a loopback address"),
        (PEERS, "a node with --peers needs --cluster-secret-file"),
        ({"tls_cert_file": "/c.pem"}, "--tls-cert-file and --tls-key-file go together"),
        ({"tls_ca_file": "/ca.pem"}, "--tls-ca-file needs --tls-cert-file"),
        ({**TLS, "routing": "cbpf"}, "--routing cbpf steers UDP; the node serves none: TLS is on"),
        ({**TLS, "xdp": "generic"}, "--xdp generic classifies UDP; the node serves none: TLS"),
        ({"auth": "scram", "routing": "cbpf"}, "steers UDP; the node serves none: logins are on"),
        ({**PEERS, **TLS}, "with TLS, peers prove who they are by certificate: give --tls-ca"),
        ({**TLS, "join": ("a:1",)}, "with TLS, peers prove who they are by certificate"),
    ],
)
def test_each_rule_names_the_flag_and_what_is_allowed(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        NodeConfig(**{**BASE, **changes})
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "changes",
    [
        {**TLS, "xdp": "off"},
        {**PEERS, **TLS, "tls_ca_file": "/ca.pem", "host": "10.0.0.1", "auth": "scram"},
        {"port": 0},
        {"port": 65535, "membership_port": 65535},
        {"dead_grace_s": 0, "max_wait_ms": 0, "move_bytes_per_s": 0},
        {"dead_grace_s": 86_400, "weight": 1e9, "max_topics": MAX_TOPICS_CEILING},
        {"segment_bytes": 4096, "staging_bytes_max": 1 << 16, "open_files_max": 8},
        {"max_input_bytes": 2 << 20, "max_frame_bytes": 1 << 20, "metadata_voters": 1},
        {**PEERS, "insecure_peers": True},
    ],
)
def test_values_at_the_edges_are_allowed(changes: dict[str, Any]) -> None:
    NodeConfig(**{**BASE, **changes})


def test_a_bad_flag_value_exits_2_saying_why(capsys: pytest.CaptureFixture[str]) -> None:
    """The supervisor is replaced only so that a value let through fails the test
    at once instead of starting a node."""
    with mock.patch("laminar.node.supervisor.Supervisor") as supervisor:
        assert main(["--segment-bytes", "10"]) == 2
    supervisor.assert_not_called()
    assert capsys.readouterr().err == (
        "laminar-node: --segment-bytes must be at least 4096, got 10\n"
    )


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
        if kind == socket.SOCK_STREAM:
            if port == 0:
                port = next(picks)  # the kernel's choice, made to collide once
            if port == taken:
                return taken  # its TCP side is free in this story (another test may hold it)
        return real(family, kind, host, port, what)

    try:
        with mock.patch.object(listeners, "_probe", probe):
            chosen = listeners._node_port(socket.AF_INET, "127.0.0.1", 0)
            assert chosen not in (0, taken)
            with pytest.raises(StartupError, match=r"node UDP port .* in use"):
                listeners._node_port(socket.AF_INET, "127.0.0.1", taken)
    finally:
        held.close()
