"""Kafka's JSON of decoded records (``data_json``), written by one compiled pass into an Arrow string column.

:func:`controller_core.codec.jsonout.struct_json` builds the same text with Arrow string kernels: one
intermediate string column per field and per literal, then element-wise joins.  On a million-record log
that was two thirds of decoding into bronze rows (0.98 s of 1.5 s at 100 k partitions).  Here the decoded
columns of every (record type, version) group are laid out as a few flat NumPy arrays (:class:`_Packed`),
and a numba kernel sizes every record's text, then writes it straight into the data buffer of one string
array, in file order -- no per-field column, no reordering afterwards.

What the kernel renders itself: integers, booleans, strings and uuids (quoted, escaped like
``json.dumps(..., ensure_ascii=False)``: ``\\"``, ``\\\\``, ``\\n \\r \\t \\b \\f``, other control characters as
``\\u00xx``), and arrays of those.  Anything else (structs, arrays of structs, float64, bytes) is rendered by
``jsonout.value_json`` for that field only and copied in as text.  Tagged fields appear only when they
differ from their default, as in ``struct_json``, which stays the reference the tests compare with.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit
from numba.core import config

from controller_core import numba_cache  # noqa: F401  (kernels shipped in a zip cache across jobs)
from controller_core.codec import jsonout
from controller_core.codec.wordcopy import copy_bytes, copy_within, store_u64le
from controller_core.kernels.borrow import borrow
from controller_core.numba_cache import read_only

INTS = ("int8", "int16", "uint16", "int32", "int64")
K_INT, K_BOOL, K_STR, K_RAW, K_LIST_INT, K_LIST_STR = range(6)
# literals the kernel copies (global arrays are constants to numba), each followed by zeros up to a word
# (wordcopy.copy_within reads whole words)
_NULL, _TRUE, _FALSE = (np.frombuffer(t.ljust(8, b"\0"), np.uint8).copy() for t in (b"null", b"true", b"false"))
_INT64_MIN = np.frombuffer(b"9223372036854775808", np.uint8).copy()


def _kind(arr: pa.Array, f) -> int:
    t = f.element_type
    if f.is_struct:
        return K_RAW
    if f.is_array:
        if arr.values.null_count:  # Kafka writes no null elements; should a log hold one, the reference renders it
            return K_RAW
        return K_LIST_INT if t in INTS else K_LIST_STR if t in ("string", "uuid") else K_RAW
    return K_INT if t in INTS else K_BOOL if t == "bool" else K_STR if t in ("string", "uuid") else K_RAW


def _string_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data bytes) of a string array: len(arr) + 1 offsets into the returned data."""
    if len(arr) == 0 or arr.buffers()[1] is None:
        return np.zeros(len(arr) + 1, np.int64), np.zeros(0, np.uint8)
    if pa.types.is_large_string(arr.type):
        off = np.frombuffer(arr.buffers()[1], np.int64)[arr.offset:arr.offset + len(arr) + 1]
    else:
        off = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset:arr.offset + len(arr) + 1]
    buf = arr.buffers()[2]
    data = np.frombuffer(buf, np.uint8) if buf is not None else np.zeros(0, np.uint8)
    return off.astype(np.int64), data


def _valid(arr: pa.Array, m: int) -> np.ndarray:
    if not arr.null_count:
        return np.ones(m, np.uint8)
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), np.uint8)


def _joined(parts: list, dtype, pad: int = 0) -> np.ndarray:
    """The parts one after the other in one array of ``dtype`` (each converted as it is copied: one pass, not a
    conversion and then a concatenation), and ``pad`` zeros after them."""
    out = np.empty(sum(len(p) for p in parts) + pad, dtype)
    at = 0
    for p in parts:
        out[at:at + len(p)] = p
        at += len(p)
    out[at:] = 0
    return out


