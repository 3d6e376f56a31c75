"""Arrow arrays from NumPy without ``pa.array``.

``pa.array`` asks its pandas shim whether the input is pandas-like, which imports pandas (~0.4 s):
enough to spoil the start-up of Spark-free commands such as ``kraft-audit decode``.  These helpers
build the arrays from buffers instead (zero-copy for numeric arrays).
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller_core import heap

_TYPES = {np.dtype(np.int8): pa.int8(), np.dtype(np.int16): pa.int16(), np.dtype(np.int32): pa.int32(),
          np.dtype(np.int64): pa.int64(), np.dtype(np.uint8): pa.uint8(), np.dtype(np.uint16): pa.uint16(),
          np.dtype(np.uint32): pa.uint32(), np.dtype(np.uint64): pa.uint64(), np.dtype(np.float64): pa.float64()}

NUMPY_TYPES = {t: d for d, t in _TYPES.items()}  # (DataType.to_pandas_dtype would import pandas)

# a string column held as codes over its distinct values (a record type, a topic id, a trigger label: a few values
# repeated row after row); :func:`plain` turns such columns back into strings
STRING_CODES = pa.dictionary(pa.int32(), pa.string())


def from_numpy(arr: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A non-null (or ``valid``-masked) Arrow array over a 1-D NumPy array."""
    arr = np.ascontiguousarray(arr)
    n = len(arr)
    vbuf = None if valid is None or valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    if arr.dtype == np.bool_:
        return pa.Array.from_buffers(pa.bool_(), n, [vbuf, pa.py_buffer(np.packbits(arr, bitorder="little"))])
    dt = arr.dtype.newbyteorder("=") if arr.dtype.byteorder == ">" else arr.dtype
    return pa.Array.from_buffers(_TYPES[dt], n, [vbuf, pa.py_buffer(arr.astype(dt, copy=False))])


