"""Column preparation shared by the vectorized audit: the partition history as NumPy arrays in
(topic, partition, offset) order, as-of lookups into the cluster timelines, and run-length windows.

Pure NumPy/Arrow; never imports Spark.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller_core.vector.recompute import padded, padded_rows

BIG = np.int64(1) << 40  # (key, offset) packed as key * BIG + offset: offsets < 2^40, keys < 2^23


def np_col(table: pa.Table, name: str, fill, dtype) -> np.ndarray:
    col = table.column(name)
    if fill is not None:
        col = pc.fill_null(col, fill)
    return np.asarray(col.to_numpy(), dtype=dtype) if col.num_chunks else np.zeros(0, dtype)


def objects(col) -> np.ndarray:
    """A string column as a NumPy object array whose equal values share one Python string (a few distinct
    codes or severities over millions of rows: one ``to_pylist`` string per row was hundreds of MB)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    enc = col.dictionary_encode()
    values = np.array(enc.dictionary.to_pylist() + [None], dtype=object)
    idx = np.asarray(pc.fill_null(enc.indices, len(enc.dictionary)).to_numpy(zero_copy_only=False), np.int64)
    return values[idx]


def sorted_rows(parts: list[pa.Table], keys) -> pa.Table:
    """The rows of ``parts`` (same schema) sorted by ``keys`` (Arrow sort keys), built a column at a time:
    ``Table.sort_by`` copies every column while the input is still held, twice a million-partition
    audit's findings (gigabytes of explanation texts).  Empties ``parts``: each source column is freed as
    soon as its sorted copy exists."""
    t = pa.concat_tables(parts)
    parts.clear()
    order = np.asarray(pc.sort_indices(t.select([k for k, _ in keys]), sort_keys=list(keys)), np.int64)
    schema, cols = t.schema, list(t.columns)
    del t
    plans: dict = {}  # the columns of concatenated tables share their chunk lengths: one plan serves them all
    for i in range(len(cols)):
        lengths = tuple(len(c) for c in cols[i].chunks)
        if lengths not in plans:
            plans[lengths] = gather_plan(lengths, order)
        cols[i] = take_chunked(cols[i], order, plan=plans[lengths])
    return pa.Table.from_arrays(cols, schema=schema)


def take_rows(table: pa.Table, rows) -> pa.Table:
    """``table.take(rows)`` through :func:`take_chunked`: listing twenty findings must not concatenate
    every text column of millions."""
    rows = np.asarray(rows, np.int64)
    return pa.Table.from_arrays([take_chunked(c, rows) for c in table.columns], schema=table.schema)


def gather_plan(lengths, rows: np.ndarray, piece: int = 1 << 20) -> list:
    """How :func:`take_chunked` gathers ``rows`` from chunks of ``lengths``: per piece of the output, the rows
    to take from each chunk (chunk, Arrow indices) and the permutation back to the output's order."""
    starts = np.cumsum([0, *lengths])
    plan = []
    for s in range(0, len(rows), piece):
        idx = rows[s:s + piece]
        which = np.searchsorted(starts, idx, side="right") - 1
        by_chunk = np.argsort(which, kind="stable")
        ordered_which, local = which[by_chunk], (idx - starts[which])[by_chunk]
        bounds = np.searchsorted(ordered_which, np.arange(len(lengths) + 1))
        takes = [(c, pa.array(local[bounds[c]:bounds[c + 1]])) for c in range(len(lengths)) if bounds[c + 1] > bounds[c]]
        back = np.empty(len(idx), np.int64)
        back[by_chunk] = np.arange(len(idx))
        plan.append((takes, pa.array(back)))
    return plan


def take_chunked(col: pa.ChunkedArray, rows: np.ndarray, piece: int = 1 << 20, plan: list | None = None) -> pa.ChunkedArray:
    """``col.take(rows)`` a piece of the output at a time, each piece gathered chunk by chunk: Arrow's own
    take first concatenates a chunked string column, a third copy of it at the peak.  ``plan``: a
    :func:`gather_plan` of these rows over chunks of this column's lengths (columns chunked alike share one)."""
    if col.num_chunks <= 1:
        return pa.chunked_array([c.take(pa.array(rows, pa.int64())) for c in col.chunks], col.type)
    chunks = col.chunks
    if plan is None:
        plan = gather_plan([len(c) for c in chunks], rows, piece)
    out = []
    for takes, back in plan:
        gathered = pa.concat_arrays([chunks[c].take(local) for c, local in takes])
        out.append(gathered.take(back))
    return pa.chunked_array(out, col.type)


