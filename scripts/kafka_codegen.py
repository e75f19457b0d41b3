"""Generate `laminar/kafka/messages.py` from Kafka's JSON message definitions.

    .venv/bin/python scripts/kafka_codegen.py [OUTPUT]

Reads `laminar/kafka/schema/*.json` (Kafka's own format: JSON with `//`
comments) and writes one slotted dataclass per message and per nested struct,
plus straight-line decode and encode functions per (struct, version): fixed
fields are read and written in one precompiled `struct.Struct` per run of
consecutive fixed-width fields, nothing walks the schema at run time. Versions
whose wire layout is identical share one function. The output is formatted
with ruff, so regenerating gives byte-identical text (tests/kafka checks it).
"""

from __future__ import annotations

import json
import keyword
import re
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCHEMA_DIR = REPO / "laminar" / "kafka" / "schema"
OUTPUT = REPO / "laminar" / "kafka" / "messages.py"
RUFF = Path(sys.executable).with_name("ruff")

INF = 1 << 15  # "N+" in a version range: no upper bound
Range = tuple[int, int] | None

FIXED = {  # Kafka type -> struct format character(s)
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "int64": "q",
    "float64": "d",
    "bool": "?",
    "uuid": "16s",
}
PYTYPE = {
    "int8": "int",
    "int16": "int",
    "uint16": "int",
    "int32": "int",
    "int64": "int",
    "float64": "float",
    "bool": "bool",
    "uuid": "bytes",
    "string": "str",
    "bytes": "bytes",
    "records": "bytes | memoryview",
}


def parse_versions(text: str | None) -> Range:
    """Kafka's version range syntax: "3+", "0-12", "5", "none"."""
    if text is None or text == "none":
        return None
    if text.endswith("+"):
        return int(text[:-1]), INF
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


def in_range(version: int, rng: Range) -> bool:
    return rng is not None and rng[0] <= version <= rng[1]


def snake(name: str) -> str:
    """`partitionIndex` -> `partition_index` (kafka-python's rule, so the
    oracle's attribute names match)."""
    out = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    return out + "_" if keyword.iskeyword(out) else out


@dataclass
class Field:
    name: str
    attr: str
    kind: str  # a primitive type name, or "struct"
    is_array: bool
    struct: Struct | None
    versions: Range
    nullable: Range
    tagged: Range
    tag: int | None
    default: str | None
    compact_versions: Range  # the field's own flexibleVersions ("none": never compact)
    own_flexible: bool  # whether the field has its own flexibleVersions

    def nullable_ever(self) -> bool:
        return self.nullable is not None or self.default == "null"


@dataclass
class Struct:
    name: str
    path: str  # qualified Python name, e.g. ProduceRequest.TopicProduceData
    flat: str  # function-name part, e.g. ProduceRequest_TopicProduceData
    fields: list[Field] = field(default_factory=list)
    children: list[Struct] = field(default_factory=list)


@dataclass
class Message:
    name: str
    kind: str  # request, response, header, data
    api_key: int | None
    valid: tuple[int, int]
    flexible: Range
    root: Struct


def load(path: Path) -> Message:
    """One JSON definition, with its `//` comments stripped."""
    text = re.sub(r"^\s*//.*$", "", path.read_text(), flags=re.M)
    raw = json.loads(text)
    name = raw["name"]
    root = Struct(name, name, name)
    structs: dict[str, Struct] = {}
    for cs in raw.get("commonStructs", []):
        child = Struct(cs["name"], f"{name}.{cs['name']}", f"{name}_{cs['name']}")
        root.children.append(child)
        structs[cs["name"]] = child
    for cs in raw.get("commonStructs", []):
        fill(structs[cs["name"]], cs["fields"], structs)
    fill(root, raw["fields"], structs)
    valid = parse_versions(raw["validVersions"])
    assert valid is not None
    return Message(
        name, raw["type"], raw.get("apiKey"), valid, parse_versions(raw["flexibleVersions"]), root
    )