class _Packed:
    """One group's fields as flat arrays the kernel reads (every block is addressed by a base index).  A field every
    record shows (``pbase`` -1) or none holds null in (``vbase`` -1) has no block of flags: most fields, and a
    byte per record and field that the kernels would read for nothing."""

    def __init__(self, cols: dict, fields, version: int, m: int):
        kinds, plain, keys, present, valid = [], [], [], [], []
        ibase, sbase, lbase, pbase, vbase = [], [], [], [], []
        ival, soff, sdata, loff = [], [np.zeros(0, np.int64)], [], [np.zeros(0, np.int64)]
        self._n_data = 0
        n_i = n_s = n_l = n_p = n_v = 0
        for f in fields:
            if not f.present_in(version):
                continue
            arr = cols[f.json_name]
            if isinstance(arr, pa.ChunkedArray):
                arr = arr.combine_chunks()
            k = _kind(arr, f)
            shown = None
            if f.is_tagged_in(version):
                shown = np.asarray(jsonout._is_default(arr, f).to_numpy(zero_copy_only=False) == 0, np.uint8)
                if not shown.any():  # a tagged field no record of the group sets: the writers never visit it
                    continue
                if shown.all():
                    shown = None
            if k == K_RAW:
                arr = jsonout.value_json(arr, f, version)
            keys.append(f'"{f.json_name}":'.encode())
            pbase.append(-1 if shown is None else n_p)
            if shown is not None:
                present.append(shown)
                n_p += m
            vbase.append(n_v if arr.null_count else -1)
            if arr.null_count:
                valid.append(arr.is_valid().to_numpy(zero_copy_only=False))
                n_v += m
            ibase.append(n_i)
            sbase.append(n_s)
            lbase.append(n_l)
            kinds.append(k)
            plain.append(1)
            if k in (K_INT, K_BOOL):
                if arr.null_count:
                    arr = arr.fill_null(False if k == K_BOOL else 0)
                v = arr.to_numpy(zero_copy_only=False)
                ival.append(v)
                n_i += len(v)
            elif k in (K_STR, K_RAW):
                # a uuid is written in base64url, never escaped: its bytes are not scanned
                plain[-1] = self._add_strings(arr, soff, sdata, known_plain=k == K_STR and f.element_type == "uuid")
                n_s += len(arr) + 1
            else:  # arrays: list offsets into the element block
                lo = np.asarray(arr.offsets, np.int64)
                loff.append(lo)
                n_l += len(lo)
                el = arr.values
                if k == K_LIST_INT:
                    v = el.to_numpy(zero_copy_only=False)
                    ival.append(v)
                    n_i += len(v)
                else:
                    plain[-1] = self._add_strings(el, soff, sdata)
                    n_s += len(el) + 1
        self.m = m
        self.kinds = np.array(kinds, np.int64)
        self.plain = np.array(plain, np.uint8)
        self.key_off = np.zeros(len(keys) + 1, np.int64)
        np.cumsum([len(k) for k in keys], out=self.key_off[1:])
        # a word of zeros after the keys: the writer reads whole words (wordcopy.copy_within; a string block without
        # it has its last string copied byte by byte)
        self.key_data = np.frombuffer(b"".join(keys) + bytes(8), np.uint8)
        self.present = _joined(present, np.uint8)
        self.valid = _joined(valid, np.uint8)
        self.ibase, self.sbase, self.lbase, self.pbase, self.vbase = (
            np.array(b, np.int64) for b in (ibase, sbase, lbase, pbase, vbase))
        self.ival, self.soff, self.loff = _joined(ival, np.int64), _joined(soff, np.int64), _joined(loff, np.int64)
        # one string block read where it lies (a group's topic ids: 22 bytes a record); read-only either way, so the
        # kernels have one compiled signature
        self.sdata = read_only(sdata[0] if len(sdata) == 1 else _joined(sdata, np.uint8, 8))

    def _add_strings(self, arr: pa.Array, soff: list, sdata: list, known_plain: bool = False) -> int:
        """Append a string column's offsets (rebased onto the shared data) and bytes; 1 when not one of
        its bytes needs escaping (the kernel then copies it whole)."""
        off, data = _string_parts(arr)
        data = data[off[0]:off[-1]]
        soff.append(off + (self._n_data - off[0]))
        sdata.append(data)
        self._n_data += len(data)
        return int(known_plain or not ((data < 32) | (data == 34) | (data == 92)).any())

    def args(self):
        return (self.m, self.kinds, self.plain, self.key_off, self.key_data, self.present, self.valid, self.pbase,
                self.vbase, self.ibase, self.sbase, self.lbase, self.ival, self.soff, self.sdata, self.loff)


