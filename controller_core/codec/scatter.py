"""Variable-length columns (strings, lists of integers) of several record-type groups put into file order by one
compiled copy per group, instead of an Arrow concatenation and a take of the whole.

A chunk's typed bronze columns come per (record type, version) group, in each group's row order
(``codec/bronze._Placement``).  For a string or a list of integers, each row of a group is a run of bytes in that
group's values buffer; its place in the file-order column follows from the lengths of all rows before it.  So the
file-order offsets are a cumulative sum of the lengths scattered to their rows, and each group's runs are copied to
their places (eight bytes at a time, codec/wordcopy.py).  Rows no group holds are null.  The result equals
``pa.concat_arrays(pieces).take(inverse)`` (tests/controller_core/codec/test_scatter.py).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

from controller_core import numba_cache  # noqa: F401  (kernels shipped in a zip cache across jobs)
from controller_core.codec.wordcopy import copy_bytes


@njit(cache=True, nogil=True)
def _segments(out, dest, rows, src_off, valid, src, width):
    """Row r of a group (``src[src_off[r] * width:src_off[r + 1] * width]``, skipped when not valid) copied to
    ``out`` at ``dest[rows[r]] * width``."""
    for r in range(len(rows)):
        if valid[r]:
            copy_bytes(out, dest[rows[r]] * width, src, src_off[r] * width, src_off[r + 1] * width)


def _width(typ: pa.DataType) -> int:
    """Bytes per element of a column this module places (0: it does not)."""
    if pa.types.is_string(typ) or pa.types.is_binary(typ):
        return 1
    if pa.types.is_list(typ) and pa.types.is_integer(typ.value_type):
        return typ.value_type.bit_width // 8
    return 0


def _parts(arr: pa.Array, typ: pa.DataType, width: int):
    """(offsets in elements as int64, validity as uint8, the values' bytes) of a piece, or None when it is not a
    plain array of ``typ`` (nested nulls, a chunked column)."""
    if not isinstance(arr, pa.Array) or arr.type != typ:
        return None
    n = len(arr)
    valid = (np.ones(n, np.uint8) if arr.null_count == 0
             else np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), np.uint8))
    if width == 1 and not pa.types.is_list(typ):
        off = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset:arr.offset + n + 1].astype(np.int64)
        data = arr.buffers()[2]
        return off, valid, (np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8))
    child = arr.values
    if child.null_count:
        return None
    off = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), np.int64)
    buf = child.buffers()[1]
    data = np.frombuffer(buf, np.uint8) if buf is not None else np.zeros(0, np.uint8)
    return off + child.offset, valid, data


def place(held: list, n: int, typ: pa.DataType) -> pa.Array | None:
    """The file-order column of ``n`` rows from ``held`` = [(rows, piece)]; None when this module does not place
    such a column (the caller takes the Arrow way)."""
    width = _width(typ)
    if not width:
        return None
    parts = []
    counts = np.zeros(n, np.int64)
    valid = np.zeros(n, bool)
    for rows, arr in held:
        got = _parts(arr, typ, width)
        if got is None:
            return None
        off, ok, data = got
        rows = np.asarray(rows, np.int64)
        counts[rows] = np.where(ok != 0, off[1:] - off[:-1], 0)
        valid[rows] = ok != 0
        parts.append((rows, off, ok, data))
    dest = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=dest[1:])
    total = int(dest[-1])
    if total >= 1 << 31:  # past 32-bit offsets: the Arrow way (large types)
        return None
    out = np.empty(total * width, np.uint8)
    for rows, off, ok, data in parts:
        _segments(out, dest, rows, off, ok, data, width)
    vbuf = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    offsets = pa.py_buffer(dest.astype(np.int32))
    if not pa.types.is_list(typ):
        return pa.Array.from_buffers(typ, n, [vbuf, offsets, pa.py_buffer(out)])
    values = pa.Array.from_buffers(typ.value_type, total, [None, pa.py_buffer(out)])
    return pa.Array.from_buffers(typ, n, [vbuf, offsets], children=[values])
