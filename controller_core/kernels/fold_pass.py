"""The partition fold in one compiled pass (numba): bronze rows → the history table of ``vector/fold.py``.

``fold(records, lay)`` returns exactly what :func:`controller_core.vector.fold.fold_partitions` returns
(same rows, same order, same values, ``fold.HISTORY_SCHEMA``); the NumPy fold stays the reference the
tests compare it with, and ``fold.state_at`` the one definition of a state at a point.  It reads the dense
layout of :mod:`.layout` (the one the invariant pass reads; the pipeline builds it once for both).

Two compiled loops, no Python object in either (kernel-design.md):

1. **The fold** (:func:`_fold`), over the records in log order.  A partition's state is one fixed-width
   line of int32: whether it exists, leader, leader recovery state, the two epochs, and for each list
   field (replicas, isr, removing, adding, ELR, LastKnownElr) the (start, length) of its value on the
   layout's tape -- §1.3 merge replaces a list whole, so a state's list is always a recorded list or
   ``[]`` --, then of its explicit directory list (start -1: MIGRATING per replica, §1.2-4).
   PartitionRecord: the partition exists, every field is written.  PartitionChangeRecord: merged (§1.3;
   epochs §1.3-1), or, for a partition that does not exist, an *orphan* row with a null state.
   RemoveTopicRecord: every existing partition of the topic gets a *deleted* row (§1.4).  ClearElrRecord:
   every existing partition of the named topic (the topic id the name has at that point; ``""`` = all) with
   a non-empty ELR or LastKnownElr gets both cleared and its partition epoch bumped (§1.3-5).  Each history
   row is a copy of the state line, written in the order the rows are made (log order: sequential writes),
   with its place in the output: rows are grouped by partition (topics in order of first appearance, then
   partition id) and in log order within one, so the place is the partition's first row + the rows it has
   had so far.  Each partition's row count is known beforehand: one per PartitionRecord /
   PartitionChangeRecord, or, when the log has RemoveTopic or ClearElr records, counted by a first run of
   the same loop that writes nothing.  (Writing each row straight to its place was a random write of the
   whole row: 139 of the loop's 158 ms on a 1.15 M-record log, against 47 ms with the writes in order.)
2. **Columns** (:func:`_columns`: two loops into columns NumPy allocates), over the rows in output order, each
   read from where it was made (fetched some rows ahead): the integer columns, the list columns as int32 offsets
   + one flat values buffer each (lists copied from the tape), directory
   codes, and ``valid_to_offset`` by a backward scan of each partition's rows (the next non-orphan row's
   offset; orphans have none) with that row (``Fold.successor``: the pipeline dates the history with it and
   ``Fold.rows``, no search by offset).

Strings are made once per distinct value: topic ids, record types and directory ids are dictionary codes
turned into Arrow strings by a ``take`` (the NumPy fold's own helpers).

What the pass does not take -- a record of a partition with no topic id or partition id, a negative
partition id, a null where the fold reads a recorded value (leader, leader recovery state, a
PartitionRecord's epochs), a TopicRecord without topic id in a log with ClearElr -- sends the input to
the NumPy fold, whose partitions are counted (``Fold.fallback_partitions``; 0 on every log the tests and
benchmarks read).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
from numba import njit

from controller_core import numba_cache  # noqa: F401  (kernels shipped in a zip cache across jobs)
from controller_core.codec.arrowutil import from_numpy
from controller_core.kernels import layout as L
from controller_core.kernels.layout import CHANGE, CLEAR_ELR, PARTITION, REMOVE_TOPIC, TOPIC
from controller_core.kernels.prefetch import prefetch
from controller_core.vector import fold as F

# output record kinds (fold.KIND_NAMES)
_P, _C, _T, _X = F.P, F.C, F.T, F.X
# a row's state: as folded, null because the change record's partition does not exist, null because deleted
_LIVE, _ORPHAN, _DELETED = 0, 1, 2
_DIRS = 6  # the directories' column in a state line's sources (after the six lists of layout.LISTS)
_ELR, _LKE, _REPLICAS = L.E, L.K, L.R
_AHEAD = 32  # rows between fetching a row from where it was made and reading it


_ORPHANS = pa.schema([F.HISTORY_SCHEMA.field(c) for c in ("offset", "topic_id", "partition_id")])


class Fold(NamedTuple):
    history: pa.Table  # fold.HISTORY_SCHEMA
    fallback_partitions: int  # partitions folded by the NumPy fold instead (the whole input, when any)
    rows: np.ndarray | None = None  # per history row, the input row it comes from (None: the NumPy fold's table)
    # with ``rows``: the history rows of the PartitionChangeRecords that are not orphans (what explain judges),
    # ascending, and per history row the row whose offset is its valid_to_offset (-1: none)
    changes: np.ndarray | None = None
    successor: np.ndarray | None = None
    # with ``state_only``: offset, topic_id, partition_id of the change records of partitions that did not exist
    orphans: pa.Table | None = None


# A partition's state line (int32): whether it exists, leader, leader recovery state, the two epochs, and
# (tape start, length) of each list of layout.LISTS, then of its explicit directory list (start -1: MIGRATING
# per replica).  A history row: the partition, its kind and state flag, then the state line's values; its
# offset goes to a separate int64 array.
_S_LIVE, _S_LEADER, _S_LRS, _S_LE, _S_PE, _S_LISTS = 0, 1, 2, 3, 4, 5
_S_WIDTH = _S_LISTS + 14
_R_PART, _R_KIND, _R_FLAG, _R_STATE = 0, 1, 2, 3
_R_WIDTH = _R_STATE + _S_WIDTH - 1  # the state line without its "exists" word


# ----------------------------------------------------------------------------------------- 1. fold
@njit(cache=True, inline="always")
def _has_real(row, ints, dir_start, dir_codes, mig):
    """Row ``row``'s directories name a directory other than MIGRATING (§1.2-4)."""
    n = ints[row, 4]
    s = dir_start[row]
    for q in range(n):
        if dir_codes[s + q] != mig:
            return True
    return False