def to_numpy(col, dtype=None) -> np.ndarray:
    """A (chunked) Arrow column as NumPy.  Not ``np.asarray``: ``ChunkedArray.__array__`` goes through
    pyarrow's pandas shim, which imports pandas."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    out = col.to_numpy(zero_copy_only=False)
    return out if dtype is None else out.astype(dtype)


def equal(col, value: str) -> pa.ChunkedArray:
    """``pc.equal(col, value)`` of a string column, its dictionary-encoded chunks compared by code: Arrow decodes
    a dictionary to compare it (a replay's ``source_kind``: 6.5 ms a 1.15 M-row log, 0.3 ms by code)."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    if not chunks or not all(pa.types.is_dictionary(c.type) for c in chunks):
        return pc.equal(col, value)
    # (a value the dictionary lacks: code -1, which no row has; a null row stays null, as pc.equal leaves it)
    return pa.chunked_array([pc.equal(c.indices, c.dictionary.index(value).as_py()) for c in chunks], pa.bool_())


# a chunk with some nulls from this many rows is filled by one compiled loop (codec/nullfill.py); a smaller one, or
# one of another type, by Arrow and NumPy
_COMPILED_FILL = 4096
_FILLED = frozenset((pa.int8(), pa.int16(), pa.int32(), pa.int64()))


def column_ints(col, fill=0, dtype=np.int64, out: np.ndarray | None = None) -> np.ndarray:
    """An integer column as ``dtype``, nulls as ``fill``: chunk by chunk into one array (casting, filling and
    joining the whole column copied it four times into fresh pages: a third of the layout at 1 M partitions).
    ``out``: where to write it instead (a column of a matrix: no array of its own copied there after)."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    out = np.empty(len(col), dtype) if out is None else out
    at = 0
    for c in chunks:
        if not len(c):
            continue
        dst = out[at:at + len(c)]
        if c.null_count == len(c):  # (a field no record of the chunk has: most of a bronze chunk's columns)
            dst[:] = fill
        elif c.null_count and len(c) >= _COMPILED_FILL and c.type in _FILLED:
            from controller_core.codec.nullfill import fill_into  # (numba: imported where a column asks for it)

            fill_into(c, NUMPY_TYPES[c.type], fill, dst)
        elif c.null_count:
            dst[:] = c.fill_null(0).to_numpy(zero_copy_only=False)
            dst[~c.is_valid().to_numpy(zero_copy_only=False)] = fill
        else:
            dst[:] = c.to_numpy(zero_copy_only=False)
        at += len(c)
    return out


def valid_at(col, rows: np.ndarray) -> np.ndarray:
    """Whether ``col`` holds a value (not null) at each of ``rows`` (ascending row numbers): the validity bits read at
    those rows only (``take`` of a list column's few rows joined its chunks: 31 ms for 2,400 rows of 1.44 M;
    ``is_valid`` of the whole column is a bool per row)."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    ends = np.cumsum([len(c) for c in chunks], dtype=np.int64)
    which = np.searchsorted(ends, rows, side="right")
    out = np.ones(len(rows), bool)
    for k in np.unique(which):
        c = chunks[k]
        if not c.null_count:
            continue
        sel = which == k
        bit = rows[sel] - (ends[k] - len(c)) + c.offset
        bits = np.frombuffer(c.buffers()[0], np.uint8)
        out[sel] = (bits[bit >> 3] >> (bit & 7)) & 1
    return out


# The zeros every all-null array of :func:`nulls` is made over: one buffer, grown when a longer array asks.  Its
# pages are the kernel's zero page until something writes them (controller_core/heap.zeros) -- and nothing does
# (Arrow buffers are immutable).
_ZEROS: list = [pa.py_buffer(np.zeros(0, np.uint8))]


def _zeros(size: int) -> pa.Buffer:
    """At least ``size`` bytes of zeros (the buffer read once: the decoder's threads may grow it at the same time,
    and each must get one as long as it asked)."""
    have = _ZEROS[0]
    if have.size < size:
        have = pa.py_buffer(heap.zeros(max(size, 2 * have.size), np.uint8))
        _ZEROS[0] = have
    return have


def nulls(n: int, typ: pa.DataType) -> pa.Array:
    """``pa.nulls(n, typ)`` without its memory: Arrow allocates and zero-fills a buffer per array (a bronze chunk
    has ~20 columns no record of it carries: 0.15 s and 170 MB of fresh pages per million rows on this VM), these
    arrays share one never-written buffer of zeros.  Fixed-width types, strings and lists of them; anything else
    is ``pa.nulls``."""
    # each buffer a slice of the zeros as long as the array needs: what reads the whole buffer (a pickle) reads no
    # more than of pa.nulls' array
    width = NUMPY_TYPES[typ].itemsize if typ in NUMPY_TYPES else 8 if pa.types.is_timestamp(typ) else 0
    bits = (n + 7) // 8
    if pa.types.is_boolean(typ) or width:
        z = _zeros(max(width * n, bits))
        return pa.Array.from_buffers(typ, n, [z.slice(0, bits), z.slice(0, max(width * n, bits))], null_count=n)
    z = _zeros(4 * (n + 1))
    offsets = z.slice(0, 4 * (n + 1))
    if pa.types.is_string(typ) or pa.types.is_binary(typ):
        return pa.Array.from_buffers(typ, n, [z.slice(0, bits), offsets, z.slice(0, 0)], null_count=n)
    if pa.types.is_list(typ):
        return pa.Array.from_buffers(typ, n, [z.slice(0, bits), offsets], null_count=n,
                                     children=[nulls(0, typ.value_type)])
    return pa.nulls(n, typ)


# repeat_str's buffers of the texts it made last: text -> (offsets, values) of its longest array so far.  A decoded
# chunk's source_file, source_kind and cluster are one text each, made again for every chunk of every file, and a fold
# writes MIGRATING for every replica of every row, again for every group: from here, an array as long or shorter is
# slices of those buffers (on a 1.15 M-record log, 80 MB fewer fresh bytes in the decode alone).
_REPEATED: "OrderedDict[bytes, tuple[pa.Buffer, pa.Buffer]]" = OrderedDict()
_REPEATED_TEXTS = 8  # texts kept, the least recently used dropped first
_REPEATED_MAX_BYTES = 1 << 30  # the buffers kept, all texts together; a longer array is made for its caller alone
_REPEATED_LOCK = threading.Lock()  # (the decoder's threads)


def repeat_str(text: str, n: int) -> pa.Array:
    """A string array of ``text`` ``n`` times."""
    raw = text.encode("utf-8")
    if len(raw) * n >= 1 << 31:  # past a string array's 32-bit offsets: Arrow splits it into chunks
        return pa.chunked_array([repeat_str(text, m) for m in _pieces(n, max(1, ((1 << 31) - 1) // max(len(raw), 1)))])
    with _REPEATED_LOCK:
        have = _REPEATED.get(raw)
        if have is not None and len(have[0]) >= 4 * (n + 1):
            _REPEATED.move_to_end(raw)
        else:
            have = (pa.py_buffer(np.arange(n + 1, dtype=np.int32) * len(raw)), pa.py_buffer(raw * n))
            if 4 * (n + 1) + len(raw) * n <= _REPEATED_MAX_BYTES:
                _REPEATED[raw] = have
                _REPEATED.move_to_end(raw)
                while len(_REPEATED) > _REPEATED_TEXTS or sum(o.size + v.size for o, v in _REPEATED.values()) > \
                        _REPEATED_MAX_BYTES:
                    _REPEATED.popitem(last=False)
    # buffers sliced to this array's length: what reads a whole buffer (a pickle) reads no more than this array
    return pa.Array.from_buffers(pa.string(), n, [None, have[0].slice(0, 4 * (n + 1)), have[1].slice(0, len(raw) * n)])


def _pieces(n: int, most: int) -> list[int]:
    return [min(most, n - i) for i in range(0, n, most)]


def strings(values: list) -> pa.Array:
    """A string array from Python str/None values."""
    raw = [b"" if v is None else v.encode("utf-8") for v in values]
    offsets = np.zeros(len(raw) + 1, np.int32)
    np.cumsum([len(r) for r in raw], out=offsets[1:])
    valid = np.array([v is not None for v in values], bool)
    vbuf = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.string(), len(raw), [vbuf, pa.py_buffer(offsets), pa.py_buffer(b"".join(raw))])


def plain_type(typ: pa.DataType) -> pa.DataType:
    """``typ`` with every dictionary type (also as a list's items) replaced by its value type: the type a
    dictionary-encoded column has in the lake, in Spark and in the reference implementations."""
    if pa.types.is_dictionary(typ):
        return plain_type(typ.value_type)
    if pa.types.is_list(typ):
        return pa.list_(typ.value_field.with_type(plain_type(typ.value_type)))
    return typ


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """:func:`plain_type` of every field."""
    return pa.schema([f.with_type(plain_type(f.type)) for f in schema], metadata=schema.metadata)


def plain(table: pa.Table) -> pa.Table:
    """``table`` with its dictionary-encoded columns decoded (:func:`plain_schema`); the same table when it has
    none.  Column by column: the other columns are left as they are (a table cast checks every field's
    nullability, and a replay's rows hold nulls where bronze's schema has none: ``data_json``)."""
    for i, f in enumerate(table.schema):
        typ = plain_type(f.type)
        if typ != f.type:
            table = table.set_column(i, f.with_type(typ), table.column(i).cast(typ))
    return table


# a column is taken from the values after its null head alone when that head is at least this share of its rows
NULL_HEAD_SHARE = 0.5


def gather(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """``table.take(rows)``, one chunk per column.  Rows that come in a few long runs of consecutive rows (a bucket's
    records nearly in log order, a history less a few partitions') are copied run by run: a take gathers row by row
    and column by column, twice the time on list and string columns.  (Left as the runs' chunks instead, the
    Parquet writer spent more on a bucket's ~900 small chunks than the copy costs.)  A column whose first chunks are
    null, most of its rows (:func:`_null_head`), is a take of the values after them with an index null elsewhere:
    a Spark bucket's broker, config and feature columns have values on its few cluster-level rows only, appended
    after its partition records, and copying their nulls run by run was 16 of the bucket's 36 columns' copy."""
    if not len(rows):
        return table.slice(0, 0)
    heads = [_null_head(c) for c in table.columns]
    late = [i for i, h in enumerate(heads) if h and h >= NULL_HEAD_SHARE * table.num_rows]
    if not late:
        return _gathered(table, rows)
    rest = [i for i in range(table.num_columns) if i not in late]
    got = dict(zip(rest, _gathered(table.select(rest), rows).columns)) if rest else {}
    index: dict[int, pa.Array] = {}  # by head: the rows' places in the values after it, null before it
    for i in late:
        h, col = heads[i], table.column(i)
        if h == table.num_rows:  # no value at all
            got[i] = nulls(len(rows), col.type)
            continue
        if h not in index:
            after = np.asarray(rows, np.int64) - h
            index[h] = from_numpy(np.maximum(after, 0), after >= 0)
        got[i] = col.slice(h).combine_chunks().take(index[h])
    return pa.Table.from_arrays([got[i] for i in range(table.num_columns)], schema=table.schema)


def _null_head(col: pa.ChunkedArray) -> int:
    """How many rows at the start of ``col`` are null, counted in whole chunks."""
    head = 0
    for chunk in col.chunks:
        if chunk.null_count != len(chunk):
            break
        head += len(chunk)
    return head


def _gathered(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """:func:`gather` of every column run by run (or by a take, for rows in no long runs)."""
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    if len(breaks) > max(64, len(rows) // 256):
        return table.take(from_numpy(np.asarray(rows, np.int64)))
    starts = np.concatenate([[0], breaks]).astype(np.int64)
    lengths = np.diff(np.concatenate([starts, [len(rows)]]))
    return pa.concat_tables([table.slice(int(rows[s]), int(n)) for s, n in zip(starts, lengths)]).combine_chunks()