# ------------------------------------------------------------------------------------------ the kernel
_TEN = np.uint64(10)
_POW10 = np.array([10 ** k for k in range(1, 19)], np.int64)  # 10 .. 10^18


@njit(cache=True)
def _digits(v):
    """Characters of a non-negative int64 in decimal (compared with powers of ten, not divided digit by digit)."""
    d = 1
    while d < 19 and v >= _POW10[d - 1]:
        d += 1
    return d


@njit(cache=True, inline="always")
def _copy(out, pos, src, s, e):
    """src[s:e] to out at pos (words, then bytes: numba's slice assignment first checks the two for overlap)."""
    return copy_bytes(out, pos, src, s, e)


# 0 .. 999, the integers most fields hold (ids, epochs, counts): each one's digits as one little-endian word
_SMALL = 1000
_SMALL_LEN = np.array([len(str(v)) for v in range(_SMALL)], np.int64)
_SMALL_WORD = np.array([int.from_bytes(str(v).encode(), "little") for v in range(_SMALL)], np.uint64)


@njit(cache=True)
def _int_size(v):
    if v >= 0:
        return _digits(v)
    return 20 if v == -9223372036854775808 else 1 + _digits(-v)


@njit(cache=True, inline="always")
def _put_int(out, pos, v):
    if v < 0:
        out[pos] = 45  # '-'
        pos += 1
        if v == -9223372036854775808:  # its magnitude does not fit an int64
            return _copy(out, pos, _INT64_MIN, 0, 19)
        v = -v
    n = _digits(v)
    u = np.uint64(v)  # unsigned: a division by ten is a multiply and a shift, without Python's floor rules
    for d in range(n - 1, -1, -1):
        q = u // _TEN
        out[pos + d] = np.uint8(48 + (u - q * _TEN))
        u = q
    return pos + n


def _put_int_within_python(out, pos, v, lim):
    """_put_int_within as plain Python (NUMBA_DISABLE_JIT=1: the word store is an intrinsic)."""
    return _put_int(out, pos, v)


@njit(cache=True, inline="always")
def _put_int_within(out, pos, v, lim):
    """:func:`_put_int`; a small non-negative one as one word store when the text goes on to ``lim`` (its digits, then
    bytes the writer overwrites next)."""
    if 0 <= v < _SMALL and pos + 8 <= lim:
        store_u64le(out, pos, _SMALL_WORD[v])
        return pos + _SMALL_LEN[v]
    return _put_int(out, pos, v)


put_int_within = _put_int_within_python if config.DISABLE_JIT else _put_int_within


@njit(cache=True)
def _escaped(c):
    """Characters byte c takes inside a JSON string."""
    if c == 34 or c == 92:
        return 2
    if c < 32:
        return 2 if c == 8 or c == 9 or c == 10 or c == 12 or c == 13 else 6
    return 1


@njit(cache=True)
def _str_size(data, s, e, plain):
    if plain:
        return e - s + 2
    n = 2
    for q in range(s, e):
        n += _escaped(data[q])
    return n


@njit(cache=True)
def _hex(d):
    return 48 + d if d < 10 else 87 + d  # lower case, as json.dumps writes \u00xx


@njit(cache=True, inline="always")
def _put_str(out, pos, data, s, e, plain, lim):
    out[pos] = 34
    pos += 1
    if plain:
        pos = copy_within(out, pos, data, s, e, lim)
    else:
        for q in range(s, e):
            c = data[q]
            if c == 34 or c == 92:
                out[pos] = 92
                out[pos + 1] = c
                pos += 2
            elif c < 32:
                out[pos] = 92
                if c == 10:
                    out[pos + 1] = 110  # \n
                elif c == 13:
                    out[pos + 1] = 114  # \r
                elif c == 9:
                    out[pos + 1] = 116  # \t
                elif c == 8:
                    out[pos + 1] = 98  # \b
                elif c == 12:
                    out[pos + 1] = 102  # \f
                else:  # \u00xx
                    out[pos + 1] = 117
                    out[pos + 2] = 48
                    out[pos + 3] = 48
                    out[pos + 4] = _hex(c >> 4)
                    out[pos + 5] = _hex(c & 15)
                    pos += 4
                pos += 2
            else:
                out[pos] = c
                pos += 1
    out[pos] = 34
    return pos + 1