@njit(cache=True, inline="always")
def _set_dirs(S, p, i, ints, dir_start, dir_codes, mig):
    """Directories written by row ``i``: explicit if they name a real directory, else MIGRATING per replica."""
    if _has_real(i, ints, dir_start, dir_codes, mig):
        S[p, _S_LISTS + 12] = dir_start[i]
        S[p, _S_LISTS + 13] = ints[i, 4]
    else:
        S[p, _S_LISTS + 12] = -1
        S[p, _S_LISTS + 13] = 0


@njit(cache=True, inline="always")
def _emit(S, p, kind, flag, i, offsets, at, R, O, Src, Dest, count):
    """One history row of partition ``p`` from layout row ``i``: counted (``count``), or written at the next row
    of ``R`` (rows in the order they are made: a write where the partition's rows go was a random write of the
    whole row, two thirds of the loop), with its place in the output (the partition's next position) in
    ``Dest``, its offset in ``O`` and ``i`` in ``Src``.  ``Dest[len(Dest) - 1]`` counts the rows written."""
    w = at[p]
    at[p] = w + 1
    if count:  # the state line's own words beyond the history's: the input row and kind of its latest row
        S[p, _S_WIDTH] = i
        S[p, _S_WIDTH + 1] = kind
        return
    c = Dest[len(Dest) - 1]
    Dest[len(Dest) - 1] = c + 1
    Dest[c] = w
    R[c, _R_PART] = p
    R[c, _R_KIND] = kind
    R[c, _R_FLAG] = flag
    O[c] = offsets[i]
    Src[c] = i
    if flag == _LIVE:
        for f in range(1, _S_WIDTH):
            R[c, _R_STATE + f - 1] = S[p, f]