def fill(
    owner: Struct,
    raw_fields: list[dict[str, object]],
    structs: dict[str, Struct],
) -> None:
    for raw in raw_fields:
        typ = str(raw["type"])
        is_array = typ.startswith("[]")
        base = typ[2:] if is_array else typ
        sub: Struct | None = None
        if base not in PYTYPE:
            if "fields" in raw:
                sub = Struct(base, f"{owner.path}.{base}", f"{owner.flat}_{base}")
                owner.children.append(sub)
                structs[base] = sub
                fill(sub, raw["fields"], structs)  # type: ignore[arg-type]
            else:
                sub = structs[base]
        f = Field(
            name=str(raw["name"]),
            attr=snake(str(raw["name"])),
            kind="struct" if sub else base,
            is_array=is_array,
            struct=sub,
            versions=parse_versions(str(raw["versions"])),
            nullable=parse_versions(raw.get("nullableVersions")),  # type: ignore[arg-type]
            tagged=parse_versions(raw.get("taggedVersions")),  # type: ignore[arg-type]
            tag=raw.get("tag"),  # type: ignore[arg-type]
            default=None if "default" not in raw else str(raw["default"]),
            compact_versions=parse_versions(str(raw.get("flexibleVersions", "none"))),
            own_flexible="flexibleVersions" in raw,
        )
        if sub is not None and not is_array and f.nullable is not None:
            raise SystemExit(f"{owner.path}.{f.name}: nullable struct fields are not generated")
        owner.fields.append(f)


# ---------------------------------------------------------------- classes


def annotation(f: Field) -> str:
    base = f.struct.path if f.struct else PYTYPE[f.kind]
    typ = f"list[{base}]" if f.is_array else base
    return f"{typ} | None" if f.nullable_ever() or f.kind == "records" else typ


def default_expr(f: Field) -> str:
    """The field's JSON default as a Python expression (a fresh object each time)."""
    if f.default == "null" or (f.kind == "records" and not f.is_array):
        return "None"
    if f.is_array:
        return "[]"
    if f.struct:
        return f"{f.struct.path}()"
    if f.kind == "bool":
        return str((f.default or "false").lower() == "true")
    if f.kind == "float64":
        return repr(float(f.default or 0))
    if f.kind in FIXED and f.kind != "uuid":
        return str(int(f.default or "0", 0))
    if f.kind == "uuid":
        return "_ZERO_UUID"
    if f.kind == "string":
        return repr(f.default or "")
    return 'b""'


def dataclass_default(f: Field) -> str:
    expr = default_expr(f)
    if expr == "[]":
        return "field(default_factory=list)"
    if f.struct and not f.is_array and expr != "None":
        return f"field(default_factory=lambda: {expr})"
    return expr


def emit_class(s: Struct, msg: Message | None, lines: list[str], indent: str) -> None:
    lines.append(f"{indent}@dataclass(slots=True, kw_only=True)")
    lines.append(f"{indent}class {s.name}:")
    inner = indent + "    "
    if msg is not None:
        lo, hi = msg.valid
        lines.append(f'{inner}"""Kafka\'s {msg.name} ({msg.kind}), versions {lo}-{hi}."""')
        lines.append("")
        if msg.api_key is not None:
            lines.append(f"{inner}API_KEY: ClassVar[int] = {msg.api_key}")
        lines.append(f"{inner}VALID_VERSIONS: ClassVar[tuple[int, int]] = {msg.valid}")
        flex = msg.flexible
        if flex is not None and flex[1] == INF:
            flex = (flex[0], msg.valid[1])
        lines.append(f"{inner}FLEXIBLE_VERSIONS: ClassVar[tuple[int, int] | None] = {flex}")
    else:
        lines.append(f'{inner}"""The {s.name} struct of {s.path.split(".")[0]}."""')
    lines.append("")
    for child in s.children:
        emit_class(child, None, lines, inner)
        lines.append("")
    for f in s.fields:
        lines.append(f"{inner}{f.attr}: {annotation(f)} = {dataclass_default(f)}")


