"""``verify``'s judgement in one compiled pass: the fold and the change builder together, no history made.

A findings-only replay (``pipeline.run(history=False)``: ``verify``) needs, of each PartitionChangeRecord, only
whether the controller's rules reproduce it -- ``explain``'s table.  The general path folds every record into a
history row first (:mod:`.fold_pass`: ~100 bytes a row, fresh memory on a command's first call) and ``explain``
then reads each change's row before it back (:mod:`.recompute_pass`).  Here one loop walks every partition's
records in the fold's order (:func:`fold_pass.plan`: partitions in output order, log order within one, the
topic-level records merged in) holding the partition's state in locals -- its lists as (start, length) on the
layout's tape, its leader and recovery state --, and judges each change record of a live partition against that
state the moment it reaches it: the broker event of its batch (:func:`context.batch_event`) and the change
builder (:func:`recompute_pass._judge`), the very functions ``explain`` runs, before merging the record (§1.3).
No row is written but the judgement's own.

The result is ``explain``'s table for the same records, row for row (its rows are the change records of live
partitions in the fold's order); the tests hold the two equal on every real log and on generated ones.  Where
the loop would leave a record to the NumPy builder (replicas repeating a broker, more than 64 replica
positions, broker ids the active table cannot index) or the fold would leave the input to the NumPy fold,
:func:`judge` returns None and the caller takes the general path.

``explain`` pads every record to the widest replica list *before any change record* (``recompute_pass``'s
``width``), which only a full pass knows: the loop starts from the widest replicas any record writes, and runs
again with the width it met when that differs (a log whose widest replica list never precedes a change).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
from numba import njit

from controller_core import numba_cache  # noqa: F401  (kernels shipped in a zip cache across jobs)
from controller_core.brokers import active_table
from controller_core.codec.arrowutil import column_ints, from_numpy
from controller_core.kernels import context, fold_pass
from controller_core.kernels import layout as L
from controller_core.kernels.borrow import borrow
from controller_core.kernels.borrow import keep as hold
from controller_core.kernels.layout import AD, E, I, K, R, RM
from controller_core.kernels.prefetch import prefetch
from controller_core.kernels.recompute_pass import MAX_POSITIONS, _judge, _map, _unmap
from controller_core.numba_cache import read_only
from controller_core.vector import recompute as V

_AHEAD = 256  # records between fetching a record's layout row and reading it (as the fold's loop)


def dense_span(n: int) -> int:
    """The widest range of offsets ``n`` records are looked up in through a table over the range (4 bytes an offset,
    as ``recompute.count_below`` decides); wider, a count per record."""
    return 4 * n + (1 << 20)


class Prepared(NamedTuple):
    """What :func:`judge` reads that needs no timeline (made while the timelines are built on another thread)."""

    plan: fold_pass.Plan
    batch: np.ndarray  # each row's batch base offset (int64; 0: null)
    width: int  # the widest replica list a record writes (>= 1)


def prepare(records: pa.Table, lay: L.Layout) -> Prepared | None:
    """The order the pass reads the records in; None where the pass does not take the input (the fold's own
    conditions: :func:`fold_pass._unsupported`; no partition record; replica lists beyond 64 positions)."""
    kind = lay.kind
    is_part = (kind == L.PARTITION) | (kind == L.CHANGE)
    if not is_part.any() or fold_pass._unsupported(records, lay):
        return None
    lens = lay.lists[:, 2 * R + 1][is_part]
    width = max(int(lens.max(initial=0)), 1)
    if width > MAX_POSITIONS:
        return None
    order, in_order = fold_pass._log_order(lay)
    plan = fold_pass.plan(lay, order, in_order, fold_pass._partition_rank(lay, order, in_order))
    return Prepared(plan, column_ints(records.column("batch_base_offset"), 0), width)


def judge(records: pa.Table, lay: L.Layout, prepared: Prepared, brokers: pa.Table, topics: pa.Table,
          events: np.ndarray) -> tuple | None:
    """(offset, topic code, partition id, trigger, chosen event, matched, modelled) of every change record of a
    live partition, in the fold's order -- what ``explain`` computes of the same records (``events``: its broker
    events, ``explain._event_rows``) --; None where a record needs the NumPy builder (see the module docstring)."""
    n = records.num_rows
    offsets = lay.offset
    lookup = active_table(brokers, offsets[:0], int(lay.tape.min(initial=0)), int(lay.tape.max(initial=0)))
    if lookup is None:
        return None
    table, _, lut, none = lookup
    # broker b is active just before record i iff table[below(i) * (none + 1) + lut[b]], below(i) the broker rows
    # before it: a table over the records' offsets (no array per record), or per record where they are sparse
    b_off = np.sort(column_ints(brokers.column("offset")))
    lo, hi = (int(offsets.min()), int(offsets.max())) if n else (0, 0)
    by_row = hi - lo > dense_span(n)
    below = V.count_below(b_off, offsets) if by_row else V.below_table(b_off, lo, hi)
    mv, elr_on, min_isr = context.topic_settings(topics, lay.topic_dict, lay.topic, offsets)
    ev = context.event_index(events, n)
    p = prepared.plan
    n_changes = int((lay.kind == L.CHANGE).sum())
    e = np.empty
    out = (e(n_changes, np.int64), e(n_changes, np.int32), e(n_changes, np.int32), e(n_changes, np.int8),
           e(n_changes, np.int64), e(n_changes, np.bool_), e(n_changes, np.bool_))
    args = (read_only(p.by_rank), read_only(lay.part_topic), read_only(lay.part_id), read_only(p.prow),
            read_only(p.prow_at), read_only(p.tev_row), read_only(p.tev_at), read_only(p.logpos),
            read_only(lay.kind), read_only(lay.ints), read_only(lay.lists), read_only(lay.tape), read_only(offsets),
            read_only(prepared.batch), *ev, read_only(mv), read_only(elr_on), read_only(min_isr), read_only(table),
            read_only(below.astype(np.int32, copy=False)), by_row, lo, none + 1, read_only(lut))
    width = prepared.width
    while True:
        c, widest, left = _pass(*args, width, *out)
        if left:
            return None
        if widest == width or c == 0:
            break
        width = widest  # explain's width: the widest replicas before a change record (the module docstring)
    return tuple(a[:c] for a in out)


@njit(cache=True, nogil=True)
def _pass(by_rank, part_topic, part_id, prow, prow_at, tev_row, tev_at, logpos, kind, ints, lists, tape, offsets,
          batch, ev_batch, ev_off, ev_trig, ev_broker, ev_side, base, bits, mv, elr_on, min_isr, act_table, below,
          by_row, lo, nb, act_lut, width, offset, topic, pid, trig, chosen, matched, modelled):
    """The loop (see the module docstring): the j-th change record of a live partition judged into ``offset[j]``,
    ``topic[j]`` (its topic code), ``pid[j]`` (partition id), ``trig[j]``, ``chosen[j]`` (its broker event, -1
    none), ``matched[j]``, ``modelled[j]``.  Broker b is active just before record i iff
    ``act_table[below[k] * nb + act_lut[b]]``, k = i (``by_row``) or its offset - ``lo``.  Returns (changes judged,
    the widest replica list before one (>= 1), records left to the NumPy builder)."""
    st = np.zeros(12, np.int64)  # the partition's state: (tape start, length) of each list (layout.LISTS order)
    ti = np.empty(max(width, 1) + 64, np.int64)  # the change builder's target ISR
    cap = len(ti)
    posof = np.full(len(act_lut), -1, np.int8)  # broker id -> replica position of the record at hand
    pmap, vals, buf, b_ints, b_lists = borrow(posof), borrow(tape), borrow(ti), borrow(ints), borrow(lists)
    b_table, b_lut = borrow(act_table), borrow(act_lut)
    e_batch, e_off, e_trig, e_broker = borrow(ev_batch), borrow(ev_off), borrow(ev_trig), borrow(ev_broker)
    e_side, e_bits, b_st = borrow(ev_side), borrow(bits), borrow(st)
    c = 0
    widest = 1
    left = 0
    mapped_rs, mapped_w = -1, -1  # the replicas in the map: (tape start, length); -1: none
    n_prow = len(prow)
    for r in range(len(by_rank)):
        p = by_rank[r]
        t = part_topic[p]
        a, b = prow_at[r], prow_at[r + 1]
        e, g = tev_at[t], tev_at[t + 1]
        live = False
        lead = lrs_v = 0
        while a < b or e < g:
            if a + _AHEAD < n_prow:  # the records ahead, in this order, are rows scattered over the log
                q = prow[a + _AHEAD]
                prefetch(ints, q * ints.shape[1])
                prefetch(lists, q * lists.shape[1])
                prefetch(offsets, q)
                prefetch(kind, q)
                prefetch(batch, q)
                prefetch(min_isr, q)
            if a + _AHEAD // 2 < n_prow:  # once its row is in: its recorded ISR, its brokers' states
                q = prow[a + _AHEAD // 2]
                prefetch(tape, lists[q, 2 * I])
                prefetch(below, q if by_row else offsets[q] - lo)
            if e < g and (a >= b or logpos[tev_row[e]] < logpos[prow[a]]):
                i = tev_row[e]
                e += 1
                if not live:
                    continue
                if kind[i] == L.REMOVE_TOPIC:  # §1.4: deleted
                    live = False
                else:  # §1.3-5: ClearElr empties the ELR and LastKnownElr
                    st[2 * E + 1] = 0
                    st[2 * K + 1] = 0
                continue
            i = prow[a]
            a += 1
            if kind[i] == L.PARTITION:  # every field written; a null list is []
                live = True
                lead, lrs_v = ints[i, 0], ints[i, 3]
                fold_pass.written_lists(b_st, b_lists, i)
                continue
            if not live:  # §1.3-2: a change of a partition that does not exist (an orphan: not judged)
                continue
            rs, w = st[2 * R], st[2 * R + 1]
            widest = max(widest, w)
            tt, ch = context.batch_event(e_batch, e_off, e_trig, e_broker, e_side, base, e_bits, batch[i], offsets[i],
                                         vals, st[2 * I], st[2 * I + 1], st[2 * E], st[2 * E + 1])
            o = offsets[i]
            offset[c] = o
            topic[c] = t
            pid[c] = part_id[p]
            chosen[c] = ch
            matched[c] = False
            modelled[c] = False
            # the map holds the replicas of the record judged before: these, when they are the same list on the tape
            # (as recompute_pass._recompute keeps it)
            if st[2 * I + 1] < cap and (rs != mapped_rs or w != mapped_w):  # (as recompute_pass._recompute)
                if mapped_w >= 0:
                    _unmap(pmap, vals, mapped_rs, mapped_w)
                    mapped_w = -1
                if _map(pmap, vals, rs, w):
                    mapped_rs, mapped_w = rs, w
            if st[2 * I + 1] >= cap or rs != mapped_rs or w != mapped_w:
                left += 1
            else:
                tt, ok, mo = _judge(pmap, vals, vals, buf, rs, w, st[2 * I], st[2 * I + 1], st[2 * E], st[2 * E + 1],
                                    st[2 * K], st[2 * K + 1], st[2 * AD + 1], st[2 * RM + 1], lead, lrs_v, b_ints,
                                    b_lists, i, tt, ev_broker[ch] if ch >= 0 else -1, elr_on[i], mv[i], min_isr[i],
                                    b_table, below[i if by_row else o - lo] * nb, b_lut, width)
                matched[c] = ok
                modelled[c] = mo
            trig[c] = tt
            c += 1
            fold_pass.merged_lists(b_st, b_lists, i)  # §1.3
            if ints[i, 0] != -2:
                lead = ints[i, 0]
            if ints[i, 3] != -1:
                lrs_v = ints[i, 3]
    hold(posof, ti, st)
    return c, widest, left


def warm() -> None:
    """Compile the loop (or load it from numba's cache) with the argument types of a real run."""
    i64, i32, i8 = np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int8)
    ro = read_only
    ev = context.event_index(np.zeros((0, 6), np.int64), 0)
    for lists in (np.zeros((0, 12), np.int32), np.zeros((0, 12), np.int64)):  # tape positions past 2**31: int64
        _pass(ro(i64), ro(i32), ro(i32), ro(i64), ro(np.zeros(1, np.int64)), ro(i64), ro(np.zeros(1, np.int64)),
              ro(i64), ro(i8), ro(np.zeros((0, 5), np.int32)), ro(lists), ro(i32), ro(i64), ro(i64), *ev,
              ro(np.zeros(0, np.int16)), ro(np.zeros(0, np.bool_)), ro(i32), ro(np.zeros(1, np.bool_)), ro(i32),
              False, 0, 1, ro(np.zeros(1, np.int32)), 1, np.zeros(0, np.int64), np.zeros(0, np.int32),
              np.zeros(0, np.int32), np.zeros(0, np.int8), np.zeros(0, np.int64), np.zeros(0, np.bool_),
              np.zeros(0, np.bool_))
