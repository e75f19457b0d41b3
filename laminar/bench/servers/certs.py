"""Throwaway certificates for tests and benchmarks, made with the `openssl`
command (the `cryptography` package is not a dependency): a CA, and
certificates it signs for 127.0.0.1 and localhost.

    ca = make_ca(tmp, "ca")                    # Pem(cert, key)
    node = make_cert(tmp, ca, "node")          # SAN IP:127.0.0.1, DNS:localhost
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import NamedTuple

_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]


class Pem(NamedTuple):
    cert: str
    key: str


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(directory: Path, name: str) -> Pem:
    """A self-signed CA valid for two days."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    _openssl("req", "-x509", *_EC, "-keyout", str(key), "-out", str(cert), "-days", "2",
             "-subj", f"/CN={name}")  # fmt: skip
    return Pem(str(cert), str(key))


def make_cert(directory: Path, ca: Pem, name: str) -> Pem:
    """A certificate for 127.0.0.1 and localhost signed by `ca`, subject CN=`name`."""
    cert, key, csr = (directory / f"{name}.{ext}" for ext in ("crt", "key", "csr"))
    ext = directory / f"{name}.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("req", *_EC, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}")
    _openssl("x509", "-req", "-in", str(csr), "-CA", ca.cert, "-CAkey", ca.key,
             "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(ext))  # fmt: skip
    return Pem(str(cert), str(key))
