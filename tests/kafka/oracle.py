"""kafka-python 3's protocol module as the oracle of the generated codec: the
schema (read by the generator itself), hypothesis values for any struct at
any version, and conversion of our dataclasses to kafka-python's objects."""

from __future__ import annotations

import importlib.util
import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.consumer.metadata
import kafka.protocol.metadata
import kafka.protocol.producer
import kafka.protocol.sasl
from hypothesis import strategies as st
from kafka.protocol.schemas.fields.codecs import BitField

from laminar.kafka import codec
from laminar.kafka import messages as m

REPO = Path(__file__).resolve().parents[2]


def load_codegen() -> ModuleType:
    """scripts/kafka_codegen.py as a module (it is a script, not a package)."""
    path = REPO / "scripts" / "kafka_codegen.py"
    spec = importlib.util.spec_from_file_location("kafka_codegen", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["kafka_codegen"] = module
    spec.loader.exec_module(module)
    return module


codegen = load_codegen()
SCHEMAS: dict[str, Any] = {
    msg.name: msg for msg in map(codegen.load, sorted(codegen.SCHEMA_DIR.glob("*.json")))
}

_KP_MODULES = (
    kafka.protocol.admin,
    kafka.protocol.consumer,
    kafka.protocol.metadata,
    kafka.protocol.producer,
    kafka.protocol.sasl,
    kafka.protocol.consumer.metadata,
)


def kp_class(name: str) -> Any:
    """kafka-python's class of the message called `name`."""
    for module in _KP_MODULES:
        if hasattr(module, name):
            return getattr(module, name)
    raise LookupError(name)


def cases() -> list[tuple[str, int]]:
    """(message name, version) for every request and response version the
    codec decodes, and every version of the consumer protocol's data."""
    out = []
    for key, (lo, hi) in sorted(codec.DECODED.items()):
        for cls in (m.REQUESTS[key], m.RESPONSES[key]):
            out += [(cls.__name__, v) for v in range(lo, hi + 1)]
    for cls in (m.ConsumerProtocolSubscription, m.ConsumerProtocolAssignment):
        lo, hi = cls.VALID_VERSIONS
        out += [(cls.__name__, v) for v in range(lo, hi + 1)]
    return out


_INTS = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "uint16": st.integers(0, 2**16 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
}
_SCALARS: dict[str, st.SearchStrategy[Any]] = {
    **_INTS,
    "float64": st.floats(allow_nan=False),
    "bool": st.booleans(),
    "uuid": st.binary(min_size=16, max_size=16),
    "string": st.text(max_size=6),
    "bytes": st.binary(max_size=6),
    "records": st.binary(max_size=12),
}


def values(struct: Any, cls: type[Any], version: int) -> st.SearchStrategy[Any]:
    """Instances of `cls` (schema `struct`) with every field present at
    `version` drawn, the others left at their defaults."""
    kwargs = {}
    for f in struct.fields:
        if not codegen.in_range(version, f.versions):
            continue
        if f.struct is not None:
            one = values(f.struct, getattr(_owner(cls, f.struct), f.struct.name), version)
        else:
            one = _SCALARS[f.kind]
        strategy = st.lists(one, max_size=2) if f.is_array else one
        if codegen.in_range(version, f.nullable):
            strategy = st.none() | strategy
        kwargs[f.attr] = strategy
    return st.builds(cls, **kwargs)


def _owner(cls: type[Any], struct: Any) -> type[Any]:
    """The class the nested struct is defined in: its message for common structs."""
    if hasattr(cls, struct.name):
        return cls
    return getattr(m, struct.path.split(".")[0])  # type: ignore[no-any-return]


def to_kp(obj: Any, struct: Any, kp_cls: Any, version: int | None = None) -> Any:
    """Our dataclass `obj` as kafka-python's object of class `kp_cls`."""
    kwargs = {}
    # kafka-python renames a few fields (authorized_operations): match by position.
    for f, kp_name in zip(struct.fields, kp_cls.fields, strict=True):
        value = getattr(obj, f.attr)
        convert: Any = None
        if f.struct is not None:
            sub_cls = getattr(kp_cls, f.struct.name)
            sub = f.struct

            def convert(v: Any, sub: Any = sub, sub_cls: Any = sub_cls) -> Any:
                return to_kp(v, sub, sub_cls)
        elif f.kind == "uuid":

            def convert(v: Any) -> Any:
                return uuid.UUID(bytes=v)
        elif f.kind == "records":

            def convert(v: Any) -> Any:
                return bytes(v)
        elif getattr(kp_cls.fields[kp_name], "_type", None) is BitField:

            def convert(v: Any) -> Any:  # kafka-python's set of bit positions
                return {bit for bit in range(32) if (v >> bit) & 1}

        if value is not None and convert is not None:
            value = [convert(v) for v in value] if f.is_array else convert(value)
        kwargs[kp_name] = value
    if version is None:
        return kp_cls(**kwargs)
    return kp_cls(version=version, **kwargs)