@njit(cache=True)
def _fold(order, kind, topic, part, name, ints, lists, offsets, dir_start, dir_codes, mig, topic_parts,
          topic_parts_at, n_names, at, R, O, Src, Dest, orphans, count):
    """Pass 1 (see the module docstring), in log order.  ``count``: only count each partition's rows into
    ``at``, the orphans' input rows into ``orphans`` (their number in its last word) and each state line's
    latest row (:func:`_emit`); else write each row into ``R`` (in the order they are made) and its output place
    ``at[p]`` (the partition's next output position) into ``Dest``.  Returns the state lines at the end."""
    n_parts = len(at)
    S = np.zeros((n_parts, _S_WIDTH + 2), np.int32)
    name_topic = np.full(n_names, -1, np.int32)
    for j in range(len(order)):
        i = order[j]
        k = kind[i]
        if k == CHANGE:
            p = part[i]
            if S[p, _S_LIVE] == 0:  # §1.3-2: a change of a partition that does not exist
                if count:
                    c = orphans[len(orphans) - 1]
                    orphans[c] = i
                    orphans[len(orphans) - 1] = c + 1
                _emit(S, p, _C, _ORPHAN, i, offsets, at, R, O, Src, Dest, count)
                continue
            for f in range(6):  # §1.3 merge: a list is replaced when the record carries it (null: unchanged)
                n = lists[i, 2 * f + 1]
                if n >= 0:
                    S[p, _S_LISTS + 2 * f] = lists[i, 2 * f]
                    S[p, _S_LISTS + 2 * f + 1] = n
            if ints[i, 4] >= 0:  # directories written
                _set_dirs(S, p, i, ints, dir_start, dir_codes, mig)
            else:
                n = lists[i, 2 * _REPLICAS + 1]  # replicas without directories: explicit only if same length
                if n >= 0 and S[p, _S_LISTS + 12] >= 0 and S[p, _S_LISTS + 13] != n:
                    S[p, _S_LISTS + 12] = -1
                    S[p, _S_LISTS + 13] = 0
            if ints[i, 0] != -2:  # §1.3-1: any leader value bumps the leader epoch
                S[p, _S_LEADER] = ints[i, 0]
                S[p, _S_LE] += 1
            if ints[i, 3] != -1:
                S[p, _S_LRS] = ints[i, 3]
            S[p, _S_PE] += 1
            _emit(S, p, _C, _LIVE, i, offsets, at, R, O, Src, Dest, count)
        elif k == PARTITION:
            p = part[i]
            S[p, _S_LIVE] = 1
            S[p, _S_LEADER] = ints[i, 0]
            S[p, _S_LRS] = ints[i, 3]
            S[p, _S_LE] = ints[i, 1]
            S[p, _S_PE] = ints[i, 2]
            for f in range(6):  # a null list is []
                n = lists[i, 2 * f + 1]
                S[p, _S_LISTS + 2 * f] = lists[i, 2 * f] if n >= 0 else 0
                S[p, _S_LISTS + 2 * f + 1] = n if n >= 0 else 0
            _set_dirs(S, p, i, ints, dir_start, dir_codes, mig)
            _emit(S, p, _P, _LIVE, i, offsets, at, R, O, Src, Dest, count)
        elif k == TOPIC:
            if name[i] >= 0:
                name_topic[name[i]] = topic[i]
        elif k == REMOVE_TOPIC:
            t = topic[i]
            if t < 0:
                continue
            for q in range(topic_parts_at[t], topic_parts_at[t + 1]):
                p = topic_parts[q]
                if S[p, _S_LIVE] != 0:  # §1.4: the partition is deleted
                    S[p, _S_LIVE] = 0
                    _emit(S, p, _T, _DELETED, i, offsets, at, R, O, Src, Dest, count)
        elif k == CLEAR_ELR:
            lo, hi = 0, n_parts  # "" or absent: every topic
            if name[i] >= 0:
                t = name_topic[name[i]]
                if t < 0:
                    continue
                lo, hi = topic_parts_at[t], topic_parts_at[t + 1]
            for q in range(lo, hi):
                p = topic_parts[q]
                if S[p, _S_LIVE] != 0 and (S[p, _S_LISTS + 2 * _ELR + 1] > 0 or S[p, _S_LISTS + 2 * _LKE + 1] > 0):
                    S[p, _S_LISTS + 2 * _ELR + 1] = 0  # §1.3-5: both cleared, partition epoch bumped
                    S[p, _S_LISTS + 2 * _LKE + 1] = 0
                    S[p, _S_PE] += 1
                    _emit(S, p, _X, _LIVE, i, offsets, at, R, O, Src, Dest, count)
    return S


