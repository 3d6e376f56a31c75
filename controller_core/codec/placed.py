"""Fields of several record-type groups decoded straight into a chunk's file-order bronze column.

A chunk's records are decoded per (record type, version) group; bronze wants each typed column in file order.
The way for any column is to make each group's Arrow column, then put the groups' pieces in place
(``codec/bronze._Placement``, ``codec/scatter.py``): every value is decoded into one array and copied into
another.  For a field the compiled decoder located (:class:`controller_core.codec.flat.Located`: each record's
value position and length in the window) and that bronze copies as it is, this module decodes the values at
their file-order place directly: the broker-id lists, the topic and directory ids, the integers of partition
records -- nearly all of a replay's bytes (a replay writes no JSON for partition records, so their groups'
own columns are never made).

The result equals placing the groups' columns (``flat._column`` + ``_Placement``): rows no group holds are null;
a null list or a tagged field's absence reads as the group column says (tests/controller_core/codec/test_placed.py).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

from controller_core import numba_cache  # noqa: F401  (kernels shipped in a zip cache across jobs)
from controller_core.codec import vector as V
from controller_core.codec.arrowutil import NUMPY_TYPES, from_numpy
from controller_core.codec.flat import signed_be, uuid_chars
from controller_core.codec.wordcopy import copy22, equal16

_INT_LIST = pa.list_(pa.int32())
_STR_LIST = pa.list_(pa.string())
_UUID = 22  # characters of Kafka's Uuid.toString()
_FIXED = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64, "bool": np.bool_}


@njit(cache=True, nogil=True)
def _int32_lists(a, pos, cnt, rows, dest, out):
    """Record i's int32 array (``cnt[i]`` big-endian elements at ``pos[i]``; none when null) into ``out`` from
    ``dest[rows[i]]``."""
    for i in range(len(pos)):
        p = pos[i]
        o = dest[rows[i]]
        for k in range(cnt[i]):
            q = p + 4 * k
            out[o + k] = np.int32((np.uint32(a[q]) << 24) | (np.uint32(a[q + 1]) << 16) | (np.uint32(a[q + 2]) << 8)
                                  | np.uint32(a[q + 3]))


@njit(cache=True, nogil=True)
def _uuids(a, pos, cnt, single, rows, dest, alphabet, out):
    """Record i's ``cnt[i]`` uuids (16 bytes each from ``pos[i]``; one if ``single``: a uuid field) as text into ``out``,
    22 characters each, from uuid number ``dest[rows[i]]``.  A log names one topic or directory in runs of
    records: the text of the record before is copied when the bytes are the same."""
    prev_p = np.int64(-1)
    prev_w = np.int64(0)
    for i in range(len(pos)):
        for k in range(1 if single else cnt[i]):
            p = pos[i] + 16 * k
            w = _UUID * (dest[rows[i]] + k)
            if prev_p >= 0 and equal16(a, p, prev_p):
                copy22(out, w, out, prev_w)
                prev_w = w
                continue
            uuid_chars(a, p, alphabet, out, w)
            prev_p = p
            prev_w = w


def _kind(f, tagged: bool, typ: pa.DataType) -> str | None:
    """How a field goes into a bronze column of ``typ`` here, or None when not (the caller makes the group
    columns and places them)."""
    et = f.element_type
    if f.is_array:
        if et == "int32" and typ == _INT_LIST:
            return "int32 list"
        if et == "uuid" and typ == _STR_LIST:
            return "uuid list"
        return None
    if et == "uuid":
        return "uuid" if typ == pa.string() and not tagged else None
    dt = _FIXED.get(et)
    return "fixed" if dt is not None and NUMPY_TYPES.get(typ) == np.dtype(dt) else None


@njit(cache=True, nogil=True)
def _mark(rows, cnt, single, counts, valid):
    """Each held row's element count (one for a single uuid; 0 when null) and validity."""
    for i in range(len(rows)):
        c = 1 if single else cnt[i]
        counts[rows[i]] = max(c, 0)
        valid[rows[i]] = c >= 0