# ---------------------------------------------------------------- codecs


class Body:
    """The lines of one function under construction, with fresh local names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.counter = 0
        self.formats: set[str] = set()

    def add(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"


STRUCTS_USED: dict[str, str] = {}  # struct format -> module-level name


def struct_name(fmt: str) -> str:
    name = "_S_" + fmt.replace("16s", "U").replace("?", "o")
    STRUCTS_USED[fmt] = name
    return name


def compact(f: Field, version: int, flexible: bool) -> bool:
    if f.own_flexible:
        return in_range(version, f.compact_versions)
    return flexible


def where(owner: Struct, f: Field) -> str:
    """A field's name in error messages (`decode` adds the message and version)."""
    return f"{owner.name}.{f.attr}"


def dec_length(b: Body, ind: int, var: str, is_compact: bool, wide: bool) -> None:
    """Decode a length or count into `var` (-1 for null)."""
    if is_compact:
        b.add(ind, f"{var} = buf[pos]")
        b.add(ind, f"if {var} & 0x80:")
        b.add(ind + 1, f"{var}, pos = _read_uvarint(buf, pos)")
        b.add(ind, "else:")
        b.add(ind + 1, "pos += 1")
        b.add(ind, f"{var} -= 1")
    else:
        fmt = "i" if wide else "h"
        b.add(ind, f"{var} = {struct_name(fmt)}.unpack_from(buf, pos)[0]")
        b.add(ind, f"pos += {4 if wide else 2}")


def dec_null_check(b: Body, ind: int, n: str, var: str, nullable: bool, ctx: str) -> None:
    b.add(ind, f"if {n} < 0:")
    if nullable:
        b.add(ind + 1, f"{var} = None")
    else:
        b.add(ind + 1, f'raise WireError("{ctx}: negative length")')
    b.add(ind, "else:")


def dec_value(
    b: Body,
    ind: int,
    f: Field,
    version: int,
    flexible: bool,
    var: str,
    ctx: str,
    nullable: bool,
    fn: dict[tuple[str, int], str],
) -> None:
    """Decode one non-fixed value (string, bytes, records, struct) into `var`."""
    if f.struct is not None:
        b.add(ind, f"{var}, pos = {fn[f.struct.path, version]}(buf, pos)")
        return
    n = b.fresh("n")
    dec_length(b, ind, n, compact(f, version, flexible), f.kind != "string")
    if nullable:
        dec_null_check(b, ind, n, var, True, ctx)
    else:
        b.add(ind, f"if {n} < 0:")
        b.add(ind + 1, f'raise WireError("{ctx}: negative length")')
    inner = ind + 1 if nullable else ind
    end = b.fresh("end")
    b.add(inner, f"{end} = pos + {n}")
    b.add(inner, f"if {end} > blen:")
    b.add(inner + 1, f'raise WireError("{ctx}: past the end")')
    if f.kind == "string":
        b.add(inner, f'{var} = str(buf[pos:{end}], "utf-8")')
    elif f.kind == "bytes":
        b.add(inner, f"{var} = bytes(buf[pos:{end}])")
    else:
        b.add(inner, f"{var} = buf[pos:{end}]")
    b.add(inner, f"pos = {end}")


def elem_type(f: Field) -> str:
    return f.struct.path if f.struct else PYTYPE[f.kind]


