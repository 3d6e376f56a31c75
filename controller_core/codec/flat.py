"""Compiled body decoding of the flat record types: one loop over a group's records instead of one
NumPy pass per field.

Most of a metadata log is PartitionChangeRecords, PartitionRecords, TopicRecords, ConfigRecords and
broker fences: bodies of fixed-width scalars, strings and arrays of fixed-width elements, plus a tagged
section of the same.  For a group of such records (one type and version, see ``logfile._decode_groups``)
:func:`_locate` walks every body once, field by field as the declaration says, and writes where each
field's value starts and its length (string bytes, array elements; -1 for null).  The Arrow columns are
then a handful of whole-array gathers per field (:func:`decode`), the same ones :mod:`.vector` makes.

The output equals :func:`controller_core.codec.vector.decode_struct` column for column (tests/codec
compare them on every log they read).  Anything the loop does not take as plainly regular -- a body that
does not parse or does not end where the value does, a string beyond ASCII (UTF-8 is checked by the NumPy
path), a tagged field the declaration does not have -- makes :func:`decode` answer None, and the caller
decodes that group the NumPy way, which names every error as before.  Nested structs (broker endpoints,
LeaderChange voters) are not flat and always take the NumPy path.

``@njit(cache=True)``: loaded from numba's cache; a group smaller than ``logfile.COMPILED_MIN_RECORDS`` never
calls it, so a small log's command does not pay the cache load.
"""
from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

import numpy as np
import pyarrow as pa
from numba import njit

from controller_core import numba_cache  # noqa: F401  (kernels shipped in a zip cache across jobs)
from controller_core.codec import vector as V
from controller_core.codec.arrowutil import from_numpy
from controller_core.codec.walk import _compact_len, _uvarint, helper
from controller_core.codec.wordcopy import copy22, equal16


# One row per field of a plan: its kind, output column, fixed width (element width of an array), whether
# it may be null, whether it is a string (ASCII-checked), its tag (-1: not tagged) and, for a tagged
# string or array, the length an absent field gets (-1: null, its default; 0: empty).
K_FIXED, K_STRING, K_ARRAY = 0, 1, 2
P_KIND, P_COL, P_WIDTH, P_NULLABLE, P_IS_STRING, P_TAG, P_ABSENT = range(7)
P_WIDE = 7

# Status of a record after the loop (any but FINE sends its group to the NumPy path).
FINE, IRREGULAR, NOT_ASCII, UNKNOWN_TAG = 0, 1, 2, 3

_WIDTH = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "int64": 8, "float64": 8, "bool": 1, "uuid": 16}


class Plan:
    """The fields of one (record type, layout version) in declaration order, and the int32 rows the loop
    reads (untagged fields first, in order, then the tagged ones by tag)."""

    def __init__(self, fields: list, rows: np.ndarray):
        self.fields = fields  # (Field, column, tagged) in declaration order
        self.rows = rows


@lru_cache(maxsize=None)
def plan(rdef, version: int) -> Plan | None:
    """The plan of ``rdef`` at layout ``version``, or None when a field is not flat (a struct, an array of
    strings or structs, a tagged uuid or bytes, a tagged string with a non-empty default)."""
    fields, untagged, tagged = [], [], []
    for f in rdef.fields:
        if not f.present_in(version):
            continue
        col = len(fields)
        is_tagged = f.is_tagged_in(version)
        row = _row(f, version, col, is_tagged)
        if row is None:
            return None
        fields.append((f, col, is_tagged))
        (tagged if is_tagged else untagged).append(row)
    tagged.sort(key=lambda r: r[P_TAG])
    rows = np.array(untagged + tagged, np.int32).reshape(-1, P_WIDE)
    return Plan(fields, rows)