@njit(cache=True)
def _sizes(sizes, rows, m, kinds, plain, key_off, key_data, present, valid, pbase, vbase, ibase, sbase, lbase, ival,
           soff, sdata, loff):
    # borrowed views (kernels/borrow.py): the helpers below take them once per field; chunk_json over 1.15 M
    # records 0.188 s -> 0.162 s
    key_data, ival, soff, sdata, loff = borrow(key_data), borrow(ival), borrow(soff), borrow(sdata), borrow(loff)
    for r in range(m):
        n = 1  # {
        first = True
        for j in range(len(kinds)):
            if pbase[j] >= 0 and present[pbase[j] + r] == 0:
                continue
            if not first:
                n += 1
            first = False
            n += key_off[j + 1] - key_off[j]
            k = kinds[j]
            if vbase[j] >= 0 and valid[vbase[j] + r] == 0:
                n += 4
            elif k == K_INT:
                n += _int_size(ival[ibase[j] + r])
            elif k == K_BOOL:
                n += 4 if ival[ibase[j] + r] else 5
            elif k == K_STR:
                n += _str_size(sdata, soff[sbase[j] + r], soff[sbase[j] + r + 1], plain[j])
            elif k == K_RAW:
                n += soff[sbase[j] + r + 1] - soff[sbase[j] + r]
            else:
                s, e = loff[lbase[j] + r], loff[lbase[j] + r + 1]
                n += 2 + max(e - s - 1, 0)  # [ ] and the commas
                for x in range(s, e):
                    if k == K_LIST_INT:
                        n += _int_size(ival[ibase[j] + x])
                    else:
                        n += _str_size(sdata, soff[sbase[j] + x], soff[sbase[j] + x + 1], plain[j])
        sizes[rows[r]] = n + 1  # }


@njit(cache=True)
def _write(out, starts, ends, rows, r0, r1, m, kinds, plain, key_off, key_data, present, valid, pbase, vbase, ibase,
           sbase, lbase, ival, soff, sdata, loff):
    """The text of the group's records r0 .. r1 - 1 (of ``m``), record ``rows[r]`` from ``starts`` to ``ends`` of it.
    Keys, plain strings and small integers are stored in whole words where the text goes on past them (its end
    bounds every store): the bytes past a value are overwritten by what the record writes next."""
    out, key_data, ival, sdata = borrow(out), borrow(key_data), borrow(ival), borrow(sdata)  # see _sizes
    for r in range(r0, r1):
        pos = starts[rows[r]]
        lim = ends[rows[r]]
        out[pos] = 123  # {
        pos += 1
        first = True
        for j in range(len(kinds)):
            if pbase[j] >= 0 and present[pbase[j] + r] == 0:
                continue
            if not first:
                out[pos] = 44
                pos += 1
            first = False
            pos = copy_within(out, pos, key_data, key_off[j], key_off[j + 1], lim)
            k = kinds[j]
            if vbase[j] >= 0 and valid[vbase[j] + r] == 0:
                pos = copy_within(out, pos, _NULL, 0, 4, lim)
            elif k == K_INT:
                pos = put_int_within(out, pos, ival[ibase[j] + r], lim)
            elif k == K_BOOL:
                pos = copy_within(out, pos, _TRUE, 0, 4, lim) if ival[ibase[j] + r] else copy_within(
                    out, pos, _FALSE, 0, 5, lim)
            elif k == K_STR:
                pos = _put_str(out, pos, sdata, soff[sbase[j] + r], soff[sbase[j] + r + 1], plain[j], lim)
            elif k == K_RAW:
                pos = copy_within(out, pos, sdata, soff[sbase[j] + r], soff[sbase[j] + r + 1], lim)
            else:
                out[pos] = 91  # [
                pos += 1
                s, e = loff[lbase[j] + r], loff[lbase[j] + r + 1]
                for x in range(s, e):
                    if x > s:
                        out[pos] = 44
                        pos += 1
                    if k == K_LIST_INT:
                        pos = put_int_within(out, pos, ival[ibase[j] + x], lim)
                    else:
                        pos = _put_str(out, pos, sdata, soff[sbase[j] + x], soff[sbase[j] + x + 1], plain[j], lim)
                out[pos] = 93  # ]
                pos += 1
        out[pos] = 125  # }