def millis(col) -> tuple[np.ndarray, np.ndarray]:
    """A timestamp column (any unit, any time zone) as (epoch milliseconds, valid mask)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), bool)
    if pa.types.is_timestamp(col.type):
        col = col.cast(pa.timestamp("ms", tz=col.type.tz)).cast(pa.int64())
    ms = np.asarray(pc.fill_null(col, 0).to_numpy(zero_copy_only=False), np.int64)
    return ms, valid


def as_millis(when) -> int | None:
    """An end time given as epoch ms, a datetime (naive = UTC) or None."""
    if when is None:
        return None
    if isinstance(when, dt.datetime):
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        return int(round(when.timestamp() * 1000))
    return int(when)


def codes(values: pa.ChunkedArray | pa.Array, dictionary: pa.Array) -> np.ndarray:
    """Position of each string in a sorted ``dictionary`` (-1 for null / absent)."""
    return np.asarray(pc.fill_null(pc.index_in(values, value_set=dictionary), -1).to_numpy(), np.int64)


def topic_dictionary(*columns) -> pa.Array:
    """The sorted distinct topic ids of several columns: their codes order like the ids."""
    chunks = [c for col in columns for c in (col.chunks if isinstance(col, pa.ChunkedArray) else [col])]
    allv = pa.chunked_array(chunks, pa.string())
    uniq = pc.unique(allv.combine_chunks() if len(chunks) else pa.array([], pa.string()))
    uniq = uniq.filter(pc.is_valid(uniq))
    return uniq.take(pc.array_sort_indices(uniq))


@dataclass
class History:
    """The partition history, orphans dropped, sorted by (topic, partition, offset), as arrays."""

    table: pa.Table  # the rows in their stored order (read through ``take``)
    order: np.ndarray  # position i of the sorted history is table row order[i]
    topic: np.ndarray  # topic code (sorted dictionary)
    partition: np.ndarray
    offset: np.ndarray
    time: np.ndarray  # valid_from in epoch ms
    time_ok: np.ndarray
    deleted: np.ndarray
    record_type: np.ndarray  # object array of record type names
    leader: np.ndarray  # -1 also for deleted rows
    lrs: np.ndarray
    isr: np.ndarray  # padded matrices (-1) and lengths
    isr_len: np.ndarray
    elr: np.ndarray
    elr_len: np.ndarray
    lke: np.ndarray
    lke_len: np.ndarray
    rf: np.ndarray  # number of replicas
    new_group: np.ndarray  # first row of its partition
    prev: np.ndarray  # index of the partition's previous row (-1 if none)
    next: np.ndarray  # index of the partition's next row (-1 if none)

    @property
    def n(self) -> int:
        return len(self.offset)

    def take(self, names: list[str], rows) -> pa.Table:
        """Columns ``names`` at sorted positions ``rows`` (-1: the first row's values, never read)."""
        at = self.order[np.maximum(np.asarray(rows, np.int64), 0)] if len(self.order) else np.zeros(0, np.int64)
        return self.table.select(list(names)).take(pa.array(at))


def history(table: pa.Table, dictionary: pa.Array) -> History:
    """The history sorted by (topic, partition, offset) -- as NumPy columns and a row order into ``table``:
    the table itself is not sorted (a sorted copy of every column was a third of the audit's time)."""
    if "orphan" in table.column_names:
        table = table.filter(pc.invert(pc.fill_null(table.column("orphan"), False)))
    t = codes(table.column("topic_id"), dictionary)
    part = np_col(table, "partition_id", -1, np.int64)
    off = np_col(table, "offset", None, np.int64)
    # Arrow's stable sort put a null partition last; np.lexsort is stable too
    part_key = np.where(np.asarray(table.column("partition_id").is_null().to_numpy(zero_copy_only=False), bool)
                        if len(part) else np.zeros(0, bool), np.iinfo(np.int64).max, part)
    order = np.lexsort((off, part_key, t)) if len(off) else np.zeros(0, np.int64)
    t, part, off = t[order], part[order], off[order]
    n = len(off)
    time, time_ok = millis(table.column("valid_from_timestamp")) if n else (np.zeros(0, np.int64), np.zeros(0, bool))
    time, time_ok = time[order] if n else time, time_ok[order] if n else time_ok
    deleted = np_col(table, "deleted", False, bool)[order] if n else np.zeros(0, bool)
    new_group = np.ones(n, bool)
    if n:
        new_group[1:] = (t[1:] != t[:-1]) | (part[1:] != part[:-1])
    idx = np.arange(n)
    prev = np.where(new_group, -1, idx - 1)
    nxt = np.full(n, -1, np.int64)
    if n:
        nxt[:-1] = np.where(new_group[1:], -1, idx[1:])
    isr, isr_len = _padded_at(table.column("isr"), order)
    elr, elr_len = _padded_at(table.column("eligible_leader_replicas"), order)
    lke, lke_len = _padded_at(table.column("last_known_elr"), order)
    _, rf = _padded_at(table.column("replicas"), order)
    return History(table=table, order=order, topic=t, partition=part, offset=off, time=time, time_ok=time_ok,
                   deleted=deleted, record_type=_names_at(table.column("record_type"), order),
                   leader=np_col(table, "leader", -1, np.int64)[order],
                   lrs=np_col(table, "leader_recovery_state", 0, np.int64)[order],
                   isr=isr, isr_len=isr_len, elr=elr, elr_len=elr_len, lke=lke, lke_len=lke_len, rf=rf,
                   new_group=new_group, prev=prev, next=nxt)


def _padded_at(col, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``padded(col)`` in the sorted order (matrix, lengths)."""
    if not len(order):
        mat, lens, _ = padded(col)
        return mat, lens
    mat, lens, _ = padded_rows(col, order)
    return np.ascontiguousarray(mat), lens


def _names_at(col, order: np.ndarray) -> np.ndarray:
    """A string column in the sorted order as an object array, each distinct string one Python object."""
    enc = (col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col).dictionary_encode()
    names = np.asarray(enc.dictionary.to_pylist() + [None], dtype=object)
    idx = np.asarray(pc.fill_null(enc.indices, len(enc.dictionary)).to_numpy(zero_copy_only=False), np.int64)
    return names[idx[order]] if len(order) else names[idx]


def unique_rows(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, axis=0, return_inverse=True)`` of an integer matrix, rows in no particular order:
    NumPy's ``axis=0`` sorts the rows as opaque bytes, 10.7 s for 4.5 M rows of four columns (the audit's
    window texts at 1 M partitions) where one sort of a key packed from the columns takes about 1 s.  Each
    column becomes a digit of a mixed-radix key (its span, or its distinct values when the span is wide);
    a key that would pass 2^62 falls back to a sort of the rows by every column."""
    n = len(key)
    if not n:
        return key[:0].copy(), np.zeros(0, np.int64)
    packed, width = np.zeros(n, np.int64), 1
    for j in range(key.shape[1] - 1, -1, -1):
        col = np.asarray(key[:, j], np.int64)
        lo, span = int(col.min()), int(col.max()) - int(col.min()) + 1
        if span * width < 1 << 62:
            digit = col - lo
        else:
            values, digit = np.unique(col, return_inverse=True)
            span = len(values)
            if span * width >= 1 << 62:
                return _unique_rows_sorted(key)
        packed += digit.reshape(-1) * width
        width *= span
    _, inverse = np.unique(packed, return_inverse=True)
    inverse = inverse.reshape(-1)
    first = np.empty(int(inverse.max()) + 1, np.int64)
    first[inverse[::-1]] = np.arange(n - 1, -1, -1)  # the first row of each distinct key
    return key[first], inverse


def _unique_rows_sorted(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort(key.T[::-1])
    s = key[order]
    new = np.ones(len(s), bool)
    new[1:] = (s[1:] != s[:-1]).any(axis=1)
    inverse = np.empty(len(s), np.int64)
    inverse[order] = np.cumsum(new) - 1
    return s[new], inverse


def as_of(keys: np.ndarray, offsets: np.ndarray, q_keys: np.ndarray, q_offsets: np.ndarray,
          strict: bool = False) -> np.ndarray:
    """For each query, the index (into the unsorted rows) of the last row with the same key and an offset
    <= the query's (< with ``strict``); -1 when there is none."""
    order = np.lexsort((offsets, keys))
    packed = keys[order] * BIG + offsets[order]
    q = q_keys * BIG + q_offsets
    j = np.searchsorted(packed, q, side="left" if strict else "right") - 1
    ok = (j >= 0) & (keys[order][np.maximum(j, 0)] == q_keys) if len(order) else np.zeros(len(q), bool)
    return np.where(ok, order[np.maximum(j, 0)] if len(order) else 0, -1)


def runs(pred: np.ndarray, breaks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Maximal runs of consecutive True rows not crossing a row where ``breaks`` is set (a group start):
    (first row, last row) of each run, in row order."""
    n = len(pred)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    before = np.concatenate([[False], pred[:-1]]) & ~breaks
    after = np.concatenate([pred[1:] & ~breaks[1:], [False]])
    return np.flatnonzero(pred & ~before), np.flatnonzero(pred & ~after)


def member(mat: np.ndarray, length: np.ndarray, b: np.ndarray) -> np.ndarray:
    """b[i] among the first length[i] entries of row i of mat."""
    if mat.shape[0] == 0:
        return np.zeros(0, bool)
    pos = np.arange(mat.shape[1])[None, :] < length[:, None]
    return ((mat == b[:, None]) & pos).any(axis=1)
