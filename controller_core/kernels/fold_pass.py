"""The partition fold in one compiled pass (numba): bronze rows → the history table of ``vector/fold.py``.

``fold(records, lay)`` returns exactly what :func:`controller_core.vector.fold.fold_partitions` returns
(same rows, same order, same values, ``fold.HISTORY_SCHEMA``); the NumPy fold stays the reference the
tests compare it with, and ``fold.state_at`` the one definition of a state at a point.  It reads the dense
layout of :mod:`.layout` (the one the invariant pass reads; the pipeline builds it once for both).

Three compiled loops, no Python object in any of them (kernel-design.md):

1. **The fold** (:func:`_fold`), over the records in log order.  A partition's state is one fixed-width
   line: whether it exists, and for each list field (replicas, isr, removing, adding, ELR, LastKnownElr)
   the *row* whose list it holds (-1: ``[]``) -- §1.3 merge replaces a list whole, so a state's list is
   always a recorded list or ``[]`` --, the row of its explicit directory list (-1: MIGRATING per
   replica, §1.2-4), leader, leader recovery state and the two epochs.  PartitionRecord: the partition
   exists, every field is written.  PartitionChangeRecord: merged (§1.3; epochs §1.3-1), or, for a
   partition that does not exist, an *orphan* row with a null state.  RemoveTopicRecord: every existing
   partition of the topic gets a *deleted* row (§1.4).  ClearElrRecord: every existing partition of the
   named topic (the topic id the name has at that point; ``""`` = all) with a non-empty ELR or
   LastKnownElr gets both cleared and its partition epoch bumped (§1.3-5).  Every row written is a copy
   of the state line into preallocated buffers, in log order.
2. **Grouping** (:func:`_group`): a counting sort of those rows by partition (topics in order of first
   appearance, then partition id), stable, so rows stay in log order within a partition.
3. **Columns** (:func:`_columns`), in output order: the integer columns, the list columns as offsets +
   one flat values buffer each (lists copied from the layout's tape), directory codes, and
   ``valid_to_offset`` by a backward scan of each partition's rows (the next non-orphan row's offset).

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
import pyarrow.compute as pc
from numba import njit

from controller_core.codec.arrowutil import from_numpy
from controller_core.kernels import layout as L
from controller_core.kernels.layout import CHANGE, CLEAR_ELR, PARTITION, REMOVE_TOPIC, TOPIC
from controller_core.vector import fold as F

# output record kinds (fold.KIND_NAMES)
_P, _C, _T, _X = F.P, F.C, F.T, F.X
# a row's state: as folded, null because the change record's partition does not exist, null because deleted
_LIVE, _ORPHAN, _DELETED = 0, 1, 2
_DIRS = 6  # the directories' column in a state line's sources (after the six lists of layout.LISTS)
_ELR, _LKE, _REPLICAS = L.E, L.K, L.R


class Fold(NamedTuple):
    history: pa.Table  # fold.HISTORY_SCHEMA
    fallback_partitions: int  # partitions folded by the NumPy fold instead (the whole input, when any)


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
def _emit(m, p, out_kind, i, flag, src, leader, lrs, le, pe, o_part, o_kind, o_row, o_flag, o_src, o_leader,
          o_lrs, o_le, o_pe):
    if m >= len(o_part):
        raise ValueError("fold_pass: more history rows than the bound")
    o_part[m] = p
    o_kind[m] = out_kind
    o_row[m] = i
    o_flag[m] = flag
    if flag == _LIVE:
        for f in range(7):
            o_src[m, f] = src[p, f]
        o_leader[m] = leader[p]
        o_lrs[m] = lrs[p]
        o_le[m] = le[p]
        o_pe[m] = pe[p]
    return m + 1


@njit(cache=True)
def _fold(order, kind, topic, part, name, ints, lists, dir_start, dir_codes, mig, topic_parts, topic_parts_at,
          n_parts, n_names, cap):
    """Pass 1: the rows of the history in log order (see the module docstring).  Returns the row buffers
    and the number of rows."""
    live = np.zeros(n_parts, np.uint8)
    src = np.full((n_parts, 7), -1, np.int32)
    leader = np.zeros(n_parts, np.int32)
    lrs = np.zeros(n_parts, np.int8)
    le = np.zeros(n_parts, np.int32)
    pe = np.zeros(n_parts, np.int32)
    name_topic = np.full(n_names, -1, np.int32)
    o_part = np.empty(cap, np.int32)
    o_kind = np.empty(cap, np.int8)
    o_row = np.empty(cap, np.int32)
    o_flag = np.empty(cap, np.int8)
    o_src = np.empty((cap, 7), np.int32)
    o_leader = np.empty(cap, np.int32)
    o_lrs = np.empty(cap, np.int8)
    o_le = np.empty(cap, np.int32)
    o_pe = np.empty(cap, np.int32)
    m = 0
    for j in range(len(order)):
        i = order[j]
        k = kind[i]
        if k == CHANGE:
            p = part[i]
            if live[p] == 0:  # §1.3-2: a change of a partition that does not exist
                m = _emit(m, p, _C, i, _ORPHAN, src, leader, lrs, le, pe, o_part, o_kind, o_row, o_flag, o_src,
                          o_leader, o_lrs, o_le, o_pe)
                continue
            for f in range(6):  # §1.3 merge: a list is replaced when the record carries it (null: unchanged)
                if lists[i, 2 * f + 1] >= 0:
                    src[p, f] = i
            nd = ints[i, 4]
            if nd >= 0:  # directories written
                src[p, _DIRS] = i if _has_real(i, ints, dir_start, dir_codes, mig) else -1
            elif lists[i, 2 * _REPLICAS + 1] >= 0:  # replicas without directories: explicit only if same length
                d = src[p, _DIRS]
                if d >= 0 and ints[d, 4] != lists[i, 2 * _REPLICAS + 1]:
                    src[p, _DIRS] = -1
            if ints[i, 0] != -2:  # §1.3-1: any leader value bumps the leader epoch
                leader[p] = ints[i, 0]
                le[p] += 1
            if ints[i, 3] != -1:
                lrs[p] = ints[i, 3]
            pe[p] += 1
            m = _emit(m, p, _C, i, _LIVE, src, leader, lrs, le, pe, o_part, o_kind, o_row, o_flag, o_src,
                      o_leader, o_lrs, o_le, o_pe)
        elif k == PARTITION:
            p = part[i]
            live[p] = 1
            for f in range(6):  # a null list is []
                src[p, f] = i if lists[i, 2 * f + 1] >= 0 else -1
            src[p, _DIRS] = i if ints[i, 4] > 0 and _has_real(i, ints, dir_start, dir_codes, mig) else -1
            leader[p] = ints[i, 0]
            le[p] = ints[i, 1]
            pe[p] = ints[i, 2]
            lrs[p] = ints[i, 3]
            m = _emit(m, p, _P, i, _LIVE, src, leader, lrs, le, pe, o_part, o_kind, o_row, o_flag, o_src,
                      o_leader, o_lrs, o_le, o_pe)
        elif k == TOPIC:
            if name[i] >= 0:
                name_topic[name[i]] = topic[i]
        elif k == REMOVE_TOPIC:
            t = topic[i]
            if t < 0:
                continue
            for q in range(topic_parts_at[t], topic_parts_at[t + 1]):
                p = topic_parts[q]
                if live[p] != 0:  # §1.4: the partition is deleted
                    live[p] = 0
                    m = _emit(m, p, _T, i, _DELETED, src, leader, lrs, le, pe, o_part, o_kind, o_row, o_flag,
                              o_src, o_leader, o_lrs, o_le, o_pe)
        elif k == CLEAR_ELR:
            if name[i] < 0:  # "" or absent: every topic
                lo, hi = 0, n_parts
            else:
                t = name_topic[name[i]]
                if t < 0:
                    continue
                lo, hi = topic_parts_at[t], topic_parts_at[t + 1]
            for q in range(lo, hi):
                p = topic_parts[q]
                if live[p] == 0:
                    continue
                e, kk = src[p, _ELR], src[p, _LKE]
                if (e >= 0 and lists[e, 2 * _ELR + 1] > 0) or (kk >= 0 and lists[kk, 2 * _LKE + 1] > 0):
                    src[p, _ELR] = -1  # §1.3-5: both cleared, partition epoch bumped
                    src[p, _LKE] = -1
                    pe[p] += 1
                    m = _emit(m, p, _X, i, _LIVE, src, leader, lrs, le, pe, o_part, o_kind, o_row, o_flag,
                              o_src, o_leader, o_lrs, o_le, o_pe)
    return o_part, o_kind, o_row, o_flag, o_src, o_leader, o_lrs, o_le, o_pe, m


# ------------------------------------------------------------------------------------- 2. grouping
@njit(cache=True)
def _group(o_part, m, rank):
    """Pass 2: output position -> row of pass 1, rows grouped by their partition's ``rank``, stable."""
    n_parts = len(rank)
    at = np.zeros(n_parts + 1, np.int64)
    for r in range(m):
        at[rank[o_part[r]] + 1] += 1
    for q in range(n_parts):
        at[q + 1] += at[q]
    perm = np.empty(m, np.int64)
    for r in range(m):
        g = rank[o_part[r]]
        perm[at[g]] = r
        at[g] += 1
    return perm


