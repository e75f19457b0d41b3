"""Certificates for test, benchmark and development clusters, made with the
`openssl` command (the `cryptography` package is not a dependency).

    ca = make_ca(tmp, "ca")                        # Pem(cert, key)
    node = make_cert(tmp, ca, "n1", node_id="n1")  # 127.0.0.1, localhost, laminar-node:n1
    admin = make_cert(tmp, ca, "admin", hosts=())  # a client certificate, CN=admin

`python -m laminar.certs DIR` (`make certs`) makes a development cluster's set
in DIR, owner-only (`make_cluster_certs`): a CA, a certificate per node for
node ids n1..n3 (each naming its node by the rule of
`laminar.security.principal.node_id_from_certificate`) and a client
certificate for the user `admin`, and that user's login: `admin.cred`
(`admin:PASSWORD`, for `--bootstrap-user-file`) and `admin.pw` (the password,
for `laminar --password-file`), a fresh random password. These are for
loopback clusters and tests: a real deployment's CA keeps its key elsewhere.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Final, NamedTuple

from laminar.security.principal import NODE_URI_SCHEME

_EC: Final = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
LOCAL_HOSTS: Final = ("127.0.0.1", "localhost")
CLUSTER_NODES: Final = ("n1", "n2", "n3")
"""The node ids of `make cluster` (`scripts/cluster`)."""
CLUSTER_USER: Final = "admin"


class Pem(NamedTuple):
    cert: str
    key: str


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(directory: Path, name: str, days: int = 2) -> Pem:
    """A self-signed CA, subject CN=`name`."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    _openssl("req", "-x509", *_EC, "-keyout", str(key), "-out", str(cert), "-days", str(days),
             "-subj", f"/CN={name}")  # fmt: skip
    return Pem(str(cert), str(key))


def _san(hosts: Sequence[str], node_id: str | None) -> str:
    names = []
    for host in hosts:
        try:
            names.append(f"IP:{ipaddress.ip_address(host)}")
        except ValueError:
            names.append(f"DNS:{host}")
    if node_id is not None:
        names.append(f"URI:{NODE_URI_SCHEME}:{node_id}")
    return ",".join(names)


def make_cert(
    directory: Path,
    ca: Pem,
    name: str,
    *,
    node_id: str | None = None,
    hosts: Sequence[str] = LOCAL_HOSTS,
    subject: str | None = None,
    days: int = 2,
) -> Pem:
    """A certificate signed by `ca` in DIR/`name`.crt/.key: subject `subject`
    (default CN=`name`), subjectAltNames for `hosts` and, given `node_id`,
    the URI that names that node."""
    cert, key, csr = (directory / f"{name}.{ext}" for ext in ("crt", "key", "csr"))
    _openssl("req", *_EC, "-keyout", str(key), "-out", str(csr), "-subj", subject or f"/CN={name}")
    sign = ["x509", "-req", "-in", str(csr), "-CA", ca.cert, "-CAkey", ca.key,
            "-CAcreateserial", "-out", str(cert), "-days", str(days)]  # fmt: skip
    san = _san(hosts, node_id)
    if san:
        ext = directory / f"{name}.ext"
        ext.write_text(f"subjectAltName={san}\n")
        sign += ["-extfile", str(ext)]
    _openssl(*sign)
    return Pem(str(cert), str(key))


def make_cluster_certs(
    directory: Path,
    node_ids: Sequence[str] = CLUSTER_NODES,
    users: Sequence[str] = (CLUSTER_USER,),
    days: int = 365,
) -> None:
    """DIR/ca.crt, DIR/<node id>.crt/.key per node, DIR/<user>.crt/.key per
    user, the first user's login (DIR/<user>.cred, DIR/<user>.pw); every file
    owner-only, the directory too."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    old = os.umask(0o077)
    try:
        ca = make_ca(directory, "ca", days)
        for node_id in node_ids:
            make_cert(directory, ca, node_id, node_id=node_id, days=days)
        for user in users:
            make_cert(directory, ca, user, hosts=(), days=days)
        password = secrets.token_urlsafe(18)
        (directory / f"{users[0]}.cred").write_text(f"{users[0]}:{password}\n")
        (directory / f"{users[0]}.pw").write_text(password + "\n")
    finally:
        os.umask(old)
    for leftover in (*directory.glob("*.csr"), *directory.glob("*.ext")):
        leftover.unlink()
    for path in directory.iterdir():
        path.chmod(0o600)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m laminar.certs",
        description="Make a development cluster's CA and certificates (make certs).",
    )
    parser.add_argument("directory", type=Path)
    nodes = ",".join(CLUSTER_NODES)
    parser.add_argument("--nodes", default=nodes, help="node ids, comma-separated")
    parser.add_argument("--users", default=CLUSTER_USER, help="client certificate user names")
    args = parser.parse_args(argv)
    make_cluster_certs(args.directory, args.nodes.split(","), args.users.split(","))
    print(
        f"certificates in {args.directory}/: ca.crt, per node and user NAME.crt and NAME.key; "
        f"the {CLUSTER_USER} login: {CLUSTER_USER}.cred, {CLUSTER_USER}.pw"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
