"""Kafka's JSON form of decoded records, built column-wise with Arrow string kernels.

The text matches what ``kafka-dump-log.sh --cluster-metadata-decoder`` prints as a record's payload:
lowerCamel keys in declaration order, tagged fields only when they differ from their default, uuids
in base64url, bytes in base64, null as ``null``.  Building it per column (cast, concatenate, join)
keeps JSON output off the per-record Python path; only rare value kinds (floats, bytes, strings with
control characters) are formatted one value at a time.
"""
from __future__ import annotations

import base64
import json
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller_core.codec.arrowutil import from_numpy, repeat_str, strings
from controller_core.schema import Field

_STR = pa.string()


def _lit(text: str, n: int) -> pa.Array:
    return repeat_str(text, n)


def concat(*parts) -> pa.Array:
    """Element-wise concatenation; str parts are literals.  (Literals are passed as arrays, never as
    Python scalars: converting a Python value makes pyarrow import pandas, ~0.4 s of start-up.)"""
    parts = [p.combine_chunks() if isinstance(p, pa.ChunkedArray) else p for p in parts]
    n = next(len(p) for p in parts if not isinstance(p, str))
    cols = [repeat_str(p, n) if isinstance(p, str) else p for p in parts]
    return pc.binary_join_element_wise(*cols, repeat_str("", n))


def _fill(arr: pa.Array, text: str) -> pa.Array:
    return pc.fill_null(arr, repeat_str(text, len(arr))) if arr.null_count else arr


def choose(cond: pa.Array, yes: str, no: str) -> pa.Array:
    return pc.if_else(cond, repeat_str(yes, len(cond)), repeat_str(no, len(cond)))


def java_double(x: float) -> str:
    """Java's Double.toString (what Jackson writes): plain between 1e-3 and 1e7, else d.dddE[-]n."""
    if x != x or x in (float("inf"), float("-inf")):
        return {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[repr(x)]
    if x == 0 or 1e-3 <= abs(x) < 1e7:
        r = repr(float(x))
        return r if "." in r else r + ".0"
    sign, digits, exp = Decimal(repr(float(x))).normalize().as_tuple()
    ds = "".join(map(str, digits))
    mant = ds[0] + "." + (ds[1:] or "0")
    return f"{'-' if sign else ''}{mant}E{exp + len(ds) - 1}"


def _scalar_json(arr: pa.Array, t: str) -> pa.Array:
    """JSON text of a primitive column; nulls become ``null``."""
    if t in ("int8", "int16", "uint16", "int32", "int64"):
        out = pc.cast(arr, _STR)
    elif t == "bool":
        out = choose(arr, "true", "false")
    elif t == "uuid":
        out = concat('"', arr, '"')
    elif t == "string":
        out = _string_json(arr)
    elif t == "bytes":
        out = strings([None if v is None else '"' + base64.b64encode(v).decode() + '"' for v in arr.to_pylist()])
    elif t == "float64":
        out = strings([None if v is None else java_double(v) for v in arr.to_pylist()])
    else:
        raise AssertionError(t)
    return _fill(out, "null")


def _string_json(arr: pa.Array) -> pa.Array:
    if len(arr) == 0:
        return strings([])
    special = pc.match_substring_regex(arr, r"[\x00-\x1f]")
    special = pc.fill_null(special, from_numpy(np.zeros(len(arr), bool))) if special.null_count else special
    esc = pc.replace_substring(pc.replace_substring(arr, "\\", "\\\\"), '"', '\\"')
    out = concat('"', esc, '"')
    if pc.any(special).as_py():
        # control characters: let json.dumps apply the exact escapes (\n, \t, \u0001, ...)
        idx = np.flatnonzero(special.to_numpy(zero_copy_only=False))
        vals = out.to_pylist()
        raw = arr.to_pylist()
        for i in idx.tolist():
            vals[i] = json.dumps(raw[i], ensure_ascii=False)
        out = strings(vals)
    return out


def value_json(arr: pa.Array, f: Field, version: int) -> pa.Array:
    """JSON text of one field's column (one string per row)."""
    if f.is_array:
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if f.is_struct:
            elems = struct_json(_struct_columns(arr.values), f.fields, version, len(arr.values))
        else:
            elems = _scalar_json(arr.values, f.element_type)
        rebuilt = pa.ListArray.from_arrays(arr.offsets, elems, mask=arr.is_null() if arr.null_count else None)
        # .offsets ignores the slice offset of `arr.values`; from_arrays takes care via absolute offsets
        joined = concat("[", pc.binary_join(rebuilt, repeat_str(",", len(rebuilt))), "]")
        return _fill(joined, "null")
    if f.is_struct:
        return struct_json(_struct_columns(arr), f.fields, version, len(arr))
    return _scalar_json(arr, f.type)


def _struct_columns(arr: pa.Array) -> dict[str, pa.Array]:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return {arr.type.field(i).name: arr.field(i) for i in range(arr.type.num_fields)}


def _is_default(arr: pa.Array, f: Field) -> pa.Array:
    d = f.default_value()
    if d is None:
        return arr.is_null()
    n = len(arr)
    if f.is_array:
        return pc.and_(arr.is_valid(), pc.equal(pc.list_value_length(arr), from_numpy(np.zeros(n, np.int32))))
    if isinstance(d, str):
        same = pc.equal(arr, repeat_str(d, n))
    else:
        same = pc.equal(arr, from_numpy(np.full(n, d, dtype=arr.type.to_pandas_dtype())))
    return pc.fill_null(same, from_numpy(np.zeros(n, bool))) if same.null_count else same


def struct_json(cols: dict[str, pa.Array], fields, version: int, n: int) -> pa.Array:
    """``{"key":value,...}`` for every row of a struct given as columns."""
    pieces = []
    for f in fields:
        if not f.present_in(version):
            continue
        arr = cols[f.json_name]
        piece = concat(f',"{f.json_name}":', value_json(arr, f, version))
        if f.is_tagged_in(version):
            piece = pc.if_else(_is_default(arr, f), repeat_str("", n), piece)
        pieces.append(piece)
    if not pieces:
        return _lit("{}", n)
    body = concat(*pieces) if len(pieces) > 1 else pieces[0]
    return concat("{", pc.utf8_slice_codeunits(body, 1), "}")