# -------------------------------------------------------------------------------------- 3. columns
@njit(cache=True)
def _columns(perm, o_part, o_kind, o_row, o_flag, o_src, o_leader, o_lrs, o_le, o_pe, offsets, ints, lists, tape,
             dir_start, dir_codes, mig, part_topic, part_id):
    """Pass 3: the columns in output order.  List columns as (offsets [7, m + 1], one values array per
    list, the directory codes); valid_to_offset from a backward scan of each partition's rows."""
    m = len(perm)
    topic_code = np.empty(m, np.int32)
    pid = np.empty(m, np.int32)
    offset = np.empty(m, np.int64)
    kind = np.empty(m, np.int8)
    valid = np.empty(m, np.bool_)
    deleted = np.empty(m, np.bool_)
    orphan = np.empty(m, np.bool_)
    leader = np.zeros(m, np.int32)
    lrs = np.zeros(m, np.int8)
    le = np.zeros(m, np.int32)
    pe = np.zeros(m, np.int32)
    off = np.zeros((7, m + 1), np.int64)
    for j in range(m):
        r = perm[j]
        p = o_part[r]
        topic_code[j] = part_topic[p]
        pid[j] = part_id[p]
        offset[j] = offsets[o_row[r]]
        kind[j] = o_kind[r]
        fl = o_flag[r]
        valid[j] = fl == _LIVE
        deleted[j] = fl == _DELETED
        orphan[j] = fl == _ORPHAN
        n_rep = 0
        if fl == _LIVE:
            leader[j] = o_leader[r]
            lrs[j] = o_lrs[r]
            le[j] = o_le[r]
            pe[j] = o_pe[r]
            for f in range(6):
                s = o_src[r, f]
                n = lists[s, 2 * f + 1] if s >= 0 else 0
                off[f, j + 1] = n
            n_rep = off[_REPLICAS, j + 1]
            d = o_src[r, _DIRS]
            off[_DIRS, j + 1] = ints[d, 4] if d >= 0 else n_rep  # MIGRATING per replica
        else:
            for f in range(7):
                off[f, j + 1] = 0
    for f in range(7):
        for j in range(m):
            off[f, j + 1] += off[f, j]
    v_rep = np.empty(off[0, m], np.int32)
    v_isr = np.empty(off[1, m], np.int32)
    v_rm = np.empty(off[2, m], np.int32)
    v_ad = np.empty(off[3, m], np.int32)
    v_elr = np.empty(off[4, m], np.int32)
    v_lke = np.empty(off[5, m], np.int32)
    v_dir = np.empty(off[_DIRS, m], np.int32)
    for j in range(m):
        r = perm[j]
        if o_flag[r] != _LIVE:
            continue
        for f in range(6):
            s = o_src[r, f]
            if s < 0:
                continue
            a = lists[s, 2 * f]
            w = off[f, j]
            n = off[f, j + 1] - w
            if f == 0:
                v_rep[w:w + n] = tape[a:a + n]
            elif f == 1:
                v_isr[w:w + n] = tape[a:a + n]
            elif f == 2:
                v_rm[w:w + n] = tape[a:a + n]
            elif f == 3:
                v_ad[w:w + n] = tape[a:a + n]
            elif f == 4:
                v_elr[w:w + n] = tape[a:a + n]
            else:
                v_lke[w:w + n] = tape[a:a + n]
        d = o_src[r, _DIRS]
        w = off[_DIRS, j]
        n = off[_DIRS, j + 1] - w
        if d >= 0:
            a = dir_start[d]
            v_dir[w:w + n] = dir_codes[a:a + n]
        else:
            v_dir[w:w + n] = mig
    # valid_to_offset: the offset of the partition's next row that is not an orphan (orphans have none)
    valid_to = np.zeros(m, np.int64)
    has_next = np.zeros(m, np.bool_)
    nxt = -1
    for j in range(m - 1, -1, -1):
        if j == m - 1 or o_part[perm[j]] != o_part[perm[j + 1]]:
            nxt = -1
        if orphan[j]:
            continue
        if nxt >= 0:
            valid_to[j] = offset[nxt]
            has_next[j] = True
        nxt = j
    return (topic_code, pid, offset, kind, valid, deleted, orphan, leader, lrs, le, pe, off, v_rep, v_isr, v_rm,
            v_ad, v_elr, v_lke, v_dir, valid_to, has_next)