def dec_field(
    b: Body,
    ind: int,
    owner: Struct,
    f: Field,
    version: int,
    flexible: bool,
    var: str,
    fn: dict[tuple[str, int], str],
) -> None:
    ctx = where(owner, f)
    nullable = in_range(version, f.nullable)
    b.add(ind, f"{var}: {annotation(f)}")
    if not f.is_array:
        if f.kind in FIXED:
            fmt = FIXED[f.kind]
            b.add(ind, f"{var} = {struct_name(fmt)}.unpack_from(buf, pos)[0]")
            b.add(ind, f"pos += {struct.calcsize('>' + fmt)}")
        else:
            dec_value(b, ind, f, version, flexible, var, ctx, nullable, fn)
        return
    n = b.fresh("n")
    dec_length(b, ind, n, flexible, True)
    dec_null_check(b, ind, n, var, nullable, ctx)
    inner = ind + 1
    size = struct.calcsize(">" + FIXED[f.kind]) if f.kind in FIXED else 1
    bound = f"{n} * {size}" if size > 1 else n
    b.add(inner, f"if {bound} > blen - pos:")
    b.add(inner + 1, f'raise WireError("{ctx}: count past the end")')
    if f.kind in FIXED and f.kind != "uuid":
        b.add(inner, f'{var} = list(_unpack_from(f">{{{n}}}{FIXED[f.kind]}", buf, pos))')
        b.add(inner, f"pos += {bound}")
        return
    b.add(inner, f"{var} = []")
    b.add(inner, f"for _ in range({n}):")
    item = b.fresh("item")
    if f.kind == "uuid":
        b.add(inner + 1, f"{item} = bytes(buf[pos : pos + 16])")
        b.add(inner + 1, "pos += 16")
    else:
        b.add(inner + 1, f"{item}: {elem_type(f)}")
        dec_value(b, inner + 1, f, version, flexible, item, ctx, False, fn)
    b.add(inner + 1, f"{var}.append({item})")


def fields_at(s: Struct, version: int) -> tuple[list[Field], list[Field]]:
    """The regular and the tagged fields of `s` at `version` (tagged by tag)."""
    present = [f for f in s.fields if in_range(version, f.versions)]
    tagged = sorted((f for f in present if in_range(version, f.tagged)), key=lambda f: f.tag or 0)
    return [f for f in present if not in_range(version, f.tagged)], tagged


def fixed_runs(regular: list[Field]) -> list[tuple[str | None, list[Field]]]:
    """Split the regular fields into runs: consecutive fixed-width scalars
    share one run and its struct format (one struct call), every other field
    is a run of one with no format."""
    runs: list[tuple[str | None, list[Field]]] = []
    for f in regular:
        fmt = FIXED[f.kind] if f.kind in FIXED and not f.is_array else None
        if fmt is not None and runs and runs[-1][0] is not None:
            runs[-1] = (runs[-1][0] + fmt, [*runs[-1][1], f])
        else:
            runs.append((fmt, [f]))
    return runs


def gen_decoder(
    s: Struct, version: int, flexible: bool, fn: dict[tuple[str, int], str]
) -> list[str]:
    b = Body()
    regular, tagged = fields_at(s, version)
    for fmt, run in fixed_runs(regular):
        if fmt is not None:
            names = ", ".join(f"f_{x.attr}" for x in run)
            call = f"{struct_name(fmt)}.unpack_from(buf, pos)"
            b.add(1, f"{names} = {call}" if len(run) > 1 else f"{names} = {call}[0]")
            b.add(1, f"pos += {struct.calcsize('>' + fmt)}")
        else:
            dec_field(b, 1, s, run[0], version, flexible, f"f_{run[0].attr}", fn)
    if flexible:
        gen_tag_decoder(b, s, tagged, version, fn)
    args = ", ".join(f"{f.attr}=f_{f.attr}" for f in regular + tagged)
    b.add(1, f"return {s.path}({args}), pos")
    head = []
    if any("blen" in line for line in b.lines):
        head.append("    blen = len(buf)")
    return head + b.lines


