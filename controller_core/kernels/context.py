"""The cluster context of each change record, for the compiled change builder (:mod:`.recompute_pass`), in
compiled loops over the records in history order, and the trigger label each record is given.

* :func:`topic_settings`: the metadata version, ELR switch and effective min ISR of the record's topic just before
  it -- the topic timeline's last row for that topic below the record's offset.  The timeline's rows are grouped
  per topic (the layout's dense topic index), so a record searches its own topic's few rows; the NumPy form
  (``vector/explain._topic_settings``) searched one sorted key per row of the whole timeline, a cache miss per
  step on a large log.
* :func:`batch_events`: the broker event of the record's batch that concerns its partition (``explain``'s B1:
  on the right side of the record, an unfence, or a broker in the ISR or ELR before it), ALTER without one, -1
  when two could explain it.  Most batches carry no broker event: a bitmap over the batches' offsets says so
  with one read; the others search the (few) events.  One record's is :func:`batch_event`, inlined here and into
  the findings-only replay's one pass (:mod:`.judge_pass`), whose records come with their state in hand.

* :func:`label_codes`: the trigger label of each record as one code over (label, broker) pairs -- what
  ``explain`` names it, each distinct text made once.

The first two give exactly what the NumPy forms give; ``vector/explain`` keeps those as the reference and for inputs
without a layout, and the tests compare the two on every real log.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from controller_core import numba_cache  # noqa: F401  (kernels shipped in a zip cache across jobs)
from controller_core.codec.arrowutil import to_numpy
from controller_core.kernels.borrow import borrow
from controller_core.kernels.layout import E, I
from controller_core.kernels.lookup import lower_bound
from controller_core.numba_cache import read_only
from controller_core.vector.recompute import ALTER, UNFENCE

AFTER = 1  # an event's side: its record comes after the changes it triggers (explain._AFTER)


def _ro(a, dtype) -> np.ndarray:
    """``a`` as a contiguous read-only ``dtype`` array (one compiled signature: ``numba_cache.read_only``)."""
    return read_only(np.ascontiguousarray(a, dtype))


# ------------------------------------------------------------------------------------------ topic settings
@njit(cache=True, nogil=True)
def _settings(rtopic, offset, starts, t_off, t_row, mv_v, elr_v, mis_v, mv, elr_on, min_isr):
    # the row found for the record before, whose offsets it stands for: [after, upto); records come grouped by topic,
    # a partition's in log order, so the next record most often falls in the same span (no search)
    last_t, after, upto, got = -1, 0, 0, -1
    b_off = borrow(t_off)
    for i in range(len(offset)):
        t = rtopic[i]
        o = offset[i]
        if t != last_t or not (after < o <= upto):
            last_t, got = t, -1
            after, upto = np.iinfo(np.int64).min, np.iinfo(np.int64).max
            if t >= 0:
                lo, hi = starts[t], starts[t + 1]
                a = lower_bound(b_off, lo, hi, o)  # the first of the topic's rows at or past the record: the one
                if a > lo:  # before it is in effect
                    got = t_row[a - 1]
                    after = t_off[a - 1]
                if a < hi:
                    upto = t_off[a]
        if got < 0:
            mv[i] = 0
            elr_on[i] = False
            min_isr[i] = 1
        else:
            mv[i] = mv_v[got]
            elr_on[i] = elr_v[got]
            min_isr[i] = mis_v[got]


def topic_settings(topics: pa.Table, topic_dict: pa.Array, rtopic: np.ndarray, offset: np.ndarray):
    """(metadata version int16, ELR in effect bool, effective min ISR int32) of each record's topic just before it
    (defaults 0, False, 1 where the timeline has no row for it yet).  ``topics``: the topic timeline
    (``timelines.build``); ``topic_dict``: the layout's topic ids by dense index; ``rtopic``: each record's dense
    topic index (-1: none); ``offset``: each record's offset."""
    n = len(offset)
    mv = np.empty(n, np.int16)
    elr_on = np.empty(n, np.bool_)
    min_isr = np.empty(n, np.int32)
    n_topics = len(topic_dict)
    ids = topics.column("topic_id")
    ids = ids.cast(pa.string()) if pa.types.is_dictionary(ids.type) else ids
    t_lay = to_numpy(pc.fill_null(pc.index_in(ids, value_set=topic_dict), -1), np.int64)
    t_off = to_numpy(topics.column("offset"), np.int64)
    order = np.lexsort((t_off, t_lay))  # per topic, by offset (stably: the later of two rows at one offset last)
    order = order[t_lay[order] >= 0]
    starts = np.zeros(n_topics + 1, np.int64)
    np.cumsum(np.bincount(t_lay[order], minlength=n_topics), out=starts[1:])
    mv_v = to_numpy(pc.fill_null(topics.column("metadata_version"), 0), np.int16)
    elr_v = to_numpy(pc.fill_null(topics.column("elr_enabled"), False), np.bool_)
    mis_v = to_numpy(pc.fill_null(topics.column("effective_min_isr"), 1), np.int32)
    _settings(_ro(rtopic, np.int32), _ro(offset, np.int64), _ro(starts, np.int64), _ro(t_off[order], np.int64),
              _ro(order, np.int64), _ro(mv_v, np.int16), _ro(elr_v, np.bool_), _ro(mis_v, np.int32), mv, elr_on,
              min_isr)
    return mv, elr_on, min_isr