def _row(f, version: int, col: int, is_tagged: bool) -> list[int] | None:
    et = f.element_type
    nullable = int(f.is_nullable_in(version))
    tag = f.tag if is_tagged else -1
    if f.is_struct:
        return None
    if f.is_array:
        if et not in _WIDTH:
            return None
        absent = -1 if f.default_value() is None else 0
        return [K_ARRAY, col, _WIDTH[et], nullable, 0, tag, absent]
    if et in ("string", "bytes"):
        if is_tagged and (et == "bytes" or f.default_value() not in (None, "")):
            return None
        absent = -1 if f.default_value() is None else 0
        return [K_STRING, col, 0, nullable, int(et == "string"), tag, absent]
    if et not in _WIDTH or (is_tagged and et == "uuid"):
        return None
    return [K_FIXED, col, _WIDTH[et], 0, 0, tag, 0]


@helper
def _field(a, p, limit, rows, r, pos, cnt, i):
    """Read field row ``r`` of record ``i`` at ``p`` (not past ``limit``): its value's position and length
    into pos/cnt; returns the position after it, -1 if irregular, -2 for a string beyond ASCII."""
    kind = rows[r, P_KIND]
    col = rows[r, P_COL]
    if kind == K_FIXED:
        w = rows[r, P_WIDTH]
        if p + w > limit:
            return np.int64(-1)
        pos[col, i] = p
        cnt[col, i] = 1
        return p + w
    n, q = _compact_len(a, p, limit, rows[r, P_NULLABLE] != 0)
    if q < 0:
        return np.int64(-1)
    pos[col, i] = q
    cnt[col, i] = n
    if n <= 0:
        return q
    if kind == K_STRING:
        if rows[r, P_IS_STRING] != 0:
            for k in range(q, q + n):
                if a[k] >= 0x80:
                    return np.int64(-2)
        return q + n
    end = q + n * rows[r, P_WIDTH]
    if end > limit:
        return np.int64(-1)
    return end


@njit(cache=True, nogil=True)
def _locate(a, starts, ends, rows, n_untagged, pos, cnt, status):
    """Every record's fields located (see the module docstring); status per record."""
    n_rows = rows.shape[0]
    for r in range(n_untagged, n_rows):  # tagged fields start absent: whole rows of the column-major arrays filled
        pos[rows[r, P_COL], :] = 0  # first (per record, these were scattered writes: a fifth of the loop)
        cnt[rows[r, P_COL], :] = rows[r, P_ABSENT] if rows[r, P_KIND] != K_FIXED else 0
    for i in range(len(starts)):
        p = starts[i]
        limit = ends[i]
        st = FINE
        for r in range(n_untagged):
            p = _field(a, p, limit, rows, r, pos, cnt, i)
            if p < 0:
                break
        if p >= 0:
            ntags, p = _uvarint(a, p, limit, 5)
            last = np.int64(-1)
            for _ in range(ntags if p >= 0 else 0):
                tag, p = _uvarint(a, p, limit, 5)
                if p < 0:
                    break
                size, p = _uvarint(a, p, limit, 5)
                if p < 0 or tag <= last or size > limit - p:
                    p = np.int64(-1)
                    break
                last = tag
                found = -1
                for r in range(n_untagged, n_rows):
                    if rows[r, P_TAG] == tag:
                        found = r
                if found < 0:
                    st = UNKNOWN_TAG
                    p += size
                    continue
                q = _field(a, p, p + size, rows, found, pos, cnt, i)
                if q == -2:
                    p = q
                    break
                if q != p + size:
                    p = np.int64(-1)
                    break
                p = q
        if p == -2:
            st = NOT_ASCII
        elif p != limit:
            st = IRREGULAR
        status[i] = st


@njit(cache=True, nogil=True)
def _elements(a, pos, cnt, width, out):
    """The bytes of every record's array elements (``cnt`` of ``width`` bytes at ``pos``; none when null)
    one after the other into ``out``: an array's elements lie together, so this is a copy per record."""
    o = 0
    for i in range(len(pos)):
        m = cnt[i] * width
        if m > 0:
            p = pos[i] - o
            for k in range(o, o + m):  # (a byte loop: slicing costs more than the few bytes it copies)
                out[k] = a[p + k]
            o += m