def gen_tag_decoder(
    b: Body, s: Struct, tagged: list[Field], version: int, fn: dict[tuple[str, int], str]
) -> None:
    if not tagged:
        b.add(1, "if buf[pos]:")
        b.add(2, "pos = _skip_tagged_fields(buf, pos)")
        b.add(1, "else:")
        b.add(2, "pos += 1")
        return
    for f in tagged:
        b.add(1, f"f_{f.attr}: {annotation(f)} = {default_expr(f)}")
    b.add(1, "tags, pos = _read_uvarint(buf, pos)")
    b.add(1, "for _ in range(tags):")
    b.add(2, "tag, pos = _read_uvarint(buf, pos)")
    b.add(2, "size, pos = _read_uvarint(buf, pos)")
    b.add(2, "tag_end = pos + size")
    b.add(2, "if tag_end > blen:")
    b.add(3, f'raise WireError("{s.name}: tagged field past the end")')
    for i, f in enumerate(tagged):
        b.add(2, f"{'if' if i == 0 else 'elif'} tag == {f.tag}:")
        sub = Body()
        sub.counter = b.counter
        dec_field(sub, 3, s, f, version, True, f"f_{f.attr}", fn)
        b.counter = sub.counter
        b.lines.extend(line for line in sub.lines if not line.strip().startswith(f"f_{f.attr}: "))
        b.add(3, "if pos != tag_end:")
        b.add(4, f'raise WireError("{where(s, f)}: tagged size mismatch")')
    b.add(2, "pos = tag_end")


NULL_LENGTH = {False: b"\xff\xff", True: b"\xff\xff\xff\xff"}


def enc_length(b: Body, ind: int, out: str, expr: str, is_compact: bool, wide: bool) -> None:
    """Encode a length or count (`expr`, -1 for null)."""
    if expr == "-1":
        b.add(ind, f"{out}.append(0)" if is_compact else f"{out} += {NULL_LENGTH[wide]!r}")
    elif is_compact:
        n = b.fresh("n")
        b.add(ind, f"{n} = {expr} + 1")
        b.add(ind, f"if {n} < 0x80:")
        b.add(ind + 1, f"{out}.append({n})")
        b.add(ind, "else:")
        b.add(ind + 1, f"_write_uvarint({out}, {n})")
    else:
        b.add(ind, f"{out} += {struct_name('i' if wide else 'h')}.pack({expr})")


def enc_value(
    b: Body,
    ind: int,
    out: str,
    f: Field,
    version: int,
    flexible: bool,
    expr: str,
    fn: dict[tuple[str, int], str],
) -> None:
    """Encode one non-null, non-array value."""
    if f.struct is not None:
        b.add(ind, f"{fn[f.struct.path, version]}({out}, {expr})")
    elif f.kind in FIXED:
        b.add(ind, f"{out} += {struct_name(FIXED[f.kind])}.pack({expr})")
    else:
        raw = expr
        if f.kind == "string":
            raw = b.fresh("raw")
            b.add(ind, f"{raw} = {expr}.encode()")
        enc_length(b, ind, out, f"len({raw})", compact(f, version, flexible), f.kind != "string")
        b.add(ind, f"{out} += {raw}")


def enc_field(
    b: Body,
    ind: int,
    out: str,
    owner: Struct,
    f: Field,
    version: int,
    flexible: bool,
    fn: dict[tuple[str, int], str],
) -> None:
    value = b.fresh("v")
    b.add(ind, f"{value} = o.{f.attr}")
    ctx = where(owner, f)
    if f.nullable_ever() or f.kind == "records":
        b.add(ind, f"if {value} is None:")
        if in_range(version, f.nullable):
            wide = f.is_array or f.kind != "string"
            enc_length(
                b,
                ind + 1,
                out,
                "-1",
                compact(f, version, flexible) if not f.is_array else flexible,
                wide,
            )
        else:
            b.add(ind + 1, f'raise ValueError("{ctx} is not nullable")')
        b.add(ind, "else:")
        ind += 1
    if not f.is_array:
        enc_value(b, ind, out, f, version, flexible, value, fn)
        return
    enc_length(b, ind, out, f"len({value})", flexible, True)
    if f.kind in FIXED and f.kind != "uuid":
        b.add(ind, f'{out} += _pack(f">{{len({value})}}{FIXED[f.kind]}", *{value})')
        return
    item = b.fresh("item")
    b.add(ind, f"for {item} in {value}:")
    enc_value(b, ind + 1, out, f, version, flexible, item, fn)


