"""What a member advertises: its node address, then its membership port if separate."""

from __future__ import annotations

import pytest

from laminar.swim.agent import member_address, node_address, parse_address


def test_a_member_advertises_its_node_address_and_where_membership_datagrams_go() -> None:
    shared = member_address("10.0.0.1", 7070, 7070)  # eBPF steering: one port
    assert shared == "10.0.0.1:7070"
    assert node_address(shared) == parse_address(shared) == ("10.0.0.1", 7070)
    apart = member_address("10.0.0.1", 7070, 8070)
    assert apart == "10.0.0.1:7070/8070"
    assert node_address(apart) == ("10.0.0.1", 7070)  # Raft links and clients
    assert parse_address(apart) == ("10.0.0.1", 8070)  # membership datagrams
    assert node_address(member_address("::1", 7070, 8070)) == ("::1", 7070)
    for bad in ("10.0.0.1", "10.0.0.1:7070/", "10.0.0.1:7070/x", "10.0.0.1:0"):
        with pytest.raises(ValueError):
            parse_address(bad)