# ------------------------------------------------------------------------------------------ entry point
def chunk_json(groups, n: int, without: frozenset[str] = frozenset()) -> pa.Array:
    """``data_json`` of a decoded chunk's ``n`` records, in file order (``groups``: the chunk's
    :class:`~controller_core.codec.logfile.Group` list; every record belongs to exactly one).  Records of the
    types in ``without`` get null: a reader that takes their typed columns only does not pay for their text."""
    sizes = np.zeros(n, np.int64)
    packed = []
    left = np.zeros(n, bool) if without else None  # the rows left null
    for g in groups:
        rows = np.asarray(g.rows, np.int64)
        if left is not None and g.rdef.type_name in without:
            left[rows] = True
            continue
        p = _Packed(g.columns, g.rdef.fields, g.layout, len(g.rows))
        _sizes(sizes, rows, *p.args())
        packed.append((rows, p))
    out = _written(sizes, packed)
    if left is None or not left.any():
        return out
    return pa.Array.from_buffers(out.type, n, [pa.py_buffer(np.packbits(~left, bitorder="little")),
                                               *out.buffers()[1:]])


def objects_json(columns: dict[str, pa.Array], fields) -> pa.Array:
    """One JSON object per row of ``columns`` (keyed by each field's JSON name), with ``fields`` (schema
    :class:`~controller_core.schema.Field` declarations, all present in version 0) saying the keys, their order
    and value types -- what ``json.dumps(obj, separators=(",", ":"), ensure_ascii=False)`` writes for the same
    values."""
    n = len(next(iter(columns.values()))) if columns else 0
    p = _Packed(columns, fields, 0, n)
    sizes = np.zeros(n, np.int64)
    rows = np.arange(n, dtype=np.int64)
    _sizes(sizes, rows, *p.args())
    return _written(sizes, [(rows, p)])


def _written(sizes: np.ndarray, packed: list) -> pa.Array:
    """The string array of records whose sizes are known: each group's rows written at their offsets."""
    n = len(sizes)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    out = np.empty(int(offsets[-1]), np.uint8)
    for rows, p in packed:
        _write(out, offsets, offsets[1:], rows, 0, len(rows), *p.args())
    if offsets[-1] < 2 ** 31:
        return pa.StringArray.from_buffers(n, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(out))
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(out))


# ------------------------------------------------------------------------------------ decode's lines
# The pieces of text around the values of one ``kraft-audit decode`` line, in order (one array: global arrays
# are constants to numba): offset, type, version, data, [unknownTaggedFields], file, position, batchBaseOffset,
# batchTimestamp, batchLeaderEpoch, control.
_LINE_PIECES = (b'{"offset":', b',"type":"', b'","version":', b',"data":', b',"unknownTaggedFields":', b',"file":',
                b',"position":', b',"batchBaseOffset":', b',"batchTimestamp":', b',"batchLeaderEpoch":', b',"control":',
                b"}\n")
_LINE_TEXT = np.frombuffer(b"".join(_LINE_PIECES), np.uint8).copy()
_LINE_AT = np.cumsum([0] + [len(p) for p in _LINE_PIECES]).astype(np.int64)
(L_OFFSET, L_TYPE, L_VERSION, L_DATA, L_TAGS, L_FILE, L_POSITION, L_BASE, L_BATCH_TS, L_EPOCH, L_CONTROL,
 L_END) = range(12)
# integer columns of a line, in the order they are written
LINE_INTS = ("offset", "record_version", "position", "batch_base_offset", "batch_timestamp", "batch_leader_epoch")