def default_test(f: Field, value: str) -> str:
    """An expression true when a tagged field differs from its default."""
    expr = default_expr(f)
    if expr == "None":
        return f"{value} is not None"
    if expr in ("[]", "False"):
        return value
    if expr == "True":
        return f"not {value}"
    return f"{value} != {expr}"


def gen_encoder(
    s: Struct, version: int, flexible: bool, fn: dict[tuple[str, int], str]
) -> list[str]:
    b = Body()
    regular, tagged = fields_at(s, version)
    for fmt, run in fixed_runs(regular):
        if fmt is not None:
            args = ", ".join(f"o.{x.attr}" for x in run)
            b.add(1, f"out += {struct_name(fmt)}.pack({args})")
        else:
            enc_field(b, 1, "out", s, run[0], version, flexible, fn)
    if flexible and not tagged:
        b.add(1, "out.append(0)")
    elif flexible:
        b.add(1, "tags: list[tuple[int, bytearray]] = []")
        for f in tagged:
            b.add(1, f"if {default_test(f, 'o.' + f.attr)}:")
            b.add(2, "tagged = bytearray()")
            enc_field(b, 2, "tagged", s, f, version, True, fn)
            b.add(2, f"tags.append(({f.tag}, tagged))")
        b.add(1, "_write_uvarint(out, len(tags))")
        b.add(1, "for tag, tagged in tags:")
        b.add(2, "_write_uvarint(out, tag)")
        b.add(2, "_write_uvarint(out, len(tagged))")
        b.add(2, "out += tagged")
    if not b.lines:
        b.add(1, "pass  # no field at this version")
    return b.lines


def generate_codecs(
    msg: Message, functions: list[str], decoders: list[str], encoders: list[str]
) -> None:
    """Append the functions of `msg` and its table entries."""
    dec_fn: dict[tuple[str, int], str] = {}
    enc_fn: dict[tuple[str, int], str] = {}
    seen: dict[tuple[str, str], str] = {}

    def walk(s: Struct, version: int, flexible: bool) -> None:
        if (s.path, version) in dec_fn:
            return
        for f in s.fields:
            if f.struct is not None:
                walk(f.struct, version, flexible)
        for kind, table, gen, sig in (
            ("d", dec_fn, gen_decoder, f"(buf: memoryview, pos: int) -> tuple[{s.path}, int]"),
            ("e", enc_fn, gen_encoder, f"(out: bytearray, o: {s.path}) -> None"),
        ):
            body = "\n".join(gen(s, version, flexible, dec_fn if kind == "d" else enc_fn))
            key = (s.path + kind, body)
            if key not in seen:
                name = f"_{kind}_{s.flat}_v{version}"
                seen[key] = name
                functions.append(f"def {name}{sig}:\n{body}\n")
            table[s.path, version] = seen[key]

    for version in range(msg.valid[0], msg.valid[1] + 1):
        walk(msg.root, version, in_range(version, msg.flexible))
        decoders.append(f"    ({msg.name}, {version}): {dec_fn[msg.name, version]},")
        encoders.append(f"    ({msg.name}, {version}): {enc_fn[msg.name, version]},")


