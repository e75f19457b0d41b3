"""How the connector's clients reach a secured node: TLS and SCRAM logins,
from laminar's options or Spark's Kafka source's.

Options (read and write alike; the Kafka source's names in the second column):
  tls              "true": connect through TLS; kafka.security.protocol=SSL or SASL_SSL
  caFile           PEM CA file the node's certificate is checked against (default: the
                   system's CAs); kafka.ssl.truststore.location with
                   kafka.ssl.truststore.type=PEM
  certFile, keyFile, keyPassword
                   a client certificate and its key (PEM; the key's password if it is
                   encrypted) for a node that names clients by certificate;
                   kafka.ssl.keystore.location (one PEM file holding both,
                   kafka.ssl.keystore.type=PEM) and kafka.ssl.key.password
  checkHostname    "false" skips the check that the node's certificate names the host
                   dialled; kafka.ssl.endpoint.identification.algorithm="" (empty)
  user, password (or passwordFile)
                   log in with SCRAM; kafka.sasl.jaas.config's ScramLoginModule
                   username="..." password="..."
  saslMechanism    SCRAM-SHA-256 (default) or SCRAM-SHA-512; kafka.sasl.mechanism

Any other `kafka.ssl.*` or `kafka.sasl.*` option, a Kafka keystore that is not
PEM (JKS, PKCS12) and a SASL mechanism other than SCRAM are refused, naming
the option: ignoring one would connect with less protection than asked for.
Nothing here connects; `client_kwargs()` builds what `Client` takes, on the
driver and again on each executor (an `SSLContext` does not pickle, this
dataclass does).
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from typing import Any, Final

from laminar.security.scram import password_line
from laminar.security.tls import client_context
from laminar.spark.errors import LaminarSparkError

MECHANISMS: Final = ("SCRAM-SHA-256", "SCRAM-SHA-512")
PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT")
LAMINAR_OPTIONS: Final = frozenset(
    {
        "tls",
        "cafile",
        "certfile",
        "keyfile",
        "checkhostname",
        "user",
        "password",
        "passwordfile",
        "saslmechanism",
        "keypassword",
    }
)
"""laminar's own security options (lower-cased), beside the Kafka ones."""
_KAFKA_OPTIONS: Final = frozenset(
    {
        "kafka.security.protocol",
        "kafka.ssl.truststore.location",
        "kafka.ssl.truststore.type",
        "kafka.ssl.keystore.location",
        "kafka.ssl.keystore.type",
        "kafka.ssl.key.password",
        "kafka.ssl.endpoint.identification.algorithm",
        "kafka.sasl.mechanism",
        "kafka.sasl.jaas.config",
    }
)
_JAAS: Final = re.compile(
    r"\s*org\.apache\.kafka\.common\.security\.scram\.ScramLoginModule\s+required"
    r'(?P<pairs>(?:\s+\w+\s*=\s*"[^"]*")*)\s*;?\s*'
)
_JAAS_PAIR: Final = re.compile(r'(\w+)\s*=\s*"([^"]*)"')
PASSWORD_FILE_BYTES_MAX: Final = 4096


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """TLS and login settings of every client the connector opens."""

    tls: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = None
    check_hostname: bool = True
    user: str | None = None
    password: str | None = None
    mechanism: str = MECHANISMS[0]

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `Client` (a fresh `SSLContext` each call)."""
        kwargs: dict[str, Any] = {}
        if self.tls:
            context = client_context(True, self.ca_file)
            assert context is not None
            context.check_hostname = self.check_hostname
            if self.cert_file:
                try:
                    context.load_cert_chain(self.cert_file, self.key_file, self.key_password)
                except (OSError, ssl.SSLError) as exc:
                    raise LaminarSparkError(
                        f"the client certificate {self.cert_file} cannot be loaded: {exc}"
                    ) from None
            kwargs["tls"] = context
        if self.user is not None:
            kwargs.update(username=self.user, password=self.password, mechanism=self.mechanism)
        return kwargs

    def __repr__(self) -> str:  # never print the password (Spark logs plans)
        shown = "***" if self.password else None
        return (
            f"ClientSecurity(tls={self.tls}, ca_file={self.ca_file!r}, "
            f"cert_file={self.cert_file!r}, user={self.user!r}, password={shown}, "
            f"mechanism={self.mechanism!r})"
        )


PLAINTEXT: Final = ClientSecurity()


def take_security(opts: dict[str, str]) -> ClientSecurity:
    """The security settings in `opts` (lower-cased names), removing every
    option it reads; `LaminarSparkError` naming an option it cannot honour."""
    kafka = {name: opts.pop(name) for name in list(opts) if name in _KAFKA_OPTIONS}
    ours = {name: opts.pop(name) for name in list(opts) if name in LAMINAR_OPTIONS}
    for name in list(opts):
        if name.startswith(("kafka.ssl.", "kafka.sasl.")):
            raise LaminarSparkError(
                f"option {name} is not supported by laminar; remove it (supported: "
                f"{', '.join(sorted(_KAFKA_OPTIONS))})"
            )
    both = _kafka_form(kafka)
    for name, value in both.items():
        if name in ours:
            raise LaminarSparkError(f"give {name} or its kafka.* form, not both")
        ours[name] = value
    return _settings(ours)


def _kafka_form(kafka: dict[str, str]) -> dict[str, str]:
    """The Kafka source's security options as laminar's."""
    out: dict[str, str] = {}
    protocol = kafka.get("kafka.security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise LaminarSparkError(
            f"kafka.security.protocol={protocol}: use one of {', '.join(PROTOCOLS)}"
        )
    if protocol in ("SSL", "SASL_SSL"):
        out["tls"] = "true"
    for kind in ("truststore", "keystore"):
        if f"kafka.ssl.{kind}.location" in kafka:
            store_type = kafka.get(f"kafka.ssl.{kind}.type", "JKS").strip().upper()
            if store_type != "PEM":
                raise LaminarSparkError(
                    f"kafka.ssl.{kind}.type={store_type}: laminar reads PEM files only; set "
                    f"kafka.ssl.{kind}.type=PEM with a PEM file (openssl converts JKS and "
                    "PKCS12), or use the caFile/certFile/keyFile options"
                )
    if "kafka.ssl.truststore.location" in kafka:
        out["cafile"] = kafka["kafka.ssl.truststore.location"]
    if "kafka.ssl.keystore.location" in kafka:
        out["certfile"] = out["keyfile"] = kafka["kafka.ssl.keystore.location"]
    if "kafka.ssl.key.password" in kafka:
        out["keypassword"] = kafka["kafka.ssl.key.password"]
    algorithm = kafka.get("kafka.ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        if algorithm.strip().lower() not in ("", "https"):
            raise LaminarSparkError(
                f"kafka.ssl.endpoint.identification.algorithm={algorithm!r}: use https or empty"
            )
        out["checkhostname"] = "true" if algorithm.strip() else "false"
    if "kafka.sasl.mechanism" in kafka:
        out["saslmechanism"] = kafka["kafka.sasl.mechanism"]
    jaas = kafka.get("kafka.sasl.jaas.config")
    if jaas is not None:
        match = _JAAS.fullmatch(jaas)
        pairs = dict(_JAAS_PAIR.findall(match.group("pairs"))) if match else {}
        if "username" not in pairs or "password" not in pairs:
            raise LaminarSparkError(
                "kafka.sasl.jaas.config: laminar logs in with SCRAM only: "
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                'username="..." password="...";'
            )
        out["user"], out["password"] = pairs["username"], pairs["password"]
    sasl = protocol.startswith("SASL")
    if sasl != ("user" in out):
        raise LaminarSparkError(
            "kafka.security.protocol=SASL_* and kafka.sasl.jaas.config go together"
        )
    return out


def _settings(opts: dict[str, str]) -> ClientSecurity:
    tls = bool_option(opts, "tls", "tls", False)
    files = {key: opts[key] for key in ("cafile", "certfile", "keyfile") if key in opts}
    if files and not tls:
        raise LaminarSparkError(f"{', '.join(sorted(files))} need tls=true")
    if ("certfile" in opts) != ("keyfile" in opts):
        raise LaminarSparkError("certFile and keyFile go together")
    password = opts.get("password")
    if "passwordfile" in opts:
        if password is not None:
            raise LaminarSparkError("give password or passwordFile, not both")
        password = _read_password(opts["passwordfile"])
    user = opts.get("user")
    if (user is None) != (password is None):
        raise LaminarSparkError("user and password (or passwordFile) go together")
    mechanism = opts.get("saslmechanism", MECHANISMS[0]).strip().upper()
    if mechanism not in MECHANISMS:
        raise LaminarSparkError(
            f"SASL mechanism {mechanism}: laminar logs in with {' or '.join(MECHANISMS)}"
        )
    return ClientSecurity(
        tls=tls,
        ca_file=files.get("cafile"),
        cert_file=files.get("certfile"),
        key_file=files.get("keyfile"),
        key_password=opts.get("keypassword"),
        check_hostname=bool_option(opts, "checkhostname", "checkHostname", True),
        user=user,
        password=password,
        mechanism=mechanism,
    )


def bool_option(opts: dict[str, str], key: str, name: str, default: bool) -> bool:
    """Option `key` (shown as `name`) as a boolean: "true" or "false"."""
    text = opts.get(key)
    if text is None:
        return default
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise LaminarSparkError(f'{name}={text!r}: use "true" or "false"')
    return value == "true"


def _read_password(path: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(PASSWORD_FILE_BYTES_MAX + 1)
    except OSError as exc:
        raise LaminarSparkError(f"passwordFile {path} cannot be read: {exc}") from None
    if len(data) > PASSWORD_FILE_BYTES_MAX:
        raise LaminarSparkError(f"passwordFile {path} is over {PASSWORD_FILE_BYTES_MAX} B")
    password = password_line(data.decode("utf-8", "replace"))
    if password is None:
        raise LaminarSparkError(f"passwordFile {path} must hold the password on one line")
    return password