# -------------------------------------------------------------------------------------- 2. columns
@njit(cache=True, inline="always")
def _copy(out, w, n, src, a):
    for q in range(n):
        out[w + q] = src[a + q]


# The columns are allocated by NumPy, not inside the loops: NumPy asks the kernel for huge pages on large arrays,
# and the pages an array inside a compiled loop got were faulted in 4 kB at a time (2.7x the time for the same
# bytes; the columns are ~150 bytes per history row).
@njit(cache=True)
def _row_columns(R, O, Dest, rowof, part_topic, part_id, topic_code, pid, part, kind, valid, deleted, orphan, leader,
                 lrs, le, pe, offset, src, off):
    """Pass 2a: ``rowof``, per output row the row of ``R`` that goes there (``Dest`` inverted); the integer columns of
    the rows in output order (a read from where each row was made, fetched some rows ahead), each list's tape start
    (``src``, the directories' -1 for MIGRATING per replica) and the list columns' offsets [7, m + 1].  Returns the
    lists' totals."""
    m = len(rowof)
    for c in range(m):
        rowof[Dest[c]] = c
    L0 = _R_STATE + _S_LISTS - 1
    # the seven running totals in locals, not an array: the compiler cannot tell an array apart from the columns
    # written beside it, and reloaded it after every write
    t0 = t1 = t2 = t3 = t4 = t5 = t6 = np.int64(0)
    for f in range(7):
        off[f, 0] = 0
    for j in range(m):
        if j + _AHEAD < m:
            r = rowof[j + _AHEAD]
            prefetch(R, r * _R_WIDTH)
            prefetch(R, r * _R_WIDTH + _R_WIDTH - 1)
            prefetch(O, r)
        r = rowof[j]
        offset[j] = O[r]
        p = R[r, _R_PART]
        part[j] = p
        topic_code[j] = part_topic[p]
        pid[j] = part_id[p]
        kind[j] = R[r, _R_KIND]
        fl = R[r, _R_FLAG]
        live = fl == _LIVE
        valid[j] = live
        deleted[j] = fl == _DELETED
        orphan[j] = fl == _ORPHAN
        if live:
            leader[j] = R[r, _R_STATE + _S_LEADER - 1]
            lrs[j] = R[r, _R_STATE + _S_LRS - 1]
            le[j] = R[r, _R_STATE + _S_LE - 1]
            pe[j] = R[r, _R_STATE + _S_PE - 1]
            for f in range(6):
                src[j, f] = R[r, L0 + 2 * f]
            t0 += R[r, L0 + 1]
            t1 += R[r, L0 + 3]
            t2 += R[r, L0 + 5]
            t3 += R[r, L0 + 7]
            t4 += R[r, L0 + 9]
            t5 += R[r, L0 + 11]
            d = R[r, L0 + 12]
            src[j, _DIRS] = d
            t6 += R[r, L0 + 13] if d >= 0 else R[r, L0 + 1]  # MIGRATING per replica
        else:
            leader[j] = 0
            lrs[j] = 0
            le[j] = 0
            pe[j] = 0
        off[0, j + 1] = t0
        off[1, j + 1] = t1
        off[2, j + 1] = t2
        off[3, j + 1] = t3
        off[4, j + 1] = t4
        off[5, j + 1] = t5
        off[6, j + 1] = t6
    total = np.empty(7, np.int64)  # int32 list offsets: the caller checks that no total reaches 2**31
    total[0], total[1], total[2], total[3], total[4], total[5], total[6] = t0, t1, t2, t3, t4, t5, t6
    return total