HEADER = '''\
# ruff: noqa: E501
# (E501 off: qualified names of nested structs, such as
# OffsetFetchResponse.OffsetFetchResponseGroup.OffsetFetchResponseTopics, cannot wrap at 100.)
# Generated by scripts/kafka_codegen.py from laminar/kafka/schema/*.json: do not edit.
# Regenerate with `.venv/bin/python scripts/kafka_codegen.py` (tests/kafka checks it is current).
"""Kafka's messages as slotted dataclasses, with straight-line decoders and
encoders per (struct, version). Names are the JSON names in snake_case; nested
structs are classes nested in their message (`ProduceRequest.TopicProduceData`);
every field has its JSON default. Use `decode` and `encode`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from struct import Struct
from struct import error as _StructError
from struct import pack as _pack
from struct import unpack_from as _unpack_from
from typing import Any, ClassVar, TypeVar, cast

from laminar.kafka.primitives import WireError
from laminar.kafka.primitives import read_uvarint as _read_uvarint
from laminar.kafka.primitives import skip_tagged_fields as _skip_tagged_fields
from laminar.kafka.primitives import write_uvarint as _write_uvarint

_ZERO_UUID = bytes(16)
_T = TypeVar("_T")
'''

FOOTER = '''

def decode(cls: type[_T], version: int, buf: memoryview, pos: int = 0) -> tuple[_T, int]:
    """Decode one `cls` at `version` from `buf[pos:]`: the message and the
    position after it. Raises WireError, and nothing else, on malformed bytes."""
    try:
        message, end = _DECODERS[cls, version](buf, pos)
    except (IndexError, _StructError, UnicodeDecodeError) as exc:
        raise WireError(f"{cls.__name__} v{version}: {exc}") from exc
    return cast(_T, message), end


def encode(message: object, version: int, out: bytearray) -> None:
    """Append `message` encoded at `version` to `out` (ValueError or
    struct.error on a value the version cannot carry)."""
    _ENCODERS[type(message), version](out, message)

'''


def generate() -> str:
    messages = [load(p) for p in sorted(SCHEMA_DIR.glob("*.json"))]
    classes: list[str] = []
    for msg in messages:
        emit_class(msg.root, msg, classes, "")
        classes.append("\n")
    functions: list[str] = []
    decoders: list[str] = []
    encoders: list[str] = []
    STRUCTS_USED.clear()
    for msg in messages:
        generate_codecs(msg, functions, decoders, encoders)
    structs = [
        f'{name} = Struct(">{fmt}")'
        for fmt, name in sorted(STRUCTS_USED.items(), key=lambda x: x[1])
    ]
    api = [m for m in messages if m.api_key is not None and m.kind == "request"]
    tables = [
        "API_KEYS: dict[str, int] = {",
        *(f'    "{m.name.removesuffix("Request")}": {m.api_key},' for m in api),
        "}",
        '"""Kafka\'s api key per API name (the JSON name without Request)."""',
        "",
        "REQUESTS: dict[int, type[Any]] = {",
        *(f"    {m.api_key}: {m.name}," for m in api),
        "}",
        "RESPONSES: dict[int, type[Any]] = {",
        *(
            f"    {m.api_key}: {m.name},"
            for m in messages
            if m.api_key is not None and m.kind == "response"
        ),
        "}",
        "",
        "_DECODERS: dict[tuple[type[Any], int], Callable[[memoryview, int], tuple[Any, int]]] = {",
        *decoders,
        "}",
        "_ENCODERS: dict[tuple[type[Any], int], Callable[[bytearray, Any], None]] = {",
        *encoders,
        "}",
    ]
    return "\n".join([HEADER, *structs, "", *classes, *functions, *tables, FOOTER])


def main() -> None:
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else OUTPUT
    target.write_text(generate())
    for step in (["format"], ["check", "--fix"], ["format"]):
        config = ["--config", str(REPO / "pyproject.toml")]  # also for a target outside the repo
        subprocess.run([str(RUFF), *step, *config, "--quiet", str(target)], check=True, cwd=REPO)


if __name__ == "__main__":
    main()