# ------------------------------------------------------------------------------------------ Python
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
    return False


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


def fold(records: pa.Table, lay: L.Layout | None = None) -> Fold:
    """The partition state history of ``records`` (bronze rows, as ``fold.fold_partitions`` takes them);
    ``lay``: their layout if it is built already (:func:`layout.build` of the same rows)."""
    if records.num_rows == 0:
        return Fold(F.fold_partitions(records), 0)
    if lay is None:
        lay = L.build(records)
    kind = lay.kind
    n_p = int(np.count_nonzero(kind == L.PARTITION))
    n_c = int(np.count_nonzero(kind == L.CHANGE))
    if n_p + n_c == 0:
        return Fold(F.fold_partitions(records), 0)
    if _unsupported(records, lay):
        history = F.fold_partitions(records)
        keys = history.select(["topic_id", "partition_id"]).group_by(["topic_id", "partition_id"]).aggregate([])
        return Fold(history, keys.num_rows)
    L.with_directories(lay, records)
    # a deleted row needs a PartitionRecord before it; a cleared one a record that gave it an ELR (module doc)
    cap = n_p + n_c + (n_p if (kind == L.REMOVE_TOPIC).any() else 0) + (
        n_p + n_c if (kind == L.CLEAR_ELR).any() else 0)
    order = _log_order(lay)
    rows = _fold(order, kind, lay.topic, lay.part, lay.name, lay.ints, lay.lists, lay.dir_start, lay.dir_codes,
                 lay.dir_mig, lay.topic_parts, lay.topic_parts_at, len(lay.part_id), lay.n_names, cap)
    m = rows[-1]
    perm = _group(rows[0], m, _partition_rank(lay, order))
    (topic_code, pid, offset, kind_o, valid, deleted, orphan, leader, lrs, le, pe, off, v_rep, v_isr, v_rm, v_ad,
     v_elr, v_lke, v_dir, valid_to, has_next) = _columns(
        perm, *rows[:-1], lay.offset, lay.ints, lay.lists, lay.tape, lay.dir_start, lay.dir_codes, lay.dir_mig,
        lay.part_topic, lay.part_id)
    if int(off[:, -1].max()) >= 2**31:  # beyond int32 list offsets: the NumPy fold (which chunks strings)
        history = F.fold_partitions(records)
        return Fold(history, len(lay.part_id))
    columns = {"topic_id": F._strings(lay.topic_dict, topic_code, False),
               "partition_id": from_numpy(pid),
               "offset": from_numpy(offset),
               "record_type": F._strings(pa.array(F.KIND_NAMES), kind_o, False)}
    for f, vals in zip(("replicas", "isr", "removing_replicas", "adding_replicas"), (v_rep, v_isr, v_rm, v_ad)):
        columns[f] = F._list_array(off[L.LISTS.index(f)], vals, valid)
    columns.update({"leader": from_numpy(leader, valid), "leader_epoch": from_numpy(le, valid),
                    "partition_epoch": from_numpy(pe, valid), "leader_recovery_state": from_numpy(lrs, valid)})
    columns["directories"] = F._string_lists(off[_DIRS], v_dir, valid, lay.dir_dict, False)
    columns["eligible_leader_replicas"] = F._list_array(off[_ELR], v_elr, valid)
    columns["last_known_elr"] = F._list_array(off[_LKE], v_lke, valid)
    columns["valid_to_offset"] = from_numpy(valid_to, has_next)
    columns["deleted"] = from_numpy(deleted)
    columns["orphan"] = from_numpy(orphan)
    return Fold(pa.Table.from_pydict(columns, schema=F.HISTORY_SCHEMA), 0)


def warm() -> None:
    """Compile the three loops (or load them from numba's cache) with the argument types of a real run."""
    i64, i32, i8 = np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int8)
    rows = _fold(i64, i8, i32, i32, i32, np.zeros((0, 6), np.int64), np.zeros((0, 12), np.int64), i64, i32, 0,
                 i32, np.zeros(1, np.int64), 0, 1, 0)
    perm = _group(rows[0], rows[-1], i64)
    _columns(perm, *rows[:-1], i64, np.zeros((0, 6), np.int64), np.zeros((0, 12), np.int64), i32, i64, i32, 0, i32,
             i32)