@njit(cache=True, inline="always")
def _piece(out, pos, k):
    return _copy(out, pos, _LINE_TEXT, _LINE_AT[k], _LINE_AT[k + 1])


@njit(cache=True)
def _line_sizes(sizes, ints, ctl, t_off, d_off, u_off, u_valid, file_len):
    fixed = _LINE_AT[L_END + 1] - _LINE_AT[L_TAGS + 1] + _LINE_AT[L_TAGS] + file_len  # all but the tags' key
    for i in range(len(sizes)):
        s = fixed + (t_off[i + 1] - t_off[i]) + (d_off[i + 1] - d_off[i]) + (4 if ctl[i] else 5)
        for c in range(ints.shape[1]):
            s += _int_size(ints[i, c])
        if u_valid[i]:
            s += _LINE_AT[L_TAGS + 1] - _LINE_AT[L_TAGS] + u_off[i + 1] - u_off[i]
        sizes[i] = s


@njit(cache=True)
def _put_lines(out, ints, ctl, t_off, t_data, d_off, d_data, u_off, u_data, u_valid, file_text):
    pos = 0
    for i in range(len(ctl)):
        pos = _piece(out, pos, L_OFFSET)
        pos = _put_int(out, pos, ints[i, 0])
        pos = _piece(out, pos, L_TYPE)
        pos = _copy(out, pos, t_data, t_off[i], t_off[i + 1])
        pos = _piece(out, pos, L_VERSION)
        pos = _put_int(out, pos, ints[i, 1])
        pos = _piece(out, pos, L_DATA)
        pos = _copy(out, pos, d_data, d_off[i], d_off[i + 1])
        if u_valid[i]:
            pos = _piece(out, pos, L_TAGS)
            pos = _copy(out, pos, u_data, u_off[i], u_off[i + 1])
        pos = _piece(out, pos, L_FILE)
        pos = _copy(out, pos, file_text, 0, len(file_text))
        for c, k in ((2, L_POSITION), (3, L_BASE), (4, L_BATCH_TS), (5, L_EPOCH)):
            pos = _piece(out, pos, k)
            pos = _put_int(out, pos, ints[i, c])
        pos = _piece(out, pos, L_CONTROL)
        pos = _copy(out, pos, _TRUE, 0, 4) if ctl[i] else _copy(out, pos, _FALSE, 0, 5)
        pos = _piece(out, pos, L_END)
    return pos


def record_lines(table: pa.Table, file_json: str) -> np.ndarray | None:
    """``kraft-audit decode``'s JSON Lines of bronze rows (offset, type, version, data, unknownTaggedFields when
    present, file, position, batch fields, control) as one UTF-8 byte array; ``file_json`` is the file's name
    as a JSON string.  None when a row has no ``data_json`` (the caller's Arrow reference then decides)."""
    n = table.num_rows
    col = lambda name: table.column(name).combine_chunks()  # noqa: E731
    data = col("data_json")
    if data.null_count:
        return None
    ints = np.empty((n, len(LINE_INTS)), np.int64)
    for c, name in enumerate(LINE_INTS):
        a = col(name)
        ints[:, c] = (a.cast(pa.int64()) if pa.types.is_timestamp(a.type) else a).to_numpy(zero_copy_only=False)
    ctl = np.asarray(col("is_control").to_numpy(zero_copy_only=False), np.uint8)
    t_off, t_data = _string_parts(col("record_type"))
    d_off, d_data = _string_parts(data)
    tags = col("unknown_tagged_fields")
    u_off, u_data = _string_parts(tags)
    u_valid = _valid(tags, n) if tags.null_count < n else np.zeros(n, np.uint8)
    file_text = np.frombuffer(file_json.encode("utf-8"), np.uint8)
    sizes = np.empty(n, np.int64)
    _line_sizes(sizes, ints, ctl, t_off, d_off, u_off, u_valid, len(file_text))
    out = np.empty(int(sizes.sum()), np.uint8)
    end = _put_lines(out, ints, ctl, t_off, t_data, d_off, d_data, u_off, u_data, u_valid, file_text)
    assert end == len(out)
    return out