@njit(cache=True)
def _list_values(src, off, valid, tape, dir_codes, mig, v_rep, v_isr, v_rm, v_ad, v_elr, v_lke, v_dir, dirs, part,
                 orphan, offset, valid_to, has_next, succ):
    """Pass 2b: each list column's values, copied from the tape (fetched some rows ahead: a partition's lists
    were written by records scattered over the log; the directories' only if ``dirs``); then :func:`_valid_to`."""
    m = len(valid)
    for j in range(m):
        if j + _AHEAD < m and valid[j + _AHEAD]:
            for f in range(6):
                prefetch(tape, src[j + _AHEAD, f])
        if not valid[j]:
            continue
        _copy(v_rep, off[0, j], off[0, j + 1] - off[0, j], tape, src[j, 0])
        _copy(v_isr, off[1, j], off[1, j + 1] - off[1, j], tape, src[j, 1])
        _copy(v_rm, off[2, j], off[2, j + 1] - off[2, j], tape, src[j, 2])
        _copy(v_ad, off[3, j], off[3, j + 1] - off[3, j], tape, src[j, 3])
        _copy(v_elr, off[4, j], off[4, j + 1] - off[4, j], tape, src[j, 4])
        _copy(v_lke, off[5, j], off[5, j + 1] - off[5, j], tape, src[j, 5])
        if not dirs:
            continue
        w = off[_DIRS, j]
        n = off[_DIRS, j + 1] - w
        if src[j, _DIRS] >= 0:
            _copy(v_dir, w, n, dir_codes, src[j, _DIRS])
        else:
            for q in range(n):
                v_dir[w + q] = mig
    _valid_to(part, orphan, offset, valid_to, has_next, succ)


@njit(cache=True, inline="always")
def _valid_to(part, orphan, offset, valid_to, has_next, succ):
    """Pass 2c: valid_to_offset, the offset of the partition's next row that is not an orphan (orphans have none),
    and that row, by a backward scan of each partition's rows."""
    m = len(part)
    nxt = -1
    for j in range(m - 1, -1, -1):
        if j == m - 1 or part[j] != part[j + 1]:
            nxt = -1
        valid_to[j] = 0
        has_next[j] = False
        succ[j] = -1
        if orphan[j]:
            continue
        if nxt >= 0:
            valid_to[j] = offset[nxt]
            has_next[j] = True
            succ[j] = nxt
        nxt = j


def _columns(R: np.ndarray, O: np.ndarray, Dest: np.ndarray, rowof: np.ndarray, lay: L.Layout, dirs: bool = True):
    """Pass 2 (2a, 2b, 2c) into NumPy-allocated columns (``rowof`` too; the directories' values only if ``dirs``);
    None when a list column's values reach 2**31 (int32 offsets: the caller folds with the NumPy fold)."""
    m = len(rowof)
    e = np.empty
    topic_code, pid, part = e(m, np.int32), e(m, np.int32), e(m, np.int32)
    kind, valid, deleted, orphan = e(m, np.int8), e(m, np.bool_), e(m, np.bool_), e(m, np.bool_)
    leader, lrs, le, pe, offset = e(m, np.int32), e(m, np.int8), e(m, np.int32), e(m, np.int32), e(m, np.int64)
    src, off = e((m, 7), np.int32), e((7, m + 1), np.int32)
    total = _row_columns(R, O, Dest, rowof, lay.part_topic, lay.part_id, topic_code, pid, part, kind, valid, deleted,
                         orphan, leader, lrs, le, pe, offset, src, off)
    if total.max(initial=0) >= 2**31:
        return None
    values = [e(int(t) if k != _DIRS or dirs else 0, np.int32) for k, t in enumerate(total)]
    valid_to, has_next, succ = e(m, np.int64), e(m, np.bool_), e(m, np.int64)
    _list_values(src, off, valid, lay.tape, lay.dir_codes, lay.dir_mig, *values, dirs, part, orphan, offset, valid_to,
                 has_next, succ)
    return (topic_code, pid, kind, valid, deleted, orphan, leader, lrs, le, pe, offset, off, *values, valid_to,
            has_next, succ)


# ------------------------------------------------------------------------------------------ Python
def _list_array(off: np.ndarray, vals: np.ndarray, valid: np.ndarray) -> pa.Array:
    """list<int32> over the int32 offsets and values as they are (no copy); null where not ``valid``."""
    return pa.ListArray.from_arrays(from_numpy(off), from_numpy(vals), mask=None if valid.all() else from_numpy(~valid))


def _not_null_where(records: pa.Table, column: str, rows: np.ndarray) -> bool:
    col = records.column(column)
    if col.null_count == 0:
        return True
    return not (~col.is_valid().to_numpy(zero_copy_only=False) & rows).any()


