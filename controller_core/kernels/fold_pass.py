"""The partition fold in one compiled pass (numba): bronze rows → the history table of ``vector/fold.py``.

``fold(records, lay)`` returns exactly what :func:`controller_core.vector.fold.fold_partitions` returns
(same rows, same order, same values; its strings dictionary-encoded, ``fold.HISTORY_ENCODED``, as
``fold_partitions(..., dictionary_strings=True)`` gives them); the NumPy fold stays the reference the
tests compare it with, and ``fold.state_at`` the one definition of a state at a point.  It reads the dense
layout of :mod:`.layout` (the one the invariant pass reads; the pipeline builds it once for both).

Two compiled loops, no Python object in either (kernel-design.md):

1. **The fold** (:func:`_fold`), partition after partition in output order -- rows are grouped by partition
   (topics in order of first appearance, then partition id) and in log order within one --, so each history row
   is written where it goes, one after the other.  A counting sort gives each partition its records in log order
   (:func:`_by_partition`); the few topic-level records (RemoveTopic, ClearElr: :func:`_topic_events`) are merged
   in by their place in the log.  A partition's state is a handful of locals: whether it exists, leader, leader
   recovery state, the two epochs, and for each list field (replicas, isr, removing, adding, ELR,
   LastKnownElr) the (start, length) of its value on the layout's tape -- §1.3 merge replaces a list whole, so
   a state's list is always a recorded list or ``[]`` --, then of its explicit directory list (start -1:
   MIGRATING per replica, §1.2-4).  PartitionRecord: the partition exists, every field is written.
   PartitionChangeRecord: merged (§1.3; epochs §1.3-1), or, for a partition that does not exist, an *orphan*
   row with a null state.  RemoveTopicRecord: an existing partition of the topic gets a *deleted* row (§1.4).
   ClearElrRecord: an existing partition of the named topic (the topic id the name has at that point; ``""`` =
   all) with a non-empty ELR or LastKnownElr gets both cleared and its partition epoch bumped (§1.3-5).  Each
   row gets the integer columns, each list's tape start and the list columns' running offsets.  The records are
   read in an order the log does not follow: their layout rows are fetched some records ahead.  (The loop
   before this one went in log order and kept every row it made in a second array, rows reordered afterwards:
   writing each row straight to its place from log order was a random write of the whole row.)
2. **List values** (:func:`_list_values`), over the rows in output order: each list column's values copied from
   the tape (fetched some rows ahead), directory codes, and ``valid_to_offset`` by a backward scan of each
   partition's rows (the next non-orphan row's offset; orphans have none) with that row (``Fold.successor``:
   the pipeline dates the history with it and ``Fold.rows``, no search by offset).

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
from controller_core.kernels.layout import PARTITION, REMOVE_TOPIC, TOPIC
from controller_core.kernels.borrow import borrow
from controller_core.kernels.borrow import keep as hold
from controller_core.kernels.prefetch import prefetch
from controller_core.vector import fold as F

# output record kinds (fold.KIND_NAMES)
_P, _C, _T, _X = F.P, F.C, F.T, F.X
# a row's state: as folded, null because the change record's partition does not exist, null because deleted
_LIVE, _ORPHAN, _DELETED = 0, 1, 2
_DIRS = 6  # the directories' column among a row's lists (after the six lists of layout.LISTS)
_NLISTS = 7
_ELR, _LKE, _REPLICAS = L.E, L.K, L.R
# records (rows) between fetching a record's layout row (a row's list values) and reading it: the fold's loop on a
# 1.15 M-record log took 56 ms fetching 32 records ahead, 35 ms from 256 on (the list values' 34 -> 30 ms)
_AHEAD = 256


_ORPHANS = pa.schema([F.HISTORY_SCHEMA.field(c) for c in ("offset", "topic_id", "partition_id")])
_KIND_NAMES = pa.array(F.KIND_NAMES)  # the record types' dictionary


class Fold(NamedTuple):
    history: pa.Table  # fold.HISTORY_ENCODED
    fallback_partitions: int  # partitions folded by the NumPy fold instead (the whole input, when any)
    rows: np.ndarray | None = None  # per history row, the input row it comes from (None: the NumPy fold's table)
    # with ``rows``: the history rows of the PartitionChangeRecords that are not orphans (what explain judges),
    # ascending, and per history row the row whose offset is its valid_to_offset (-1: none; None when the caller
    # asked for no valid_to_offset column)
    changes: np.ndarray | None = None
    successor: np.ndarray | None = None
    # offset, topic_id, partition_id of the change records of partitions that did not exist, in the history's order
    # (its orphan rows; the state-only table has none)
    orphans: pa.Table | None = None
    # with ``rows``: where each history row's lists are on the layout's tape: (starts int32 (rows, 7): the six lists
    # of layout.LISTS, then the directories; running lengths int32 (7, rows + 1)); 0 / empty for a row without state
    refs: tuple | None = None


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
def written_lists(st, lists, i):
    """A PartitionRecord's lists into the state ``st`` ((tape start, length) of the six lists of layout.LISTS): every
    list written, a null one as ``[]``.  ``st`` and ``lists`` borrowed views (kernels/borrow.py)."""
    for f in range(6):
        n = lists[i, 2 * f + 1]
        st[2 * f] = lists[i, 2 * f] if n >= 0 else 0
        st[2 * f + 1] = n if n >= 0 else 0


@njit(cache=True, inline="always")
def merged_lists(st, lists, i):
    """§1.3 merge of a PartitionChangeRecord's lists into ``st``: a list is replaced when the record carries it
    (null: unchanged).  As :func:`written_lists`."""
    for f in range(6):
        n = lists[i, 2 * f + 1]
        if n >= 0:
            st[2 * f] = lists[i, 2 * f]
            st[2 * f + 1] = n


@njit(cache=True, nogil=True)
def _topic_events(rows, kind, topic, name, n_names, ev_row, ev_topic):
    """The RemoveTopic and ClearElr records among ``rows`` (the TopicRecords, RemoveTopic and ClearElr records in
    log order) that act on a topic: each one's row and topic (-2: ClearElr of every topic) into ``ev_row`` /
    ``ev_topic``, in log order; returns how many.  A ClearElr names a topic by name: the topic id the name has at
    that point of the log (the latest TopicRecord of it); a name no topic has yet, or a RemoveTopic without a
    topic, acts on none."""
    name_topic = np.full(n_names, -1, np.int32)
    c = 0
    for i in rows:
        k = kind[i]
        if k == TOPIC:
            if name[i] >= 0:
                name_topic[name[i]] = topic[i]
            continue
        t = topic[i] if k == REMOVE_TOPIC else (name_topic[name[i]] if name[i] >= 0 else -2)
        if t == -1:
            continue
        ev_row[c] = i
        ev_topic[c] = t
        c += 1
    return c


@njit(cache=True, nogil=True)
def _per_rank(rows, part, rank, counts):
    """How many of ``rows`` each partition has, by its output rank, into ``counts`` (zeros): a gather and a bincount
    in NumPy, each a pass over the rows (2.4 ns a record on the benchmark's group, 0.9 so)."""
    for i in rows:
        counts[rank[part[i]]] += 1


@njit(cache=True, nogil=True)
def _by_partition(rows, part, rank, at, out):
    """``rows`` (in log order) grouped by their partition's output rank, log order kept within a partition: a
    counting sort, ``at`` each rank's first place (consumed)."""
    for i in rows:
        k = rank[part[i]]
        out[at[k]] = i
        at[k] += 1


@njit(cache=True, nogil=True)
def _fold(by_rank, part_topic, part_id, prow, prow_at, tev_row, tev_at, logpos, kind, ints, lists, offsets,
          dir_start, dir_codes, mig, state_only, topic_code, pid, part_o, kind_o, valid, deleted, orphan, leader, lrs,
          le, pe, offset, src, off, Src, orphans):
    """Pass 1 (see the module docstring): partition after partition in output order, each one's records in log
    order merged with its topic's RemoveTopic / ClearElr records; each history row written where it goes (the
    next output row), with each list's tape start in ``src`` and the lists' running totals in ``off``.
    ``state_only``: one row per partition that exists at the end (its state then), and the orphans' input rows
    into ``orphans`` (their number in its last word).  Returns (rows written, the seven lists' totals)."""
    st = np.zeros(2 * _NLISTS, np.int64)  # the partition's state: (tape start, length) of each list, directories last
    tot = np.zeros(_NLISTS, np.int64)  # the lists' running totals (int32 list offsets: the caller checks 2**31)
    for f in range(_NLISTS):
        off[f, 0] = 0
    # the arrays the row writer takes, borrowed: numba counts the references of every array a helper receives,
    # at every call, inlined or not (kernels/borrow.py); the owners stay alive in this frame (``hold`` below)
    b_part_id, b_offsets, b_st, b_tot = borrow(part_id), borrow(offsets), borrow(st), borrow(tot)
    b_topic_code, b_pid, b_part_o, b_kind_o = borrow(topic_code), borrow(pid), borrow(part_o), borrow(kind_o)
    b_valid, b_deleted, b_orphan, b_leader = borrow(valid), borrow(deleted), borrow(orphan), borrow(leader)
    b_lrs, b_le, b_pe, b_offset, b_src, b_off = borrow(lrs), borrow(le), borrow(pe), borrow(offset), borrow(src), borrow(off)
    b_Src, b_lists = borrow(Src), borrow(lists)
    c = 0
    n_orphans = 0
    n_prow = len(prow)
    for r in range(len(by_rank)):
        p = by_rank[r]
        t = part_topic[p]
        a, b = prow_at[r], prow_at[r + 1]
        e, g = tev_at[t], tev_at[t + 1]
        live = False
        lead = lrs_v = le_v = pe_v = 0
        last = -1  # the input row of the partition's latest row (state_only)
        last_kind = 0
        while a < b or e < g:
            if a + _AHEAD < n_prow:  # the records ahead, in this order, are rows scattered over the log
                q = prow[a + _AHEAD]
                prefetch(ints, q * ints.shape[1])
                prefetch(lists, q * lists.shape[1])
                prefetch(offsets, q)
                prefetch(kind, q)
            flag = _LIVE
            if e < g and (a >= b or logpos[tev_row[e]] < logpos[prow[a]]):
                i = tev_row[e]
                e += 1
                if not live:
                    continue
                if kind[i] == REMOVE_TOPIC:  # §1.4: the partition is deleted
                    live = False
                    flag, k = _DELETED, _T
                else:  # §1.3-5: ClearElr clears a non-empty ELR or LastKnownElr and bumps the partition epoch
                    if st[2 * _ELR + 1] == 0 and st[2 * _LKE + 1] == 0:
                        continue
                    st[2 * _ELR + 1] = 0
                    st[2 * _LKE + 1] = 0
                    pe_v += 1
                    k = _X
            else:
                i = prow[a]
                a += 1
                if kind[i] == PARTITION:  # every field written; a null list is []
                    live = True
                    lead, lrs_v, le_v, pe_v = ints[i, 0], ints[i, 3], ints[i, 1], ints[i, 2]
                    written_lists(b_st, b_lists, i)
                    real = _has_real(i, ints, dir_start, dir_codes, mig)
                    st[2 * _DIRS] = dir_start[i] if real else -1
                    st[2 * _DIRS + 1] = ints[i, 4] if real else 0
                    k = _P
                elif not live:  # §1.3-2: a change of a partition that does not exist
                    flag, k = _ORPHAN, _C
                    if state_only:
                        orphans[n_orphans] = i
                        n_orphans += 1
                else:  # §1.3 merge
                    merged_lists(b_st, b_lists, i)
                    if ints[i, 4] >= 0:  # directories written: explicit if they name a real one
                        real = _has_real(i, ints, dir_start, dir_codes, mig)
                        st[2 * _DIRS] = dir_start[i] if real else -1
                        st[2 * _DIRS + 1] = ints[i, 4] if real else 0
                    else:  # replicas without directories: explicit only if of the same length
                        n = lists[i, 2 * _REPLICAS + 1]
                        if n >= 0 and st[2 * _DIRS] >= 0 and st[2 * _DIRS + 1] != n:
                            st[2 * _DIRS] = -1
                            st[2 * _DIRS + 1] = 0
                    if ints[i, 0] != -2:  # §1.3-1: any leader value bumps the leader epoch
                        lead = ints[i, 0]
                        le_v += 1
                    if ints[i, 3] != -1:
                        lrs_v = ints[i, 3]
                    pe_v += 1
                    k = _C
            if state_only:
                if flag == _LIVE:
                    last, last_kind = i, k
                continue
            c = _row(c, i, k, flag, p, t, b_part_id, b_offsets, lead, lrs_v, le_v, pe_v, b_st, b_tot, b_topic_code,
                     b_pid, b_part_o, b_kind_o, b_valid, b_deleted, b_orphan, b_leader, b_lrs, b_le, b_pe, b_offset, b_src,
                     b_off, b_Src)
        if state_only and live:
            c = _row(c, last, last_kind, _LIVE, p, t, b_part_id, b_offsets, lead, lrs_v, le_v, pe_v, b_st, b_tot,
                     b_topic_code, b_pid, b_part_o, b_kind_o, b_valid, b_deleted, b_orphan, b_leader, b_lrs, b_le, b_pe,
                     b_offset, b_src, b_off, b_Src)
    orphans[len(orphans) - 1] = n_orphans
    hold(st, tot)
    res = np.empty(_NLISTS + 1, np.int64)
    res[0] = c
    for f in range(_NLISTS):
        res[f + 1] = tot[f]
    return res


@njit(cache=True, inline="always")
def _row(c, i, k, flag, p, t, part_id, offsets, lead, lrs_v, le_v, pe_v, st, tot, topic_code, pid, part_o, kind_o,
         valid, deleted, orphan, leader, lrs, le, pe, offset, src, off, Src):
    """History row ``c`` of partition ``p`` (topic ``t``) from input row ``i``: kind ``k``, state flag ``flag``, the
    state (``lead`` ... ``st``) when live; its lists' tape starts in ``src`` and their running totals ``tot`` in
    ``off``.  Returns the next row."""
    offset[c] = offsets[i]
    Src[c] = i
    part_o[c] = p
    topic_code[c] = t
    pid[c] = part_id[p]
    kind_o[c] = k
    live = flag == _LIVE
    valid[c] = live
    deleted[c] = flag == _DELETED
    orphan[c] = flag == _ORPHAN
    if live:
        leader[c] = lead
        lrs[c] = lrs_v
        le[c] = le_v
        pe[c] = pe_v
        for f in range(6):
            src[c, f] = st[2 * f]
            tot[f] += st[2 * f + 1]
        d = st[2 * _DIRS]
        src[c, _DIRS] = d
        tot[_DIRS] += st[2 * _DIRS + 1] if d >= 0 else st[2 * _REPLICAS + 1]  # MIGRATING per replica
    else:
        leader[c] = 0
        lrs[c] = 0
        le[c] = 0
        pe[c] = 0
        for f in range(_NLISTS):
            src[c, f] = 0
    for f in range(_NLISTS):
        off[f, c + 1] = tot[f]
    return c + 1


# -------------------------------------------------------------------------------------- 2. columns
@njit(cache=True, inline="always")
def _copy(out, w, n, src, a):
    for q in range(n):
        out[w + q] = src[a + q]


# The columns are allocated by NumPy, not inside the loops: NumPy asks the kernel for huge pages on large arrays,
# and the pages an array inside a compiled loop got were faulted in 4 kB at a time (2.7x the time for the same
# bytes in a warm process; the columns are ~150 bytes per history row).  A log-only command's process asks for
# none (controller_core/heap.small_pages: on its first call huge pages were the slower and the less predictable).
@njit(cache=True, nogil=True)
def _list_values(src, off, valid, tape, dir_codes, mig, v_rep, v_isr, v_rm, v_ad, v_elr, v_lke, v_dir, lists, dirs,
                 part, orphan, offset, valid_to, has_next, succ):
    """Pass 2b: each list column's values, copied from the tape (fetched some rows ahead: a partition's lists
    were written by records scattered over the log; the six lists only if ``lists``, the directories only if
    ``dirs``); then :func:`_valid_to`."""
    m = len(valid) if lists or dirs else 0
    # a list no row has a value in (the reassignments, the ELRs of most logs) is not walked: its offsets are all 0
    rm, ad, elr, lke = len(v_rm) > 0, len(v_ad) > 0, len(v_elr) > 0, len(v_lke) > 0
    for j in range(m):
        if lists and j + _AHEAD < m and valid[j + _AHEAD]:
            prefetch(tape, src[j + _AHEAD, 0])
            prefetch(tape, src[j + _AHEAD, 1])
            if rm or ad or elr or lke:
                for f in range(2, 6):
                    prefetch(tape, src[j + _AHEAD, f])
        if not valid[j]:
            continue
        if lists:
            _copy(v_rep, off[0, j], off[0, j + 1] - off[0, j], tape, src[j, 0])
            _copy(v_isr, off[1, j], off[1, j + 1] - off[1, j], tape, src[j, 1])
            if rm:
                _copy(v_rm, off[2, j], off[2, j + 1] - off[2, j], tape, src[j, 2])
            if ad:
                _copy(v_ad, off[3, j], off[3, j + 1] - off[3, j], tape, src[j, 3])
            if elr:
                _copy(v_elr, off[4, j], off[4, j + 1] - off[4, j], tape, src[j, 4])
            if lke:
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


class Plan(NamedTuple):
    """The order pass 1 reads the records in (:func:`plan`)."""

    by_rank: np.ndarray  # the partitions in output order
    prow: np.ndarray  # each partition's records, partitions in output order, log order within one (CSR)
    prow_at: np.ndarray
    tev_row: np.ndarray  # the topic-level records each topic's partitions merge in (CSR by topic, log order)
    tev_at: np.ndarray
    logpos: np.ndarray  # each row's place in log order (where the two are merged)
    extra: int  # at most this many rows the topic-level records add


def plan(lay: L.Layout, order: np.ndarray | None, in_order: bool, rank: np.ndarray) -> Plan:
    """The records of every partition in the order pass 1 reads them (what the judging pass of ``verify``,
    kernels/judge_pass.py, reads too).  ``in_order``: whether the input is in log order (``order`` None: then
    ``logpos``, read only where a topic-level record is merged in, is made only if there is one)."""
    kind, part = lay.kind, lay.part
    n_parts, n_topics = len(lay.part_id), len(lay.topic_ids)
    is_part = (kind == L.PARTITION) | (kind == L.CHANGE)
    rows = np.flatnonzero(is_part) if in_order else order[is_part[order]]  # the partition records in log order
    # each partition's records, partitions in output order (CSR by rank)
    by_rank = np.empty(n_parts, np.int64)
    by_rank[rank] = np.arange(n_parts)
    prow_at = np.zeros(n_parts + 1, np.int64)
    _per_rank(rows, part, rank, prow_at[1:])
    np.cumsum(prow_at, out=prow_at)
    prow = np.empty(len(rows), np.int64)
    _by_partition(rows, part, rank, prow_at[:-1].copy(), prow)
    # the topic-level records each topic's partitions merge in (CSR by topic, in log order)
    topical = (kind == L.REMOVE_TOPIC) | (kind == L.CLEAR_ELR)
    tev_row, tev_at = np.zeros(0, np.int64), np.zeros(n_topics + 1, np.int64)
    logpos = np.zeros(1, np.int64) if in_order else order  # (no topic-level record: never read)
    extra = 0
    if topical.any():
        named = topical | (kind == L.TOPIC)
        cand = np.flatnonzero(named) if in_order else order[named[order]]
        ev_row, ev_topic = np.empty(len(cand), np.int64), np.empty(len(cand), np.int64)
        n_ev = _topic_events(cand, kind, lay.topic, lay.name, lay.n_names, ev_row, ev_topic)
        ev_row, ev_topic = ev_row[:n_ev], ev_topic[:n_ev]
        every = ev_topic == -2  # ClearElr of every topic: in each topic's list
        own = ~every
        t_all = np.concatenate([ev_topic[own], np.repeat(np.arange(n_topics), int(every.sum()))])
        r_all = np.concatenate([ev_row[own], np.tile(ev_row[every], n_topics)])
        if in_order:
            logpos = np.arange(len(kind), dtype=np.int64)
        else:
            logpos = np.empty(len(order), np.int64)
            logpos[order] = np.arange(len(order))
        by = np.lexsort((logpos[r_all], t_all))
        tev_row = r_all[by]
        np.cumsum(np.bincount(t_all, minlength=n_topics), out=tev_at[1:])
        # at most one row per partition and event of its topic (columns np.empty allocates: what is not written
        # is never given memory)
        extra = int(np.diff(lay.topic_parts_at)[t_all].sum())
    return Plan(by_rank, prow, prow_at, tev_row, tev_at, logpos, extra)


def _columns(lay: L.Layout, order: np.ndarray | None, in_order: bool, rank: np.ndarray, state_only: bool, dirs: bool,
             lists: bool = True, dated: bool = True):
    """Pass 1 and pass 2 into NumPy-allocated columns (the six lists' values only if ``lists``, the directories'
    only if ``dirs``, valid-to and the successors only if ``dated``: else pass 2 is not run and those three are
    empty); None when a list column's values reach 2**31 (int32 offsets: the caller folds with the NumPy fold).
    ``in_order``: whether the input is in log order (:func:`_log_order`)."""
    kind = lay.kind
    n_parts = len(lay.part_id)
    by_rank, prow, prow_at, tev_row, tev_at, logpos, extra = plan(lay, order, in_order, rank)
    m_max = n_parts if state_only else len(prow) + extra
    e = np.empty
    topic_code, pid, part_o = e(m_max, np.int32), e(m_max, np.int32), e(m_max, np.int32)
    kind_o, valid, deleted, orphan = e(m_max, np.int8), e(m_max, np.bool_), e(m_max, np.bool_), e(m_max, np.bool_)
    leader, lrs, le, pe = e(m_max, np.int32), e(m_max, np.int8), e(m_max, np.int32), e(m_max, np.int32)
    offset, src, off, Src = e(m_max, np.int64), e((m_max, _NLISTS), np.int32), e((_NLISTS, m_max + 1), np.int32), e(
        m_max, np.int64)
    orphans = np.zeros(int((kind == L.CHANGE).sum()) + 1 if state_only else 1, np.int64)
    res = _fold(by_rank, lay.part_topic, lay.part_id, prow, prow_at, tev_row, tev_at, logpos, kind, lay.ints,
                lay.lists, lay.offset, lay.dir_start, lay.dir_codes, lay.dir_mig, state_only, topic_code, pid, part_o,
                kind_o, valid, deleted, orphan, leader, lrs, le, pe, offset, src, off, Src, orphans)
    m, total = int(res[0]), res[1:]
    if total.max(initial=0) >= 2**31:
        return None
    if m < m_max:  # the bound counts a row per partition of a topic and event of it (or per partition: state only)
        topic_code, pid, part_o, kind_o, valid, deleted, orphan, leader, lrs, le, pe, offset, Src = (
            a[:m] for a in (topic_code, pid, part_o, kind_o, valid, deleted, orphan, leader, lrs, le, pe, offset, Src))
        src, off = src[:m], np.ascontiguousarray(off[:, :m + 1])
    values = [e(int(t) if (dirs if k == _DIRS else lists) else 0, np.int32) for k, t in enumerate(total)]
    if lists or dirs or dated:
        valid_to, has_next, succ = e(m, np.int64), e(m, np.bool_), e(m, np.int64)
        _list_values(src, off, valid, lay.tape, lay.dir_codes, lay.dir_mig, *values, lists, dirs, part_o, orphan,
                     offset, valid_to, has_next, succ)
    else:  # (verify: 25 bytes a row of fresh memory, and a pass, for nothing it reads)
        valid_to, has_next, succ = e(0, np.int64), e(0, np.bool_), e(0, np.int64)
    return (topic_code, pid, kind_o, valid, deleted, orphan, leader, lrs, le, pe, offset, off, *values, valid_to,
            has_next, succ, Src, orphans[:orphans[-1]], src)


# ------------------------------------------------------------------------------------------ Python
def _list_array(off: np.ndarray, vals: np.ndarray, valid: np.ndarray) -> pa.Array:
    """list<int32> over the int32 offsets and values as they are (no copy); null where not ``valid``."""
    return pa.ListArray.from_arrays(from_numpy(off), from_numpy(vals), mask=None if valid.all() else from_numpy(~valid))


def _not_null_where(records: pa.Table, column: str, rows: np.ndarray) -> bool:
    col = records.column(column)
    return col.null_count == 0 or not L.null_among(col, rows)


def _unsupported(records: pa.Table, lay: L.Layout) -> bool:
    """The input has something the pass does not take (see the module docstring; a layout without directory codes
    yet: what the judging pass, which reads none, does not take)."""
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
    # state lines hold int32 starts
    return len(lay.tape) >= 2**31 or (lay.dir_codes is not None and len(lay.dir_codes) >= 2**31)


def _log_order(lay: L.Layout) -> tuple[np.ndarray | None, bool]:
    """(the rows in the order the fold reads them: by offset, stably -- None when that is the input order, as a
    log's rows nearly always are: a row number per row was 9 MB of fresh memory a million records --; whether it
    is the input order)."""
    offset = lay.offset
    if len(offset) > 1 and (offset[1:] < offset[:-1]).any():
        return np.argsort(offset, kind="stable"), False
    return None, True


def _partition_rank(lay: L.Layout, order: np.ndarray | None, in_order: bool,
                    last: np.ndarray | None = None) -> np.ndarray:
    """Output position of each layout partition: topics in order of first appearance in log order, then
    partition id.  The layout numbers topics by first appearance in input order: the same unless the input
    was out of offset order.  ``last`` (a mask over the partitions): those go after all the others, in the same
    order among themselves.  ``in_order``: whether the input is in log order (``order`` None, :func:`_log_order`)."""
    n_parts = len(lay.part_id)
    if in_order:
        rank = np.arange(n_parts, dtype=np.int64)  # layout partitions are sorted by (topic, partition id)
    else:
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
    if last is None or not last.any():
        return rank
    by = np.empty(n_parts, np.int64)
    by[rank] = np.arange(n_parts)  # the partitions in output order
    moved = last[by]
    by = np.concatenate([by[~moved], by[moved]])
    rank[by] = np.arange(n_parts)
    return rank


def fold(records: pa.Table, lay: L.Layout | None = None, timings: dict | None = None,
         state_only: bool = False, columns: frozenset[str] | None = None, last: np.ndarray | None = None) -> Fold:
    """The partition state history of ``records`` (bronze rows, as ``fold.fold_partitions`` takes them);
    ``lay``: their layout if it is built already (:func:`layout.build` of the same rows).  ``timings``, if
    given, receives the CPU seconds of each step.

    ``state_only``: only the state at the end -- ``fold.state_at`` of the history, each existing partition's
    latest row, in the history's order --, one row per partition instead of one per record (what ``describe``
    shows), and without the history's orphan rows, which ``Fold.orphans`` holds in either mode.  ``rows`` and
    ``successor`` describe its rows as for a history (no row has a successor); ``changes`` is empty.

    ``columns``: the history's columns a caller reads, when not all (``verify`` judges the changes and keeps no
    history): the others are not made -- the directories' and record types' strings are most of a history's
    bytes, and on a command's first call fresh bytes cost more than the loops that write them.  A table the NumPy
    fold made has every column.

    ``last``: partitions (a mask over the layout's) whose rows end the history, after every other partition's (a
    Spark bucket's context partitions, which the caller then drops with a slice instead of copying the rest).  The
    NumPy fold keeps its own order."""
    clock = F._Clock(timings)
    if records.num_rows == 0:
        return _whole(F.fold_partitions(records, dictionary_strings=True), 0, state_only)
    if lay is None:
        lay = L.build(records)
        clock("layout")
    kind = lay.kind
    if not ((kind == L.PARTITION) | (kind == L.CHANGE)).any():
        return _whole(F.fold_partitions(records, dictionary_strings=True), 0, state_only)
    L.with_directories(lay, records)
    clock("directory codes")
    if _unsupported(records, lay):
        history = F.fold_partitions(records, dictionary_strings=True)
        keys = history.select(["topic_id", "partition_id"]).group_by(["topic_id", "partition_id"]).aggregate([])
        return _whole(history, keys.num_rows, state_only)
    order, in_order = _log_order(lay)  # (said once: each step below compared ``order`` with 0, 1, 2, ... again)
    rank = _partition_rank(lay, order, in_order, last)
    clock("checks, log order, partition order")
    wanted = F.HISTORY_ENCODED.names if columns is None else [c for c in F.HISTORY_ENCODED.names if c in columns]
    cols = _columns(lay, order, in_order, rank, state_only, "directories" in wanted,
                    any(c in wanted for c in L.LISTS), "valid_to_offset" in wanted)
    if cols is None:  # beyond int32 list offsets: the NumPy fold (which chunks strings)
        return _whole(F.fold_partitions(records, dictionary_strings=True), len(lay.part_id), state_only)
    (topic_code, pid, kind_o, valid, deleted, orphan, leader, lrs, le, pe, O, off, v_rep, v_isr, v_rm, v_ad, v_elr,
     v_lke, v_dir, valid_to, has_next, succ, Src, orphan_rows, src) = cols
    clock("fold and list loops (rows where they go)")
    made = {  # each column made only when asked for
        "topic_id": lambda: F._strings(lay.topic_dict, topic_code, True),
        "partition_id": lambda: from_numpy(pid),
        "offset": lambda: from_numpy(O),
        "record_type": lambda: F._strings(_KIND_NAMES, kind_o, True),
        **{f: (lambda vals=vals, at=L.LISTS.index(f): _list_array(off[at], vals, valid))
           for f, vals in zip(("replicas", "isr", "removing_replicas", "adding_replicas", "eligible_leader_replicas",
                               "last_known_elr"), (v_rep, v_isr, v_rm, v_ad, v_elr, v_lke))},
        "leader": lambda: from_numpy(leader, valid),
        "leader_epoch": lambda: from_numpy(le, valid),
        "partition_epoch": lambda: from_numpy(pe, valid),
        "leader_recovery_state": lambda: from_numpy(lrs, valid),
        "directories": lambda: F._string_lists(off[_DIRS], v_dir, valid, lay.dir_dict, True),
        "valid_to_offset": lambda: from_numpy(valid_to, has_next),
        "deleted": lambda: from_numpy(deleted),
        "orphan": lambda: from_numpy(orphan),
    }
    out = pa.Table.from_pydict({c: made[c]() for c in wanted},
                               schema=pa.schema([F.HISTORY_ENCODED.field(c) for c in wanted]))
    clock("Arrow columns")
    if not state_only:
        orphan_rows = Src[orphan]  # (the state-only loop collects them: it writes no orphan row)
    o_part = lay.part[orphan_rows]
    orphans = pa.table({"offset": from_numpy(lay.offset[orphan_rows].astype(np.int64)),
                        "topic_id": F._strings(lay.topic_dict, lay.part_topic[o_part], False),
                        "partition_id": from_numpy(lay.part_id[o_part].astype(np.int32))}, schema=_ORPHANS)
    changes = np.zeros(0, np.int64) if state_only else np.flatnonzero((kind_o == _C) & ~orphan)
    return Fold(out, 0, Src, changes, succ if len(succ) == len(O) else None, orphans, (src, off))


def _whole(history: pa.Table, fallback: int, state_only: bool) -> Fold:
    """A :class:`Fold` of the NumPy fold's history (or, ``state_only``, of its state at the end)."""
    orphans = history.filter(history.column("orphan")).select(["offset", "topic_id", "partition_id"])
    return Fold(F.state_at(history) if state_only else history, fallback, orphans=orphans)


def warm() -> None:
    """Compile the loops (or load them from numba's cache) with the argument types of a real run."""
    i64, i32, i8 = np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int8)
    lay = L.Layout(**dict.fromkeys(L.Layout.__dataclass_fields__))
    lay.kind, lay.part, lay.topic, lay.name, lay.n_names = i8, i32, i32, i32, 1
    lay.part_topic, lay.part_id, lay.topic_ids, lay.topic_parts_at = i32, i32, [], np.zeros(1, np.int64)
    lay.ints, lay.lists, lay.offset = np.zeros((0, 5), np.int32), np.zeros((0, 12), np.int32), i64
    lay.tape, lay.dir_start, lay.dir_codes, lay.dir_mig = i32, i64, i32, 0
    for state_only in (True, False):
        _columns(lay, i64, True, i64, state_only, True)
    _topic_events(i64, i8, i32, i32, 1, i64, i64)
    # the layout's compiled loop (list references), as it is called: offsets read-only over an Arrow buffer
    bits, bo = L._NO_BITS, 0
    L._refs(np.frombuffer(bytes(4), np.int32), bits, bo, False, np.zeros((0, 12), np.int32), 0, 0, 0)
    L._refs(np.frombuffer(bytes(4), np.int32), bits, bo, False, np.zeros((0, 2), np.int32), 0, 0, 0)
    offs = np.frombuffer(bytes(4), np.int32)
    L._refs_rows(*[offs] * 6, *[bits] * 6, np.zeros(6, np.int64), np.zeros(6, np.bool_), np.zeros((0, 12), np.int32),
                 0, np.zeros(6, np.int64))
    L.null_among(pa.chunked_array([pa.array([None, 1], pa.int32())]), np.ones(2, np.bool_))
    L._dense(pa.chunked_array([pa.array(["t"] * 64 + [None])]))  # a chunk of strings in runs
    L._dense_partitions(i8, i32, i32, np.zeros(0, np.int32))
    for typ in (pa.int32(), pa.int8()):  # the leader's and the leader recovery state's columns
        L._unset(pa.chunked_array([pa.array([None, 1], typ)]), np.zeros(2, np.bool_), -1, -2,
                 np.zeros((2, 5), np.int32)[:, 0])  # (into a column of the layout's ints)