# ------------------------------------------------------------------------- decode's lines from the decoder
# The same lines as record_lines, written from a decoded chunk's own arrays: each record's data text goes
# straight into its line (record_lines copies it again from a data_json column), the typed bronze columns a
# JSON dump never reads are not built, and the batch fields -- the same for every record of a batch -- are
# rendered once per batch and copied to its other lines.
@njit(cache=True)
def _frame_sizes(sizes, dsize, offset, head, head_len, position, bbo, bts, bepoch, bpos, ctl, fixed):
    """Each line's length: ``fixed`` (its literal pieces and the file's name) plus its values and data text."""
    tail = 0
    for i in range(len(sizes)):
        if i == 0 or bpos[i] != bpos[i - 1]:
            tail = _int_size(bbo[i]) + _int_size(bts[i]) + _int_size(bepoch[i])
        sizes[i] = (fixed + _int_size(offset[i]) + head_len[head[i]] + dsize[i] + _int_size(position[i]) + tail
                    + (4 if ctl[i] else 5))


@njit(cache=True)
def _put_frames(out, line_at, a, b, data_at, dsize, offset, head, head_at, head_data, position, bbo, bts, bepoch, bpos,
                ctl, file_piece):
    """Lines a .. b - 1 but their data text, at ``line_at[i] - line_at[a]`` in ``out``; where each one's data text
    goes is put in ``data_at`` (written afterwards, group by group).  ``head_data[head_at[h]:head_at[h + 1]]``: the
    text from ``,"type":`` to ``"data":`` of the lines of group h (its type and version); ``file_piece``: the text
    from ``,"file":`` to ``"position":`` (the same on every line)."""
    out, head_data, file_piece = borrow(out), borrow(head_data), borrow(file_piece)
    base = line_at[a]
    t0 = t1 = 0  # where the current batch's rendered fields are, in ``out``
    for i in range(a, b):
        pos = _piece(out, line_at[i] - base, L_OFFSET)
        pos = _put_int(out, pos, offset[i])
        pos = _copy(out, pos, head_data, head_at[head[i]], head_at[head[i] + 1])
        data_at[i] = pos
        pos += dsize[i]
        pos = _copy(out, pos, file_piece, 0, len(file_piece))
        pos = _put_int(out, pos, position[i])
        if i == a or bpos[i] != bpos[i - 1]:
            t0 = pos
            pos = _piece(out, pos, L_BASE)
            pos = _put_int(out, pos, bbo[i])
            pos = _piece(out, pos, L_BATCH_TS)
            pos = _put_int(out, pos, bts[i])
            pos = _piece(out, pos, L_EPOCH)
            pos = _put_int(out, pos, bepoch[i])
            pos = _piece(out, pos, L_CONTROL)
            t1 = pos
        else:
            pos = _copy(out, pos, out, t0, t1)
        pos = _copy(out, pos, _TRUE, 0, 4) if ctl[i] else _copy(out, pos, _FALSE, 0, 5)
        pos = _piece(out, pos, L_END)
    return pos


BLOCK_BYTES = 1 << 20  # lines are written a block at a time into one reused buffer (see chunk_lines)