# ------------------------------------------------------------------------------------------------ extents
@njit(cache=True, nogil=True)
def _extent(prev, off_r, vals):
    widest = 0
    for h in prev:
        widest = max(widest, off_r[h + 1] - off_r[h])
    lo, hi = 0, 0
    if len(vals):
        lo, hi = vals[0], vals[0]
        for x in vals:
            lo = min(lo, x)
            hi = max(hi, x)
    return widest, min(lo, 0), max(hi, 0)


def extent(prev: np.ndarray, off_r: np.ndarray, vals: np.ndarray) -> tuple[int, int, int]:
    """(the longest replica list of the history rows ``prev`` -- ``off_r`` the replicas' running lengths --, the
    least and the greatest id on the tape ``vals``, 0 included): the change builder's width and the broker ids its
    lookup must index, in two loops (NumPy's diff, gather, max, min and max were five passes)."""
    w, lo, hi = _extent(_ro(prev, np.int64), _ro(off_r, off_r.dtype), _ro(vals, vals.dtype))
    return int(w), int(lo), int(hi)


# -------------------------------------------------------------------------------------------- batch events
@njit(cache=True, inline="always")
def _holds(vals, s, n, b):
    """``vals[s:s + n]`` (a list of the state before the record) holds broker ``b`` (>= 0)."""
    if b < 0:
        return False
    for q in range(s, s + n):
        if vals[q] == b:
            return True
    return False


@njit(cache=True, inline="always")
def _may_carry(bits, base, bt):
    """Batch ``bt`` may carry a broker event: the bitmap of the batches from ``base`` that do says so (an empty
    bitmap: every batch may)."""
    span = len(bits) * 64
    if span == 0:
        return True
    k = bt - base
    return 0 <= k < span and ((bits[k >> 6] >> np.uint64(k & 63)) & np.uint64(1)) != 0


@njit(cache=True, inline="always")
def batch_event(ev_batch, ev_off, ev_trig, ev_broker, ev_side, base, bits, bt, o, vals, is_, pil, es, pel):
    """(trigger, event) of the record at offset ``o`` in the batch ``bt`` whose partition's ISR and ELR before it
    are ``vals[is_:is_ + pil]`` and ``vals[es:es + pel]``: ALTER and -1 without an event that concerns it, -1 and
    the first such event when two do.  ``ev_*``: the events' columns, sorted by batch; ``bits``: a bitmap of the
    batches (from ``base``) that carry one (empty: search for every record).  Every array a borrowed view."""
    n_ev = len(ev_batch)
    if not _may_carry(bits, base, bt):
        return ALTER, -1
    chosen = -1
    ambiguous = False
    e = lower_bound(ev_batch, 0, n_ev, bt)
    while e < n_ev and ev_batch[e] == bt:
        side_ok = ev_off[e] > o if ev_side[e] == AFTER else ev_off[e] < o
        if side_ok and (ev_trig[e] == UNFENCE or _holds(vals, is_, pil, ev_broker[e])
                        or _holds(vals, es, pel, ev_broker[e])):
            if chosen >= 0:
                ambiguous = True
            else:
                chosen = e
        e += 1
    if chosen < 0:
        return ALTER, -1
    return (-1 if ambiguous else ev_trig[chosen]), chosen


@njit(cache=True, nogil=True)
def _events(ev_batch, ev_off, ev_trig, ev_broker, ev_side, base, bits, batch, offset, prev, h_src, h_off, h_vals,
            trig, chosen_ev):
    b_batch, b_off, b_trig, b_broker = borrow(ev_batch), borrow(ev_off), borrow(ev_trig), borrow(ev_broker)
    b_side, b_bits, vals = borrow(ev_side), borrow(bits), borrow(h_vals)
    for i in range(len(offset)):
        # most batches carry no event: said here, before the call's arguments are read (with them: 4.2 ns a record,
        # without: 1.3 on the benchmark's 1.44 M-record group)
        if not _may_carry(b_bits, base, batch[i]):
            trig[i] = ALTER
            chosen_ev[i] = -1
            continue
        h = prev[i]
        t, e = batch_event(b_batch, b_off, b_trig, b_broker, b_side, base, b_bits, batch[i], offset[i], vals,
                           h_src[h, I], h_off[I, h + 1] - h_off[I, h], h_src[h, E], h_off[E, h + 1] - h_off[E, h])
        trig[i] = t
        chosen_ev[i] = e


