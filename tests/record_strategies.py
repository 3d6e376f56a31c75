"""Hypothesis strategies that generate any KRaft record from its declaration, and the canonical
JSON form a reader must return for it (computed here, independently of controller_core.schema)."""
from __future__ import annotations

import base64

import pytest
from hypothesis import strategies as st

from controller_core.records import CONTROL_RECORDS, METADATA_RECORDS

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1),
}
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"


def kafka_default(f, version):
    """A field's default as Kafka's generated code defines it, in JSON form (independent of schema.py)."""
    d = f.default
    if d == "null":
        return None
    if f.type.startswith("[]"):
        return []
    if f.type == "bool":
        return d == "true"
    if f.type in INT_RANGES:
        return int(d, 16) if d and d.lower().startswith("0x") else int(d) if d else 0
    if f.type == "float64":
        return float(d) if d else 0.0
    if f.type == "string":
        return d or ""
    if f.type == "bytes":
        return ""
    if f.type == "uuid":
        return ZERO_UUID
    return canonical(f.fields, version, {})


def primitive_strategy(t: str):
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        return st.integers(lo, hi)
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "string":
        return st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
    if t == "bytes":
        return st.binary(max_size=12).map(lambda b: base64.b64encode(b).decode("ascii"))
    if t == "uuid":
        return st.binary(min_size=16, max_size=16).map(
            lambda b: base64.urlsafe_b64encode(b).decode("ascii").rstrip("="))
    raise AssertionError(f"unknown primitive {t}")


def value_strategy(f, version: int):
    elem = f.type[2:] if f.type.startswith("[]") else f.type
    if f.fields:  # a struct or an array of structs
        single = struct_strategy(f.fields, version)
    else:
        single = primitive_strategy(elem)
    s = st.lists(single, max_size=4) if f.type.startswith("[]") else single
    if version in f.nullable:
        s = st.none() | s
    return s


def struct_strategy(fields, version: int):
    """A dict for one struct at ``version``; a tagged field is left out, set to its default, or set."""
    required, optional = {}, {}
    for f in fields:
        if version not in f.versions:
            continue
        s = value_strategy(f, version)
        if version in f.tagged:
            optional[f.json_name] = st.just(kafka_default(f, version)) | s
        else:
            required[f.json_name] = s
    return st.fixed_dictionaries(required, optional=optional)


def canonical(fields, version: int, data: dict) -> dict:
    """What a reader must return for ``data``: declaration order, tagged fields at their default left out."""
    out = {}
    for f in fields:
        if version not in f.versions:
            continue
        default = kafka_default(f, version)
        v = data.get(f.json_name, default)
        if f.fields and v is not None:
            v = [canonical(f.fields, version, x) for x in v] if f.type.startswith("[]") else canonical(f.fields, version, v)
        if version in f.tagged and v == default:
            continue
        out[f.json_name] = v
    return out


ALL_VERSIONS = [
    pytest.param(rd.type_name, v, id=f"{rd.name}_v{v}")
    for rd in METADATA_RECORDS + CONTROL_RECORDS
    for v in range(rd.valid_versions.lo, rd.valid_versions.hi + 1)
]


def write_generated_batch(data, path, type_name: str, version: int, max_size: int) -> list[dict]:
    """Draw 1..``max_size`` records of one type and version (``data``: hypothesis' ``st.data()``), write them as one
    batch at offset 0 to ``path`` (many records per batch: the columnar paths see varied rows together); returns
    the drawn values (a control record's carry its own version, as the message does)."""
    from controller_core.codec.batch import encode_batch
    from controller_core.records import BY_TYPE_NAME

    rdef = BY_TYPE_NAME[type_name]
    values = data.draw(st.lists(struct_strategy(rdef.fields, version), min_size=1, max_size=max_size), label="values")
    if rdef.is_control:
        values = [dict(v, version=version) for v in values]  # a control message starts with its own version
    path.write_bytes(encode_batch(0, [(type_name, version, v) for v in values]))
    return values
