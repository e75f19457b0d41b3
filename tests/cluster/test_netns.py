"""The test network itself: hosts reach each other, and each fault cuts what it says."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.cluster.netns import TestNetwork, netns_reason

pytestmark = pytest.mark.skipif(netns_reason() is not None, reason=str(netns_reason()))

# A UDP echo on port 9 of the host it runs on; prints "ready" once bound.
ECHO = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 9))
print("ready", flush=True)
while True:
    data, peer = s.recvfrom(100)
    try:  # a local nft drop on output fails the send with EPERM
        s.sendto(data, peer)
    except OSError:
        pass
"""

# Sends 50 datagrams from `src` to `dst`; prints how many answers came back.
PROBE = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(0.05)
got = 0
for i in range(50):
    try:  # an unreachable host raises (EHOSTUNREACH) instead of timing out
        s.sendto(b"%d" % i, (sys.argv[1], 9))
        s.recvfrom(100)
        got += 1
    except OSError:
        pass
print(got)
"""


def _answers(net: TestNetwork, src: int | None, dst: int) -> int:
    prefix = net.exec_prefix(src) if src is not None else []
    out = subprocess.run(
        [*prefix, sys.executable, "-c", PROBE, net.address(dst)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return int(out.stdout)


def test_faults_cut_exactly_what_they_name() -> None:
    with TestNetwork(3) as net:
        echoes = [
            subprocess.Popen(
                [*net.exec_prefix(i), sys.executable, "-c", ECHO, net.address(i)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(3)
        ]
        try:
            for echo in echoes:
                assert echo.stdout is not None and echo.stdout.readline().strip() == "ready"
            assert _answers(net, 0, 1) == 50
            assert _answers(net, None, 2) == 50  # the test process is on the bridge too

            net.isolate(0)
            assert _answers(net, 0, 1) == 0
            assert _answers(net, None, 0) == 0
            assert _answers(net, 1, 2) == 50
            net.heal()
            assert _answers(net, 0, 1) == 50

            net.drop(0, 1)  # one way: 0's datagrams to 1 vanish, 1 -> 0 is fine ...
            assert _answers(net, 0, 1) == 0
            assert _answers(net, 2, 1) == 50
            # ... but 1's echo of a datagram from 0 never gets the request.
            net.heal()

            net.split(1)
            assert _answers(net, 1, 0) == 0
            assert _answers(net, 2, 1) == 0
            assert _answers(net, None, 1) == 50
            assert _answers(net, 0, 2) == 50
            net.heal()

            net.loss(2, 50)
            lossy = _answers(net, 0, 2)
            assert 0 < lossy < 50  # ~25 of 50 (loss both ways); 0 or 50 is ~1e-6 likely
            net.heal()
            assert _answers(net, 0, 2) == 50
        finally:
            for echo in echoes:
                echo.kill()
                echo.wait()
    with pytest.raises(socket.gaierror):  # the names are gone with the namespaces
        socket.getaddrinfo(net.namespace(0), None)