def event_index(ev: np.ndarray, n: int) -> tuple:
    """What :func:`batch_event` reads of the broker events ``ev`` (``explain._event_rows``: batch, offset, trigger,
    broker, side, label; sorted by batch) for ``n`` records: their first five columns (contiguous, read-only int64),
    the first batch and the bitmap of the batches from it that carry an event (empty when it would be much larger
    than the records and events: every record then searches the events)."""
    ev_batch = np.ascontiguousarray(ev[:, 0])
    base, bits = 0, np.zeros(0, np.uint64)
    if len(ev_batch):
        base = int(ev_batch[0])
        span = int(ev_batch[-1]) - base + 1
        if span <= 64 * (n + len(ev_batch)) + (1 << 20):  # else every record searches the events
            bits = np.zeros((span + 63) // 64, np.uint64)
            k = ev_batch - base
            np.bitwise_or.at(bits, k >> 6, np.left_shift(np.uint64(1), (k & 63).astype(np.uint64)))
    i64 = np.int64
    return (_ro(ev_batch, i64), _ro(ev[:, 1], i64), _ro(ev[:, 2], i64), _ro(ev[:, 3], i64), _ro(ev[:, 4], i64), base,
            _ro(bits, np.uint64))


def batch_events(ev: np.ndarray, batch: np.ndarray, offset: np.ndarray, prev: np.ndarray, before: tuple):
    """(trigger int8, index in ``ev`` int64) per record, as ``explain._batch_event``: ``ev`` the broker events
    sorted by batch (``explain._event_rows``: batch, offset, trigger, broker, side, label), ``batch`` / ``offset``
    each record's, ``prev`` the history row before each record, ``before`` the history rows' lists as
    ``explain.before_lists`` gives them (starts, running lengths, values; int32)."""
    n = len(offset)
    trig = np.empty(n, np.int8)
    chosen = np.empty(n, np.int64)
    i64 = np.int64
    _events(*event_index(ev, n), _ro(batch, i64), _ro(offset, i64), _ro(prev, i64), _ro(before[0], np.int32),
            _ro(before[1], np.int32), _ro(before[2], np.int32), trig, chosen)
    return trig, chosen


# ------------------------------------------------------------------------------------------ trigger labels
@njit(cache=True, nogil=True)
def _label_codes(trig, chosen_ev, ev_trig, ev_label, ev_code, unknown, nb, out):
    for i in range(len(trig)):
        t = trig[i]
        c = chosen_ev[i]
        name = t if t >= 0 else unknown
        b = 0
        if c >= 0:
            b = ev_code[c]
            if t >= 0 and t == ev_trig[c]:  # decided by its event: named after the event's record
                name = ev_label[c]
        out[i] = name * nb + b


def label_codes(trig: np.ndarray, chosen_ev: np.ndarray, ev: np.ndarray, unknown: int) -> tuple[np.ndarray, list]:
    """(code per record, the brokers of the events, ascending): each record's trigger label as one int32 code,
    ``name * (brokers + 1) + broker``, where name is the record's trigger (``unknown`` where it is -1: two
    events), or the event's own label (``ev[:, 5]``) when the chosen event decided it, and broker is 0 without an
    event, else 1 + the index of the event's broker.  One pass (as NumPy gathers and masks: ten passes over the
    change records, 3 % of a replay)."""
    brokers = np.unique(ev[:, 3]) if len(ev) else np.zeros(0, np.int64)
    ev_code = np.searchsorted(brokers, ev[:, 3]) + 1 if len(ev) else np.zeros(0, np.int64)
    out = np.empty(len(trig), np.int32)
    i64 = np.int64
    _label_codes(_ro(trig, np.int8), _ro(chosen_ev, i64), _ro(ev[:, 2], i64), _ro(ev[:, 5], i64), _ro(ev_code, i64),
                 int(unknown), len(brokers) + 1, out)
    return out, brokers.tolist()


def warm() -> None:
    """Compile the loops (or load them from numba's cache) with the argument types of a real run."""
    i64 = np.zeros(1, np.int64)
    i32 = np.zeros(1, np.int32)
    before = (np.zeros((1, 7), np.int32), np.zeros((7, 2), np.int32), i32)
    topic_settings(pa.table({"topic_id": pa.array(["t"]), "offset": pa.array([0], pa.int64()),
                             "metadata_version": pa.array([1], pa.int16()), "elr_enabled": pa.array([True]),
                             "effective_min_isr": pa.array([1], pa.int32())}), pa.array(["t"]), i32, i64)
    label_codes(np.zeros(1, np.int8), i64, np.zeros((1, 6), np.int64), 1)
    for positions in (np.int32, np.int64):  # the fold's running lengths; the tape's ids
        extent(i64, np.zeros(2, positions), i32)
    for span in (1, 1 << 40):  # with the bitmap, and past its size
        batch_events(np.array([[0, 1, UNFENCE, 0, AFTER, 0], [span, 1, UNFENCE, 0, AFTER, 0]], np.int64), i64, i64,
                     i64, before)