@njit(cache=True, nogil=True)
def _int32_elements(a, pos, cnt, out):
    """:func:`_elements` of int32 arrays, each element read as Kafka writes it (big-endian) into ``out``."""
    o = 0
    for i in range(len(pos)):
        p = pos[i]
        for k in range(cnt[i]):  # none when null (-1)
            q = p + 4 * k
            out[o] = np.int32((np.uint32(a[q]) << 24) | (np.uint32(a[q + 1]) << 16) | (np.uint32(a[q + 2]) << 8)
                              | np.uint32(a[q + 3]))
            o += 1


class Located(Mapping):
    """A group's columns, keyed by Kafka JSON name in declaration order, each made when first asked for from
    where its values lie in the window (``a``; per field and record the value's position and length, as
    :func:`_locate` wrote them).  Bronze places the fields it copies as they are straight into file order from
    here (:mod:`.placed`), never making the group's own column: for the partition records of a replay, whose
    JSON is not written, no field's group column is ever made."""

    def __init__(self, a: np.ndarray, pos: np.ndarray, cnt: np.ndarray, pl: Plan):
        self.a, self.pos, self.cnt = a, pos, cnt
        self._at = {f.json_name: (f, col, tagged) for f, col, tagged in pl.fields}
        self._made: dict[str, pa.Array] = {}

    def __getitem__(self, key: str) -> pa.Array:
        got = self._made.get(key)
        if got is None:
            f, col, tagged = self._at[key]
            got = self._made[key] = _column(self.a, f, self.pos[col], self.cnt[col], tagged)
        return got

    def __contains__(self, key) -> bool:
        return key in self._at

    def __iter__(self):
        return iter(self._at)

    def __len__(self) -> int:
        return len(self._at)

    def field(self, key: str):
        """(the schema Field, whether tagged at this version, each record's value position, each one's length:
        elements of an array, bytes of a string, -1 for null, 1 for a fixed field present) of ``key``."""
        f, col, tagged = self._at[key]
        return f, tagged, self.pos[col], self.cnt[col]


def decode(a: np.ndarray, starts: np.ndarray, ends: np.ndarray, pl: Plan) -> Located | None:
    """The columns of a group whose bodies span a[starts[i]:ends[i]] (``a`` padded as vector.padded does),
    keyed by Kafka JSON name in declaration order (:class:`Located`: each made when asked for) -- or None when
    any record is not plainly regular."""
    n = len(starts)
    ncols = len(pl.fields)
    # int32: a window is far below 2 GiB, and these are most of the bytes the loop writes
    pos = np.empty((ncols, n), np.int32)
    cnt = np.empty((ncols, n), np.int32)
    status = np.empty(n, np.uint8)
    n_untagged = sum(1 for _, _, t in pl.fields if not t)
    _locate(a, np.ascontiguousarray(starts, np.int64), np.ascontiguousarray(ends, np.int64), pl.rows, n_untagged,
            pos, cnt, status)
    if status.any():
        return None
    return Located(a, pos, cnt, pl)


def _column(a: np.ndarray, f, pos: np.ndarray, cnt: np.ndarray, tagged: bool) -> pa.Array:
    et = f.element_type
    n = len(pos)
    if f.is_array:
        valid = cnt >= 0
        counts = np.maximum(cnt, 0)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        w = _WIDTH[et]
        if et == "int32":  # broker-id lists, most of a log's arrays: decoded in the copy itself
            ints = np.empty(int(offsets[-1]), np.int32)
            _int32_elements(a, pos, cnt, ints)
            values = from_numpy(ints)
        else:
            raw = np.empty(int(offsets[-1]) * w + V.PAD, np.uint8)
            _elements(a, pos, cnt, w, raw)
            values = _fixed_values(raw, np.arange(int(offsets[-1]), dtype=np.int64) * w, et)
        return pa.ListArray.from_arrays(from_numpy(offsets.astype(np.int32)), values,
                                        mask=None if valid.all() else from_numpy(~valid))
    if et in ("string", "bytes"):
        valid = cnt >= 0
        data, offsets = V.gather_ranges(a, pos, np.maximum(cnt, 0))
        return pa.Array.from_buffers(V._ARROW[et], n, [V._validity(valid), pa.py_buffer(offsets), pa.py_buffer(data)])
    if not tagged:
        return _fixed_values(a, pos, et)
    present = cnt == 1  # an absent tagged field reads position 0: replaced by the default below
    values = _fixed_values(a, pos, et)
    if present.all():
        return values
    v = values.to_numpy(zero_copy_only=False)
    return from_numpy(np.where(present, v, np.asarray(f.default_value(), v.dtype)))