def _unsupported(records: pa.Table, lay: L.Layout) -> bool:
    """The input has something the pass does not take (see the module docstring)."""
    kind = lay.kind
    is_p = kind == L.PARTITION
    is_part = is_p | (kind == L.CHANGE)
    if (lay.part[is_part] < 0).any():
        return True
    for column in ("leader", "leader_recovery_state"):
        if not _not_null_where(records, column, is_part):
            return True
    for column in ("leader_epoch", "partition_epoch"):
        if not _not_null_where(records, column, is_p):
            return True
    if (kind == L.CLEAR_ELR).any() and (lay.topic[kind == L.TOPIC] < 0).any():
        return True
    return len(lay.tape) >= 2**31 or len(lay.dir_codes) >= 2**31  # state lines hold int32 starts


def _log_order(lay: L.Layout) -> np.ndarray:
    """The rows in the order the fold reads them: by offset, stably (the input order when it already is)."""
    offset = lay.offset
    if len(offset) > 1 and (offset[1:] < offset[:-1]).any():
        return np.argsort(offset, kind="stable")
    return np.arange(len(offset), dtype=np.int64)


def _partition_rank(lay: L.Layout, order: np.ndarray) -> np.ndarray:
    """Output position of each layout partition: topics in order of first appearance in log order, then
    partition id.  The layout numbers topics by first appearance in input order: the same unless the input
    was out of offset order."""
    n_parts = len(lay.part_id)
    if np.array_equal(order, np.arange(len(order))):
        return np.arange(n_parts, dtype=np.int64)  # layout partitions are sorted by (topic, partition id)
    n_topics = len(lay.topic_ids)
    first = np.full(n_topics, len(order), np.int64)
    t = lay.topic[order]
    has = t >= 0
    np.minimum.at(first, t[has], np.flatnonzero(has))
    topic_rank = np.empty(n_topics, np.int64)
    topic_rank[np.argsort(first, kind="stable")] = np.arange(n_topics)
    by = np.lexsort((lay.part_id, topic_rank[lay.part_topic]))
    rank = np.empty(n_parts, np.int64)
    rank[by] = np.arange(n_parts)
    return rank


def fold(records: pa.Table, lay: L.Layout | None = None, timings: dict | None = None,
         state_only: bool = False, columns: frozenset[str] | None = None) -> Fold:
    """The partition state history of ``records`` (bronze rows, as ``fold.fold_partitions`` takes them);
    ``lay``: their layout if it is built already (:func:`layout.build` of the same rows).  ``timings``, if
    given, receives the CPU seconds of each step.

    ``state_only``: only the state at the end -- ``fold.state_at`` of the history, each existing partition's
    latest row, in the history's order --, made from the fold's state lines without writing a row per record
    (what ``describe`` shows); ``Fold.orphans`` holds the change records of partitions that did not exist, the
    history's orphan rows, which that table leaves out.  ``rows`` and ``successor`` describe its rows as for a
    history (no row has a successor); ``changes`` is empty.

    ``columns``: the history's columns a caller reads, when not all (``verify`` judges the changes and keeps no
    history): the others are not made -- the directories' and record types' strings are most of a history's
    bytes, and on a command's first call fresh bytes cost more than the loops that write them.  A table the NumPy
    fold made has every column."""
    clock = F._Clock(timings)
    if records.num_rows == 0:
        return _whole(F.fold_partitions(records), 0, state_only)
    if lay is None:
        lay = L.build(records)
        clock("layout")
    kind = lay.kind
    is_part = (kind == L.PARTITION) | (kind == L.CHANGE)
    if not is_part.any():
        return _whole(F.fold_partitions(records), 0, state_only)
    L.with_directories(lay, records)
    clock("directory codes")
    if _unsupported(records, lay):
        history = F.fold_partitions(records)
        keys = history.select(["topic_id", "partition_id"]).group_by(["topic_id", "partition_id"]).aggregate([])
        return _whole(history, keys.num_rows, state_only)
    order = _log_order(lay)
    n_parts = len(lay.part_id)
    args = (order, kind, lay.topic, lay.part, lay.name, lay.ints, lay.lists, lay.offset, lay.dir_start, lay.dir_codes,
            lay.dir_mig, lay.topic_parts, lay.topic_parts_at, lay.n_names)
    rank = _partition_rank(lay, order)
    if state_only:
        return _state(records, lay, args, rank, clock)
    if ((kind == L.REMOVE_TOPIC) | (kind == L.CLEAR_ELR)).any():  # rows beyond one per record: count them
        count = np.zeros(n_parts, np.int64)
        none = np.zeros(1, np.int64)
        _fold(*args, count, np.zeros((0, _R_WIDTH), np.int32), none, none, none,
              np.zeros(int((kind == L.CHANGE).sum()) + 1, np.int64), True)
    else:
        count = np.bincount(lay.part[is_part], minlength=n_parts).astype(np.int64)
    clock("checks, log order, row counts")
    by_rank = np.empty(n_parts, np.int64)
    by_rank[rank] = count
    at = (np.cumsum(by_rank) - by_rank)[rank]  # each partition's first output row
    m = int(count.sum())
    R = np.empty((m, _R_WIDTH), np.int32)
    O = np.empty(m, np.int64)
    Src = np.empty(m, np.int64)
    Dest = np.empty(m + 1, np.int64)
    Dest[m] = 0
    _fold(*args, at, R, O, Src, Dest, np.zeros(1, np.int64), False)
    clock("fold loop (rows in the order made)")
    return _history(records, lay, R, O, Src, Dest, clock, columns=columns)