@njit(cache=True, nogil=True)
def _running(counts, scale, offsets):
    """``offsets`` = 0, then the running total of ``counts`` times ``scale``; -1 past 32-bit offsets, else the
    total (in elements)."""
    t = np.int64(0)
    offsets[0] = 0
    for r in range(len(counts)):
        t += counts[r]
        if t * scale >= 2147483648:
            return np.int64(-1)
        offsets[r + 1] = t * scale
    return t


def place(held: list, n: int, typ: pa.DataType) -> pa.Array | None:
    """The file-order column of ``n`` rows from ``held`` = [(rows, located, key)]: the field ``key`` of each
    group (a :class:`~controller_core.codec.flat.Located`) at the group's ``rows``; None when a field is not one
    this module places (see :func:`_kind`), or the column's values pass 32-bit offsets."""
    fields = []
    for rows, loc, key in held:
        f, tagged, pos, cnt = loc.field(key)
        kind = _kind(f, tagged, typ)
        if kind is None or (fields and kind != fields[0][0]):
            return None
        fields.append((kind, f, tagged, np.asarray(rows, np.int64), loc.a, pos, cnt))
    kind = fields[0][0]
    if kind == "fixed":
        return _fixed(fields, n, typ)
    single = kind == "uuid"
    counts = np.zeros(n, np.int32)
    valid = np.zeros(n, np.bool_)
    for _, _, _, rows, _, _, cnt in fields:
        _mark(rows, cnt, single, counts, valid)
    offsets = np.empty(n + 1, np.int32)
    total = int(_running(counts, _UUID if single else 1, offsets))
    if total < 0 or (kind == "uuid list" and total * _UUID >= 1 << 31):
        return None
    if single:  # the string's offsets are in characters: the uuid number of each row is offsets // 22
        dest = np.empty(n + 1, np.int32)
        _running(counts, 1, dest)
    else:
        dest = offsets
    vbuf = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    if kind == "int32 list":
        values = np.empty(total, np.int32)
        for _, _, _, rows, a, pos, cnt in fields:
            _int32_lists(a, pos, cnt, rows, dest, values)
        return pa.Array.from_buffers(typ, n, [vbuf, pa.py_buffer(offsets)], children=[from_numpy(values)])
    chars = np.empty(_UUID * total, np.uint8)
    for _, _, _, rows, a, pos, cnt in fields:
        _uuids(a, pos, cnt, single, rows, dest, V._B64URL, chars)
    if single:
        return pa.Array.from_buffers(typ, n, [vbuf, pa.py_buffer(offsets), pa.py_buffer(chars)])
    text = V._fixed_strings(chars.reshape(total, _UUID))
    return pa.Array.from_buffers(typ, n, [vbuf, pa.py_buffer(offsets)], children=[text])


@njit(cache=True, nogil=True)
def _big_endian(a, pos, cnt, tagged, default, width, rows, out, valid):
    """Record i's ``width``-byte big-endian signed integer at ``pos[i]`` (``default`` when ``tagged`` and absent:
    ``cnt[i]`` 0) into ``out[rows[i]]``, marked valid."""
    for i in range(len(pos)):
        out[rows[i]] = default if tagged and cnt[i] != 1 else signed_be(a, pos[i], width)
        valid[rows[i]] = True


def _fixed(fields: list, n: int, typ: pa.DataType) -> pa.Array:
    """A fixed-width column: each group's big-endian values at its rows (a tagged field's absence: its
    default); rows no group holds are null."""
    boolean = pa.types.is_boolean(typ)
    out = np.zeros(n, np.int8 if boolean else NUMPY_TYPES[typ])
    valid = np.zeros(n, np.bool_)
    for _, f, tagged, rows, a, pos, cnt in fields:
        width = 1 if boolean else out.itemsize
        default = int(f.default_value() or 0) if tagged else 0
        _big_endian(a, pos, cnt, tagged, default, width, rows, out, valid)
    return from_numpy(out != 0 if boolean else out, valid)