@njit(cache=True, nogil=True, inline="always")
def uuid_chars(a, p, alphabet, out, w):
    """The base64url text of the 16 bytes at ``a[p]`` into ``out[w:w + 22]`` (Kafka's ``Uuid.toString()``): five
    3-byte groups of four characters, then the last byte's two."""
    for g in range(5):
        b0, b1, b2 = np.int64(a[p + 3 * g]), np.int64(a[p + 3 * g + 1]), np.int64(a[p + 3 * g + 2])
        out[w + 4 * g] = alphabet[b0 >> 2]
        out[w + 4 * g + 1] = alphabet[((b0 & 3) << 4) | (b1 >> 4)]
        out[w + 4 * g + 2] = alphabet[((b1 & 15) << 2) | (b2 >> 6)]
        out[w + 4 * g + 3] = alphabet[b2 & 63]
    b15 = np.int64(a[p + 15])
    out[w + 20] = alphabet[b15 >> 2]
    out[w + 21] = alphabet[(b15 & 3) << 4]


@njit(cache=True, nogil=True)
def _uuid_text(a, pos, alphabet, out):
    """Kafka's ``Uuid.toString()`` of the 16 bytes at each of ``pos`` into 22 bytes of ``out`` each: the text of the
    row before when the bytes are the same (a log names one topic or directory in runs of records), else their
    base64url (:func:`uuid_chars`)."""
    prev = np.int64(-1)
    for i in range(len(pos)):
        p = pos[i]
        w = 22 * i
        if prev >= 0 and equal16(a, p, prev):
            copy22(out, w, out, w - 22)
            continue
        uuid_chars(a, p, alphabet, out, w)
        prev = p


def uuid_column(a: np.ndarray, pos: np.ndarray) -> pa.Array:
    """The uuids at ``pos`` of ``a`` as Kafka writes them (:func:`controller_core.codec.vector.uuid_strings` of the
    same bytes), in one compiled pass: every text 22 characters, gathered straight into the string column."""
    n = len(pos)
    chars = np.empty(22 * n, np.uint8)
    _uuid_text(a, np.ascontiguousarray(pos, np.int64), V._B64URL, chars)
    return V._fixed_strings(chars.reshape(n, 22))


_SIGNED = {"int16": np.int16, "int32": np.int32, "int64": np.int64}


@njit(cache=True, nogil=True, inline="always")
def signed_be(a, p, width):
    """The ``width``-byte (1-8) big-endian signed integer at ``a[p]``."""
    v = np.int64(0)
    for b in range(width):
        v = (v << np.int64(8)) | np.int64(a[p + b])
    if width < 8:
        top = np.int64(1) << np.int64(8 * width - 1)
        v = (v ^ top) - top
    return v


@njit(cache=True, nogil=True)
def _signed_be(a, pos, width, out):
    """The ``width``-byte big-endian signed integer at each of ``pos`` into ``out`` (its own type)."""
    for i in range(len(pos)):
        out[i] = signed_be(a, pos[i], width)


def _fixed_values(a: np.ndarray, p: np.ndarray, et: str) -> pa.Array:
    if et == "uuid":
        return uuid_column(a, p)
    if et == "bool":
        return from_numpy(a[p] != 0)
    if et in _SIGNED:  # a field's integers in one compiled pass (a gather of unaligned words, then a byte swap)
        out = np.empty(len(p), _SIGNED[et])
        _signed_be(a, np.ascontiguousarray(p, np.int64), V._FIXED[et][0], out)
        return from_numpy(out)
    return from_numpy(V.be(a, p, et))