def _history(records: pa.Table, lay: L.Layout, R: np.ndarray, O: np.ndarray, Src: np.ndarray, Dest: np.ndarray,
             clock, orphans: pa.Table | None = None, columns: frozenset[str] | None = None) -> Fold:
    """The :class:`Fold` of the rows ``R`` (made in the order of ``Src``, going to the places ``Dest``); its table
    has ``columns`` (None: all)."""
    m = len(O)
    rowof = np.empty(m, np.int64)
    wanted = F.HISTORY_SCHEMA.names if columns is None else [c for c in F.HISTORY_SCHEMA.names if c in columns]
    cols = _columns(R, O, Dest, rowof, lay, "directories" in wanted)
    del R
    if cols is None:  # beyond int32 list offsets: the NumPy fold (which chunks strings)
        return _whole(F.fold_partitions(records), len(lay.part_id), orphans is not None)
    (topic_code, pid, kind_o, valid, deleted, orphan, leader, lrs, le, pe, O, off, v_rep, v_isr, v_rm, v_ad, v_elr,
     v_lke, v_dir, valid_to, has_next, succ) = cols
    Src = Src[rowof]
    clock("columns loops (output order)")
    made = {  # each column made only when asked for
        "topic_id": lambda: F._strings(lay.topic_dict, topic_code, False),
        "partition_id": lambda: from_numpy(pid),
        "offset": lambda: from_numpy(O),
        "record_type": lambda: F._strings(pa.array(F.KIND_NAMES), kind_o, False),
        **{f: (lambda vals=vals, at=L.LISTS.index(f): _list_array(off[at], vals, valid))
           for f, vals in zip(("replicas", "isr", "removing_replicas", "adding_replicas", "eligible_leader_replicas",
                               "last_known_elr"), (v_rep, v_isr, v_rm, v_ad, v_elr, v_lke))},
        "leader": lambda: from_numpy(leader, valid),
        "leader_epoch": lambda: from_numpy(le, valid),
        "partition_epoch": lambda: from_numpy(pe, valid),
        "leader_recovery_state": lambda: from_numpy(lrs, valid),
        "directories": lambda: F._string_lists(off[_DIRS], v_dir, valid, lay.dir_dict, False),
        "valid_to_offset": lambda: from_numpy(valid_to, has_next),
        "deleted": lambda: from_numpy(deleted),
        "orphan": lambda: from_numpy(orphan),
    }
    out = pa.Table.from_pydict({c: made[c]() for c in wanted},
                               schema=pa.schema([F.HISTORY_SCHEMA.field(c) for c in wanted]))
    clock("Arrow columns (strings by take)")
    if orphans is not None:
        return Fold(out, 0, Src, np.zeros(0, np.int64), succ, orphans)
    changes = np.flatnonzero((kind_o == _C) & ~orphan)
    return Fold(out, 0, Src, changes, succ)