def chunk_lines(chunk, file_json: str, block_bytes: int = BLOCK_BYTES):
    """``kraft-audit decode``'s JSON Lines of a decoded chunk (codec/logfile.DecodedChunk), as consecutive spans of
    UTF-8 bytes (memoryviews of one buffer, each valid until the next is asked for): together byte for byte what
    :func:`record_lines` writes of the chunk's bronze rows (``records_table``), without making them.  The lines
    go through a buffer of about ``block_bytes`` (larger when one line is): the chunk's text whole is fresh
    memory the size of the output, and faulting its pages in cost more than writing them; a block is written
    while it is still in the cache.  ``file_json``: the file's name as a JSON string.  None when a group carries
    tagged fields this build does not declare (the caller takes the bronze rows' path, which prints them)."""
    from controller_core.codec.logfile import TYPE_NAMES

    n = len(chunk)
    if any(g.unknown_tagged_fields is not None for g in chunk.groups):
        return None
    if not n:
        return iter(())
    dsize = np.zeros(n, np.int64)
    head = np.full(n, -1, np.int64)  # each line's group: its type and version are the group's
    heads, packed = [], []
    for g in chunk.groups:
        rows = np.asarray(g.rows, np.int64)
        if len(rows) > 1 and not (rows[1:] > rows[:-1]).all():  # (the decoder's groups are in file order)
            return None
        if not len(rows):
            continue
        code, version = int(chunk.type_code[rows[0]]), int(chunk.version[rows[0]])
        if not ((chunk.type_code[rows] == code).all() and (chunk.version[rows] == version).all()):
            return None  # (a group is one type and version)
        head[rows] = len(heads)
        heads.append(b"".join((_LINE_PIECES[L_TYPE], TYPE_NAMES[code].encode("utf-8"), _LINE_PIECES[L_VERSION],
                               str(version).encode(), _LINE_PIECES[L_DATA])))
        p = _Packed(g.columns, g.rdef.fields, g.layout, len(g.rows))
        _sizes(dsize, rows, *p.args())
        packed.append((rows, p))
    if (head < 0).any():  # a record in no group (the decoder puts each in one)
        return None
    head_at = np.zeros(len(heads) + 1, np.int64)
    np.cumsum([len(t) for t in heads], out=head_at[1:])
    head_data = np.frombuffer(b"".join(heads), np.uint8)
    file_piece = np.frombuffer(b"".join((_LINE_PIECES[L_FILE], file_json.encode("utf-8"),
                                         _LINE_PIECES[L_POSITION])), np.uint8)
    # every line's literal pieces but those in its head and file_piece, and the tags' key
    fixed = int(len(file_piece) + sum(len(_LINE_PIECES[k]) for k in (L_OFFSET, L_BASE, L_BATCH_TS, L_EPOCH, L_CONTROL,
                                                                      L_END)))
    offset, position, bbo, bts, bepoch, bpos = (np.asarray(a, np.int64) for a in (
        chunk.offset, chunk.position, chunk.batch_base_offset, chunk.batch_timestamp, chunk.batch_leader_epoch,
        chunk.batch_position))
    ctl = np.asarray(chunk.is_control, np.uint8)
    sizes = np.empty(n, np.int64)
    _frame_sizes(sizes, dsize, offset, head, np.diff(head_at), position, bbo, bts, bepoch, bpos, ctl, fixed)
    line_at = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=line_at[1:])
    return _blocks(line_at, block_bytes, packed, (dsize, offset, head, head_at, head_data, position, bbo, bts, bepoch,
                                                  bpos, ctl, file_piece))


def _blocks(line_at: np.ndarray, block_bytes: int, packed: list, frame_args: tuple):
    """The lines in blocks of rows of about ``block_bytes`` each (chunk_lines)."""
    n = len(line_at) - 1
    cuts = np.unique(np.searchsorted(line_at, np.arange(0, int(line_at[-1]), max(block_bytes, 1)), "right") - 1)
    cuts = np.append(cuts[cuts < n], n)
    longest = int(np.diff(line_at[cuts]).max(initial=0))
    buf = np.empty(longest, np.uint8)
    data_at = np.empty(n, np.int64)
    data_end = np.empty(n, np.int64)  # where each record's data ends: its line goes on with the frame's text
    dsize = frame_args[0]
    # each group's records in each block: group rows r_at[g][k] .. r_at[g][k + 1] - 1 are in block k
    r_at = [(rows, np.searchsorted(rows, cuts).tolist(), p.args()) for rows, p in packed]
    for k, (a, b) in enumerate(zip(cuts[:-1].tolist(), cuts[1:].tolist())):
        size = int(line_at[b] - line_at[a])
        out = buf[:size]
        end = _put_frames(out, line_at, a, b, data_at, *frame_args)
        assert end == size
        np.add(data_at[a:b], dsize[a:b], out=data_end[a:b])
        for rows, at, args in r_at:
            if at[k + 1] > at[k]:
                _write(out, data_at, data_end, rows, at[k], at[k + 1], *args)
        yield memoryview(out)