def _state(records: pa.Table, lay: L.Layout, args: tuple, rank: np.ndarray, clock) -> Fold:
    """``fold(state_only=True)``: the loop counts (writing no row) and leaves each partition's state line at the
    end with the input row and kind of its latest row; the lines of the partitions that exist become one history
    row each, in the history's order, through the history's own column loops."""
    n_parts = len(lay.part_id)
    orphans = np.zeros(int((lay.kind == L.CHANGE).sum()) + 1, np.int64)
    none = np.zeros(1, np.int64)
    S = _fold(*args, np.zeros(n_parts, np.int64), np.zeros((0, _R_WIDTH), np.int32), none, none, none, orphans, True)
    clock("fold loop (state lines only)")
    live = np.flatnonzero(S[:, _S_LIVE] != 0)
    live = live[np.argsort(rank[live], kind="stable")]
    m = len(live)
    R = np.empty((m, _R_WIDTH), np.int32)
    R[:, _R_PART] = live
    R[:, _R_KIND] = S[live, _S_WIDTH + 1]
    R[:, _R_FLAG] = _LIVE
    R[:, _R_STATE:] = S[live, 1:_S_WIDTH]
    Src = S[live, _S_WIDTH].astype(np.int64)
    Dest = np.arange(m + 1, dtype=np.int64)
    Dest[m] = m
    o_rows = orphans[:orphans[-1]]
    o_part = lay.part[o_rows]
    o_rows = o_rows[np.lexsort((lay.offset[o_rows], rank[o_part]))]  # the history's order: by partition, then offset
    o_part = lay.part[o_rows]
    orphan_table = pa.table({"offset": from_numpy(lay.offset[o_rows].astype(np.int64)),
                             "topic_id": F._strings(lay.topic_dict, lay.part_topic[o_part], False),
                             "partition_id": from_numpy(lay.part_id[o_part].astype(np.int32))}, schema=_ORPHANS)
    return _history(records, lay, R, lay.offset[Src].astype(np.int64), Src, Dest, clock, orphan_table)


def _whole(history: pa.Table, fallback: int, state_only: bool) -> Fold:
    """A :class:`Fold` of the NumPy fold's history (or, ``state_only``, of its state at the end)."""
    if not state_only:
        return Fold(history, fallback)
    orphans = history.filter(history.column("orphan")).select(["offset", "topic_id", "partition_id"])
    return Fold(F.state_at(history), fallback, orphans=orphans)


def warm() -> None:
    """Compile the loops (or load them from numba's cache) with the argument types of a real run."""
    i64, i32, i8 = np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int8)
    R = np.zeros((0, _R_WIDTH), np.int32)
    for count in (True, False):
        _fold(i64, i8, i32, i32, i32, np.zeros((0, 6), np.int32), np.zeros((0, 12), np.int32), i64, i64, i32, 0,
              i32, np.zeros(1, np.int64), 1, i64, R, i64, i64, np.zeros(1, np.int64), np.zeros(1, np.int64), count)
    lay = L.Layout(**dict.fromkeys(L.Layout.__dataclass_fields__))
    lay.part_topic, lay.part_id, lay.tape, lay.dir_codes, lay.dir_mig = i32, i32, i32, i32, 0
    for dirs in (True, False):
        _columns(R, i64, np.zeros(1, np.int64), i64, lay, dirs)
    # the layout's compiled loop (list references), as it is called: offsets read-only over an Arrow buffer
    L._refs(np.frombuffer(bytes(4), np.int32), np.zeros(0, np.bool_), False, np.zeros((0, 12), np.int32), 0, 0, 0)
    L._refs(np.frombuffer(bytes(4), np.int32), np.zeros(0, np.bool_), False, np.zeros((0, 2), np.int32), 0, 0, 0)
    offs, none = np.frombuffer(bytes(4), np.int32), np.zeros(0, np.bool_)
    L._refs_rows(*[offs] * 6, *[none] * 6, np.zeros(6, np.bool_), np.zeros((0, 12), np.int32), 0, np.zeros(6, np.int64))
