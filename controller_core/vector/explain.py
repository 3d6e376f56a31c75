"""Vectorized recomputation of every PartitionChangeRecord, and the bridge to the scalar reference.

``explain(bronze, history, brokers, topics, lay)`` labels every PartitionChangeRecord with its primary
trigger and whether the change builder reproduces it: the compiled loop
(:mod:`controller_core.kernels.recompute_pass`) given the layout, the NumPy builder
(:mod:`controller_core.vector.recompute`, the loop's reference) without it or for what the loop does not take.
:func:`scalar_batches` hands the records of the partitions it could not explain (with the
cluster-level records they depend on) to the scalar reference; :func:`cluster_level_recs` feeds the
timelines.  :mod:`controller_core.pipeline` wires these steps.
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller_core.vector import recompute as V
from controller_core.brokers import active_matrix, active_table
from controller_core.kernels import context, judge_pass, recompute_pass
from controller_core.kernels.lookup import gather
from controller_core.kernels.layout import CHANGE, LISTS, R, Layout
from controller_core.codec.arrowutil import (NUMPY_TYPES, STRING_CODES, column_ints, from_numpy, strings, to_numpy,
                                             valid_at)
from controller_core.codec.bronze import by_type
from controller_core.vector.fold import _array, _raw, _valid
from controller_core.replay import SKIP, Rec

PCR = "PARTITION_CHANGE_RECORD"
# the record types a replay passes over (NoOps, transaction markers, snapshot and KRaft control records): the
# rows stay in the replay's input (removing them copied every column), and the steps that read rows by type
# leave them out here
_SKIPPED = tuple(sorted(SKIP))
_TYPED = ("record_type", "topic_id", "partition_id", "replicas", "isr", "removing_replicas", "adding_replicas",
          "leader", "leader_epoch", "partition_epoch", "leader_recovery_state", "directories",
          "eligible_leader_replicas", "last_known_elr")
# broker events: (record type, data key, value) -> (trigger, the broker record comes after its changes?)
_AFTER, _BEFORE = 1, 0


def _bools(col) -> np.ndarray:
    return np.asarray(col, bool)


def _of_type(col, names: tuple[str, ...]) -> np.ndarray:
    """record_type in ``names`` (null: False), plain or dictionary-encoded."""
    if pa.types.is_dictionary(col.type):
        arr = _array(col.unify_dictionaries() if isinstance(col, pa.ChunkedArray) else col)
        lut = np.array([v in names for v in arr.dictionary.to_pylist()] + [False], bool)
        return lut[np.asarray(arr.indices.fill_null(len(lut) - 1), np.int64)]
    hit = pc.equal(col, names[0]) if len(names) == 1 else pc.is_in(col, value_set=strings(list(names)))
    return _bools(pc.fill_null(hit, False))


_OTHER, _SKIP, _PART, _CHANGE = range(4)  # (_CHANGE: where a PartitionChangeRecord is told from a PartitionRecord)


def _partition_or_skipped(bronze: pa.Table) -> np.ndarray:
    """Per bronze row: _PART (a partition record), _SKIP (a type the replay passes over) or _OTHER."""
    return by_type(bronze, {**dict.fromkeys(_SKIPPED, _SKIP), "PARTITION_RECORD": _PART, PCR: _PART}, _OTHER, np.int8)


def _ints_at(col, rows: np.ndarray | None, fill: int, dtype=np.int32) -> np.ndarray:
    """A fixed-width column's values at ``rows`` (None: all) as ``dtype``, nulls as ``fill``."""
    arr = _array(col)
    vals = _raw(arr, arr.type.to_pandas_dtype())
    vals = vals if rows is None else vals[rows]
    if arr.null_count:
        ok = _valid(arr)
        vals = np.where(ok if rows is None else ok[rows], vals, fill)
    return vals.astype(dtype, copy=False)


def _state_ints(col) -> np.ndarray:
    """A history column of the partition state (leader, recovery state) as int32, its null rows holding whatever
    they hold: the change builder reads it only at the row before a change record that is not an orphan, a row with
    a state (filling the nulls was 3.5 ns a record of the benchmark's group, for rows never read)."""
    arr = _array(col)
    return _raw(arr, NUMPY_TYPES[arr.type]).astype(np.int32, copy=False)


def _row_of(keys: np.ndarray, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
    """rows[searchsorted(keys, q)] for queries present in strictly increasing ``keys``: a direct table
    when the keys' range is dense, else one sort of the queries (a searchsorted of unsorted queries
    into millions of keys is mostly cache misses)."""
    if not len(q):
        return np.zeros(0, np.int64)
    lo, hi = int(keys[0]), int(keys[-1])
    if hi - lo <= 16 * len(keys) + (1 << 20) and (len(keys) < 2 or (keys[1:] > keys[:-1]).all()):
        lut = np.zeros(hi - lo + 1, rows.dtype)
        lut[keys - lo] = rows
        return lut[np.clip(q - lo, 0, hi - lo)]
    order = np.argsort(q, kind="stable")
    out = np.empty(len(q), rows.dtype)
    out[order] = rows[np.minimum(np.searchsorted(keys, q[order]), len(rows) - 1)]
    return out


# label codes beyond the recompute's triggers (V.TRIGGER_NAMES): events decided like a fence, named as written
CONTROLLED_SHUTDOWN, UNREGISTER = len(V.TRIGGER_NAMES), len(V.TRIGGER_NAMES) + 1
LABEL_NAMES = V.TRIGGER_NAMES + ["controlled_shutdown", "unregister"]


def _broker_events(bronze: pa.Table, brokers: pa.Table):
    """(batch, offset, trigger, broker, side, label) of the broker records that trigger partition changes, read
    from the typed bronze columns (``fenced`` / ``in_controlled_shutdown``: the state the record sets,
    null when it leaves it unchanged)."""
    mask = by_type(bronze, dict.fromkeys((
        "BROKER_REGISTRATION_CHANGE_RECORD", "FENCE_BROKER_RECORD", "UNFENCE_BROKER_RECORD",
        "UNREGISTER_BROKER_RECORD", "REGISTER_BROKER_RECORD"), True), False, bool)
    rows = bronze.select(["record_type", "offset", "batch_base_offset", "broker_id", "fenced",
                          "in_controlled_shutdown", "incarnation_id"]).filter(from_numpy(mask))
    rtype, off, batch, bid, fenced, cs, inc = (rows.column(c).to_pylist() for c in rows.column_names)
    # previous incarnation of each broker, to tell a new incarnation (unclean shutdown) from an amend
    b_id = to_numpy(brokers.column("broker_id"), np.int64)
    b_off = to_numpy(brokers.column("offset"), np.int64)
    order = np.lexsort((b_off, b_id))
    keys = b_id[order] * V.BIG + b_off[order]
    b_id_o = b_id[order]
    b_inc_o = brokers.column("incarnation_id").take(from_numpy(order)).to_pylist() if len(order) else []
    ev = []
    for i, t in enumerate(rtype):
        b = bid[i]
        if t == "BROKER_REGISTRATION_CHANGE_RECORD":
            if fenced[i] is True:
                ev.append((batch[i], off[i], V.FENCE, b, _AFTER, V.FENCE))
            elif fenced[i] is False:
                ev.append((batch[i], off[i], V.UNFENCE, b, _BEFORE, V.UNFENCE))
            if cs[i]:  # decided like a fence (§2.2), labelled as what it is
                ev.append((batch[i], off[i], V.FENCE, b, _BEFORE, CONTROLLED_SHUTDOWN))
        elif t == "FENCE_BROKER_RECORD":
            ev.append((batch[i], off[i], V.FENCE, b, _AFTER, V.FENCE))
        elif t == "UNREGISTER_BROKER_RECORD":
            ev.append((batch[i], off[i], V.FENCE, b, _AFTER, UNREGISTER))
        elif t == "UNFENCE_BROKER_RECORD":
            ev.append((batch[i], off[i], V.UNFENCE, b, _BEFORE, V.UNFENCE))
        else:
            j = int(np.searchsorted(keys, b * V.BIG + off[i], side="left")) - 1
            prev = b_inc_o[j] if j >= 0 and b_id_o[j] == b else None
            if prev is not None and prev != inc[i]:
                ev.append((batch[i], off[i], V.UNCLEAN_SHUTDOWN, b, _AFTER, V.UNCLEAN_SHUTDOWN))
    return ev


def _topic_codes(col, rows: np.ndarray, dictionary: pa.Array) -> np.ndarray:
    """Code in ``dictionary`` (-1: absent) of the topic id at each of ``rows``.  History rows are
    grouped by partition, so the ids come in long runs: one lookup per run, no hash per row."""
    if pa.types.is_dictionary(col.type):
        arr = _array(col.unify_dictionaries() if isinstance(col, pa.ChunkedArray) else col)
        lut = np.append(np.asarray(pc.fill_null(pc.index_in(arr.dictionary, value_set=dictionary), -1), np.int64), -1)
        return lut[np.asarray(arr.indices.fill_null(len(lut) - 1), np.int64)[rows]]
    changes, heads = [], []
    for c in (col.chunks if isinstance(col, pa.ChunkedArray) else [col]):
        change = np.ones(len(c), bool)
        if len(c) > 1:
            change[1:] = _bools(pc.fill_null(pc.not_equal(c.slice(1), c.slice(0, len(c) - 1)), True))
        changes.append(change)
        heads.append(c.take(from_numpy(np.flatnonzero(change))).cast(pa.string()))
    if not changes:
        return np.zeros(0, np.int64)
    run = np.cumsum(np.concatenate(changes), dtype=np.int64) - 1
    code = pc.fill_null(pc.index_in(pa.concat_arrays(heads), value_set=dictionary), -1)
    return np.asarray(code, np.int64)[run[rows]]


# the trigger labels are few distinct strings over every change record: dictionary-encoded, made once each (so are
# the topic ids, as the history holds them)
LABEL_TYPE = STRING_CODES
EXPLAINED_SCHEMA = pa.schema([  # what explain returns, one row per PartitionChangeRecord
    ("offset", pa.int64()), ("topic_id", STRING_CODES), ("partition_id", pa.int32()), ("trigger", LABEL_TYPE),
    ("matched", pa.bool_()), ("modelled", pa.bool_())])


def explain(bronze: pa.Table, history: pa.Table, brokers: pa.Table, topics: pa.Table,
            lay: Layout | None = None, rows: np.ndarray | None = None, changes: np.ndarray | None = None,
            refs: tuple | None = None) -> pa.Table:
    """Per PartitionChangeRecord: offset, topic_id, partition_id, trigger, matched, modelled.

    With ``lay`` (the dense layout of ``bronze``, :func:`controller_core.kernels.layout.build`) the records are
    judged by the compiled builder (:mod:`controller_core.kernels.recompute_pass`), which reads the history and
    the layout in place; without it, or for what that loop does not take (more than 64 replica positions, broker
    ids it cannot index), by the NumPy builder (:func:`controller_core.vector.recompute.recompute`, its reference).
    Both give the same table.  ``rows``: the input row of each history row, when the fold says so
    (:class:`controller_core.kernels.fold_pass.Fold`); else each change record is found by its offset.
    ``changes``: the history rows of the change records that are not orphans, when the fold says which.
    ``refs``: where the compiled fold's history rows have their lists on the layout's tape (``Fold.refs``), read
    there instead of the history's list columns, which a findings-only replay does not make."""
    idx = changes if changes is not None else np.flatnonzero(
        _of_type(history.column("record_type"), (PCR,)) & ~_bools(history.column("orphan")))
    if len(idx) == 0:
        return EXPLAINED_SCHEMA.empty_table()
    offset = _ints_at(history.column("offset"), idx, 0, np.int64)
    before = before_lists(history, refs, lay)
    judged = _judge_compiled(bronze, history, brokers, topics, lay, idx, offset, rows, before) \
        if lay is not None and before is not None else None
    if judged is None:
        judged = _judge_numpy(bronze, *_with_lists(history, before, idx), brokers, topics, offset)
    trig, chosen_ev, ev, matched, modelled = judged
    return _explained(offset, _take(history.column("topic_id"), idx),
                      _ints_at(history.column("partition_id"), idx, 0), trig, chosen_ev, ev, matched, modelled)


def explain_unfolded(bronze: pa.Table, lay: Layout, prepared, brokers: pa.Table, topics: pa.Table) -> pa.Table | None:
    """:func:`explain`'s table of ``bronze`` without a history: the fold and the compiled builder in one pass
    (:mod:`controller_core.kernels.judge_pass`; ``prepared``: its ``prepare`` of ``bronze`` and ``lay``), for a
    replay that keeps no history (``verify``).  None where that pass leaves a record to the NumPy builder: the
    caller folds and explains."""
    ev = _event_rows(_broker_events(bronze, brokers))
    judged = judge_pass.judge(bronze, lay, prepared, brokers, topics, ev)
    if judged is None:
        return None
    offset, topic, partition_id, trig, chosen_ev, matched, modelled = judged
    topic_id = pa.DictionaryArray.from_arrays(from_numpy(topic), lay.topic_dict, safe=False)  # (the layout's codes)
    return _explained(offset, topic_id, partition_id, trig, chosen_ev, ev, matched, modelled)


def _explained(offset, topic_id, partition_id, trig, chosen_ev, ev, matched, modelled) -> pa.Table:
    """EXPLAINED_SCHEMA's table: the trigger labels made, matched and modelled only where a trigger decided."""
    return pa.table({"offset": from_numpy(offset), "topic_id": topic_id, "partition_id": from_numpy(partition_id),
                     "trigger": _labels(trig, chosen_ev, ev), "matched": from_numpy(matched & (trig >= 0)),
                     "modelled": from_numpy(modelled & (trig >= 0))}, schema=EXPLAINED_SCHEMA)


def _judge_numpy(bronze, history, idx, brokers, topics, offset, width: int | None = None):
    """(trigger, chosen event, events, matched, modelled) by the NumPy builder over padded matrices (``width``:
    the replica positions to pad to, as for a larger set of records; None: the widest list of these)."""
    before = _state_before(history, idx - 1, width)  # the partition's row before each change record
    rec, batch = _as_written(bronze, offset)
    trig, chosen_ev, ev = _primary_trigger(bronze, brokers, _padded_members(before), rec, batch, offset)
    mv, elr_on, min_isr = _topic_settings(topics, history, idx, offset)
    ctx = V.Context(trigger=np.maximum(trig, 0), broker=_event_broker(ev, chosen_ev), mv=mv, elr_on=elr_on,
                    min_isr=min_isr, check_lkl=mv >= 22, active=active_matrix(brokers, before["replicas"], offset))
    res = V.recompute(before, rec, ctx)
    return trig, chosen_ev, ev, res.matched, res.modelled


def _flat_list(col):
    """A list<int32> column in place: (offsets into the values, the values as int32), null rows of length 0
    (Arrow lets a null row span values: such a column is repacked, which the fold's own output never needs)."""
    arr = _array(col)
    offs = np.asarray(arr.offsets)
    if arr.null_count:
        lens = np.diff(offs)
        valid = np.asarray(arr.is_valid())
        if lens[~valid].any():
            lens = np.where(valid, lens, 0)
            fresh = np.zeros(len(offs), np.int64)
            np.cumsum(lens, out=fresh[1:])
            at = np.repeat(offs[:-1].astype(np.int64) - fresh[:-1], lens) + np.arange(int(fresh[-1]))
            vals = np.asarray(arr.values.to_numpy(zero_copy_only=False), np.int32)[at] if len(at) else \
                np.zeros(1, np.int32)
            return fresh, vals
    vals = arr.values
    vals = np.asarray(vals.to_numpy(zero_copy_only=False), np.int32) if len(vals) else np.zeros(1, np.int32)
    return offs, vals


def before_lists(history: pa.Table, refs: tuple | None = None, lay: Layout | None = None):
    """The history rows' six lists (layout.LISTS order) as the compiled loops read them: (starts int32 (rows, >= 6),
    running lengths int32 (>= 6, rows + 1), values int32) -- list f of row h is ``values[starts[h, f]:]``,
    ``lengths[f, h + 1] - lengths[f, h]`` long.  With ``refs`` (the compiled fold's ``Fold.refs``) the values are
    the layout's tape, where the fold found them (no list column was made); else the history's list columns,
    joined (null rows empty).  None when they pass 32-bit positions."""
    if refs is not None:
        return refs[0], refs[1], lay.tape
    m = history.num_rows
    starts = np.empty((m, len(LISTS)), np.int32)
    lengths = np.empty((len(LISTS), m + 1), np.int32)
    parts, base = [], 0
    for f, name in enumerate(LISTS):
        offs, vals = _flat_list(history.column(name))
        if base + len(vals) >= 1 << 31:
            return None
        starts[:, f] = offs[:-1] + base
        lengths[f] = offs
        parts.append(vals)
        base += len(vals)
    return starts, lengths, np.concatenate(parts).astype(np.int32, copy=False)


def _with_lists(history: pa.Table, before, idx: np.ndarray) -> tuple[pa.Table, np.ndarray]:
    """(a history, the rows of ``idx`` in it) with the list columns :func:`_judge_numpy` reads: ``history`` itself
    when it has them, else its rows ``idx`` and the row before each (interleaved) with their lists from ``before``
    -- a findings-only replay's history has none, and only the few records the compiled builder leaves come here."""
    if "replicas" in history.schema.names:
        return history, idx
    rows = np.stack([idx - 1, idx], axis=1).ravel()
    sub = history.take(from_numpy(rows))
    src, off, vals = before
    for f, name in enumerate(LISTS):
        lens = (off[f, rows + 1] - off[f, rows]).astype(np.int64)
        at = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(lens, out=at[1:])
        gather = np.repeat(src[rows, f].astype(np.int64) - at[:-1], lens) + np.arange(int(at[-1]))
        sub = sub.append_column(name, pa.ListArray.from_arrays(from_numpy(at.astype(np.int32)),
                                                              from_numpy(vals[gather].astype(np.int32))))
    return sub, np.arange(1, len(rows), 2)


def _judge_compiled(bronze, history, brokers, topics, lay: Layout, idx, offset, rows, before):
    """:func:`_judge_numpy` by the compiled builder, reading the history rows' lists before the records where
    ``before`` (:func:`before_lists`) says and the records' layout rows in place; None for what it does not take
    (the NumPy builder judges those inputs)."""
    prev = idx - 1  # the partition's row before each change record
    src, off, vals = before
    # the NumPy form pads every record to the widest replica list; the broker ids the lookup must index: those of
    # every list (a superset of the replicas')
    width, r_lo, r_hi = context.extent(prev, off[R], vals)
    width = max(width, 1)
    if width > recompute_pass.MAX_POSITIONS:
        return None
    lookup = active_table(brokers, offset, r_lo, r_hi)
    if lookup is None:
        return None
    if rows is not None:  # the layout row each change record's history row was folded from
        pos = rows[idx]
    else:
        pcr_rows = np.flatnonzero(lay.kind == CHANGE)
        pos = _row_of(lay.offset[pcr_rows], pcr_rows, offset)
    # (the records' layout rows in the history's order: scattered over the log, gathered fetching ahead)
    batch = gather(_ints_at(bronze.column("batch_base_offset"), None, 0, np.int64), pos)
    ev = _event_rows(_broker_events(bronze, brokers))
    trig, chosen_ev = context.batch_events(ev, batch, offset, prev, before)
    mv, elr_on, min_isr = context.topic_settings(topics, lay.topic_dict, gather(lay.topic, pos), offset)
    table, at, lut, _ = lookup
    at = at.astype(np.int64, copy=False)  # one machine function for every broker table size (kernels/recompute_pass)
    matched, modelled, unjudged = recompute_pass.recompute(
        prev, pos, width, src, off, vals,
        _state_ints(history.column("leader")), _state_ints(history.column("leader_recovery_state")),
        lay.ints, lay.lists, lay.tape, trig, _event_broker(ev, chosen_ev), mv, elr_on, min_isr, table, at, lut)
    left = np.flatnonzero(unjudged)
    if len(left):  # replicas repeating a broker (or a repeating ISR): the NumPy builder, padded to the same width
        t2, c2, _, m2, d2 = _judge_numpy(bronze, *_with_lists(history, before, idx[left]), brokers, topics,
                                         offset[left], width)
        trig[left], chosen_ev[left], matched[left], modelled[left] = t2, c2, m2, d2
    return trig, chosen_ev, ev, matched, modelled


def _state_before(history: pa.Table, prev: np.ndarray, width: int | None = None) -> dict:
    """The partition state at history rows ``prev`` as ``recompute`` takes it (column-major padded
    matrices, gathered without a take; ``width``: replica positions, None: the widest list)."""
    R, rl, _ = V.padded_rows(history.column("replicas"), prev, width)
    w = R.shape[1]
    before = {"replicas": R, "replicas_len": rl, "leader": _ints_at(history.column("leader"), prev, 0),
              "lrs": _ints_at(history.column("leader_recovery_state"), prev, 0)}
    for key, col in (("isr", "isr"), ("elr", "eligible_leader_replicas"), ("lke", "last_known_elr")):
        mat, ln, _ = V.padded_rows(history.column(col), prev)
        before[key], before[key + "_len"] = V._fit(mat, max(w, mat.shape[1])), ln
    before["adding_len"] = _list_lens(history.column("adding_replicas"), prev)
    before["removing_len"] = _list_lens(history.column("removing_replicas"), prev)
    return before


def _as_written(bronze: pa.Table, offset: np.ndarray) -> tuple[dict, np.ndarray]:
    """(the change record of each offset as ``recompute`` takes it, its batch), from the bronze row of
    the same offset."""
    b_off = _ints_at(bronze.column("offset"), None, 0, np.int64)
    pcr_rows = np.flatnonzero(by_type(bronze, {PCR: True}, False, bool))
    pos = _row_of(b_off[pcr_rows], pcr_rows, offset)
    rec = {"leader": _ints_at(bronze.column("leader"), pos, -2),
           "lrs": _ints_at(bronze.column("leader_recovery_state"), pos, -1)}
    for key, col in (("isr", "isr"), ("elr", "eligible_leader_replicas"), ("lke", "last_known_elr")):
        rec[key], rec[key + "_len"], rec[key + "_valid"] = V.padded_rows(bronze.column(col), pos)
    other = np.zeros(len(offset), bool)
    for col in ("replicas", "removing_replicas", "adding_replicas", "directories"):
        c = bronze.column(col)
        if len(c) - c.null_count:
            other |= _bools(pc.is_valid(c))[pos]
    rec["other_written"] = other
    return rec, _ints_at(bronze.column("batch_base_offset"), pos, 0, np.int64)


def _primary_trigger(bronze: pa.Table, brokers: pa.Table, members, rec: dict, batch: np.ndarray,
                     offset: np.ndarray):
    """(trigger code per record, -1: two broker events could explain it; the index in ``ev`` of the
    event that gave it, -1: none; the broker events as rows (batch, offset, trigger, broker, side))."""
    ev = _event_rows(_broker_events(bronze, brokers))
    trig, chosen_ev = _batch_event(ev, members, batch, offset)
    return _election_or_alter(trig, rec), chosen_ev, ev


def _event_rows(events: list) -> np.ndarray:
    """The broker events as an int64 matrix sorted by batch (stably)."""
    if not events:
        return np.zeros((0, 6), np.int64)
    ev = np.array(events, dtype=np.int64)
    return ev[np.argsort(ev[:, 0], kind="stable")]


def _padded_members(before: dict):
    """``members`` of :func:`_batch_event` over the padded state matrices."""
    return lambda rows: (before["isr"][rows], before["elr"][rows])


def _batch_event(ev: np.ndarray, members, batch: np.ndarray, offset: np.ndarray):
    """(trigger, index in ``ev``) of the single broker event of each record's batch that concerns its
    partition, on the right side of the record; (ALTER, -1) without one, (-1, first event) with several.
    ``members(rows)``: the ISR and ELR before the records ``rows`` (padded matrices); asked only for the
    records sharing their batch with a broker event."""
    trig = np.full(len(offset), V.ALTER, np.int8)
    chosen_ev = np.full(len(offset), -1, np.int64)
    if not len(ev):
        return trig, chosen_ev
    ev_batch = np.ascontiguousarray(ev[:, 0])
    lo, hi = V.count_below(ev_batch, batch, upto=True)
    cand = np.flatnonzero(hi > lo)  # records sharing their batch with a broker event
    if not len(cand):
        return trig, chosen_ev
    lo_c, hi_c, off_c = lo[cand], hi[cand], offset[cand]
    isr_c, elr_c = members(cand)
    chosen = np.full(len(cand), -1, np.int64)
    ambiguous = np.zeros(len(cand), bool)
    for k in range(int((hi_c - lo_c).max())):
        has = lo_c + k < hi_c
        ei = np.minimum(lo_c + k, len(ev) - 1)
        e = ev[ei]
        side_ok = np.where(e[:, 4] == _AFTER, e[:, 1] > off_c, e[:, 1] < off_c)
        # an event concerns this partition: unfence (every leaderless partition) or its broker is in
        # the ISR / ELR the trigger removes it from
        relevant = has & side_ok & ((e[:, 2] == V.UNFENCE) | _member(isr_c, e[:, 3]) | _member(elr_c, e[:, 3]))
        ambiguous |= relevant & (chosen >= 0)
        chosen = np.where(relevant & (chosen < 0), ei, chosen)
    chosen_ev[cand] = chosen
    picked = chosen >= 0
    # two events could explain it: the scalar reference decides
    trig[cand[picked]] = np.where(ambiguous[picked], -1, ev[chosen[picked], 2])
    return trig, chosen_ev


def _election_or_alter(trig: np.ndarray, rec: dict) -> np.ndarray:
    """Records without a broker event: an election if the leader moved without an ISR request, else
    AlterPartition."""
    plain = trig == V.ALTER
    leader_moved = rec["leader"] != -2
    unclean_shape = leader_moved & rec["isr_valid"] & (rec["isr_len"] == 1) & (rec["isr"][:, 0] == rec["leader"]) \
        & (rec["lrs"] == 1)
    return np.where(plain & unclean_shape, np.int8(V.UNCLEAN_ELECTION),
                    np.where(plain & leader_moved & ~rec["isr_valid"], np.int8(V.PREFERRED_ELECTION), trig))


def _event_broker(ev: np.ndarray, chosen_ev: np.ndarray) -> np.ndarray:
    """The broker of each record's chosen event, -1 without one."""
    return np.append(ev[:, 3], -1).astype(np.int32)[chosen_ev]  # chosen_ev -1: the appended -1


def _topic_settings(topics: pa.Table, history: pa.Table, idx: np.ndarray, offset: np.ndarray):
    """(metadata version, ELR in effect, effective min ISR) of each record's topic just before it (the NumPy form;
    with the layout, :func:`controller_core.kernels.context.topic_settings`)."""
    t_enc = pc.dictionary_encode(_array(topics.column("topic_id")).cast(pa.string()))
    t_code = np.asarray(t_enc.indices.fill_null(-1), np.int64)
    r_code = _topic_codes(history.column("topic_id"), idx, t_enc.dictionary)
    t_off = to_numpy(topics.column("offset"), np.int64)
    t_order = np.lexsort((t_off, t_code))
    t_keys = t_code[t_order] * V.BIG + t_off[t_order]
    j = V.lookup(t_keys, r_code * V.BIG + offset)
    found = (j >= 0) & (t_code[t_order][np.maximum(j, 0)] == r_code) & (r_code >= 0)
    tj = t_order[np.maximum(j, 0)] if len(t_order) else np.zeros(len(idx), np.int64)

    def tcol(name, default, dtype):
        vals = to_numpy(pc.fill_null(topics.column(name), default), dtype) if topics.num_rows else np.zeros(1, dtype)
        return np.where(found, vals[tj], dtype(default))

    return (tcol("metadata_version", 0, np.int16), tcol("elr_enabled", False, np.bool_),
            tcol("effective_min_isr", 1, np.int32))


def _member(mat: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``recompute.member`` one replica position at a time (column-major matrices)."""
    hit = mat[:, 0] == b
    for j in range(1, mat.shape[1]):
        hit |= mat[:, j] == b
    return hit & (b >= 0)


def _list_lens(col, rows: np.ndarray) -> np.ndarray:
    """Lengths of a list column at ``rows`` (null: 0)."""
    arr = _array(col)
    offs = np.asarray(arr.offsets)
    lens = (offs[rows + 1] - offs[rows]).astype(np.int64)
    return np.where(_valid(arr)[rows], lens, 0) if arr.null_count else lens


def _take(col, rows: np.ndarray):
    """The topic ids of ``rows``, as the history holds them (codes over its distinct ids, the fold's; a plain
    history's strings are encoded here)."""
    out = col.take(from_numpy(rows))
    return out if pa.types.is_dictionary(out.type) else out.cast(STRING_CODES)


def _labels(trig: np.ndarray, chosen_ev: np.ndarray, ev: np.ndarray) -> pa.Array:
    """Trigger labels such as "fence(3)": each distinct (trigger, broker) formatted once.  A change decided by a
    broker event is named after the event's record (a controlled shutdown or an unregistration is decided like
    a fence, but labelled ``controlled_shutdown(b)`` / ``unregister(b)``, as the scalar reference names them)."""
    names = LABEL_NAMES + ["?"]
    codes, brokers = context.label_codes(trig, chosen_ev, ev, len(names) - 1)
    texts = [name + (f"({b})" if k else "") for name in names for k, b in enumerate([None] + brokers)]
    # (each code is a (name, broker) pair of these texts by construction: not checked again, row by row)
    return pa.DictionaryArray.from_arrays(from_numpy(codes), pa.array(texts, pa.string()), safe=False)


def record_data(row: dict) -> dict:
    """A PartitionRecord / PartitionChangeRecord's data (Kafka JSON form) from its typed bronze
    columns, for rows that travel without ``data_json``."""
    d = {"partitionId": row["partition_id"], "topicId": row["topic_id"]}
    if row["record_type"] == "PARTITION_RECORD":
        d.update(replicas=row["replicas"], isr=row["isr"], removingReplicas=row["removing_replicas"] or [],
                 addingReplicas=row["adding_replicas"] or [], leader=row["leader"], leaderEpoch=row["leader_epoch"],
                 partitionEpoch=row["partition_epoch"])
        if row["leader_recovery_state"]:
            d["leaderRecoveryState"] = row["leader_recovery_state"]
        for key, col in (("directories", "directories"), ("eligibleLeaderReplicas", "eligible_leader_replicas"),
                         ("lastKnownElr", "last_known_elr")):
            if row[col]:
                d[key] = row[col]
        return d
    for key, col in (("isr", "isr"), ("replicas", "replicas"), ("removingReplicas", "removing_replicas"),
                     ("addingReplicas", "adding_replicas"), ("directories", "directories"),
                     ("eligibleLeaderReplicas", "eligible_leader_replicas"), ("lastKnownElr", "last_known_elr")):
        if row[col] is not None:
            d[key] = row[col]
    if row["leader"] is not None and row["leader"] != -2:
        d["leader"] = row["leader"]
    if row["leader_recovery_state"] is not None and row["leader_recovery_state"] != -1:
        d["leaderRecoveryState"] = row["leader_recovery_state"]
    return d


def scalar_batches(bronze: pa.Table, partitions: set[tuple[str, int]] | None) -> list[list[Rec]]:
    """The replay batches the scalar reference needs for ``partitions`` (None: all): every
    cluster-level record and the partition records of those partitions, in log order."""
    kind = _partition_or_skipped(bronze)
    part = kind == _PART
    keep = kind == _OTHER
    if partitions is None:
        keep |= part
    elif partitions:
        # partition records of the topics named, then the exact (topic, partition) test on those only
        tid = bronze.column("topic_id")
        topics = strings(sorted({t for t, _ in partitions if t is not None}))
        named = _bools(pc.fill_null(pc.is_in(tid, value_set=topics), False))
        if any(t is None for t, _ in partitions):
            named |= _bools(pc.is_null(tid))
        cand = np.flatnonzero(part & named)
        sub = bronze.select(["topic_id", "partition_id"]).filter(from_numpy(part & named))
        hit = [(t, p) in partitions for t, p in zip(sub.column("topic_id").to_pylist(),
                                                     sub.column("partition_id").to_pylist())]
        keep[cand[np.array(hit, bool)]] = True
    rows = bronze.filter(from_numpy(keep))
    cols = {c: rows.column(c).to_pylist() for c in ("offset", "timestamp", "batch_base_offset", "record_type",
                                                      "record_version", "data_json", "source_file")}
    parsed = _parsed(cols["data_json"])
    typed = None
    batches: list[list[Rec]] = []
    key = None
    for i in range(rows.num_rows):
        k = (cols["source_file"][i], cols["batch_base_offset"][i])
        ts = cols["timestamp"][i]
        data = parsed[i]
        if data is None:  # a partition record sent without its JSON: rebuild it from the typed columns
            if typed is None:
                typed = {c: rows.column(c).to_pylist() for c in _TYPED}
            data = record_data({c: typed[c][i] for c in _TYPED})
        r = Rec(cols["offset"][i], int(ts.timestamp() * 1000) if ts else 0, cols["batch_base_offset"][i],
                cols["record_type"][i], cols["record_version"][i], data, cols["source_file"][i])
        if batches and k == key:
            batches[-1].append(r)
        else:
            batches.append([r])
        key = k
    return batches


def _parsed(texts: list) -> list:
    """Each record's data JSON parsed (None where it has none).  The texts are JSON objects the decoder wrote: joined
    into one array and parsed by one call (``json.loads`` text by text spent more in its Python wrapper than in the
    parse: 2,672 records' 4-6 ms, 1.5 at once); a text that does not parse is parsed alone, to raise as it would."""
    at = [i for i, t in enumerate(texts) if t is not None]
    out = [None] * len(texts)
    try:
        values = json.loads("[" + ",".join(texts[i] for i in at) + "]")
    except ValueError:
        values = [json.loads(texts[i]) for i in at]
    if len(values) != len(at):  # (a text holding more than one value: parsed alone)
        values = [json.loads(texts[i]) for i in at]
    for i, v in zip(at, values):
        out[i] = v
    return out


def _epoch_ms(col) -> list[int]:
    """``int(ts.timestamp() * 1000)`` of each timestamp (0 if null), without a datetime per row: the
    same float operations (microseconds / 1e6, * 1000, truncated)."""
    us = np.asarray(pc.fill_null(col.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()), 0), np.int64)
    return ((us / 1e6) * 1000).astype(np.int64).tolist()


def cluster_level_recs(bronze: pa.Table, every_p0_record: bool = True) -> list[Rec]:
    """Records the timelines need: everything but partition records, plus partition 0's.  With ``every_p0_record``
    False, of partition 0's only those that can change its assignment (what caps a topic's effective min ISR,
    timelines._p0_assignment): PartitionRecords and the changes writing replicas, removing or adding replicas -- the
    ISR and leader changes, nearly all of partition 0's records, change no timeline row (0.9 of the rows kept and
    ~7 ns a record of a replay's timelines on the 1 M-partition fleet).  A caller listing the records the image
    rejects keeps them all (a change to a partition 0 that does not exist is one)."""
    kind = by_type(bronze, {**dict.fromkeys(_SKIPPED, _SKIP), "PARTITION_RECORD": _PART, PCR: _CHANGE}, _OTHER,
                   np.int8)
    p0 = column_ints(bronze.column("partition_id"), -1, np.int32) == 0
    if every_p0_record:
        p0 &= kind >= _PART
    else:
        changes = np.flatnonzero(p0 & (kind == _CHANGE))
        moved = np.zeros(len(changes), bool)
        for col in ("replicas", "removing_replicas", "adding_replicas"):
            moved |= valid_at(bronze.column(col), changes)
        p0 &= kind == _PART
        p0[changes[moved]] = True
    keep = from_numpy((kind == _OTHER) | p0)
    names = ("offset", "timestamp", "batch_base_offset", "record_type", "record_version", "data_json", "source_file")
    # partition records read without their JSON (a log directory's replay, a Spark task's, an incremental replay's
    # seed states) are rebuilt from their typed columns, filtered with the others: one filter of a table takes its
    # rows once for every column (a filter per column was 2 ns a record more, on the rows a replay reads)
    kept_parts = np.flatnonzero(p0)
    lean = bool(len(kept_parts)) and not valid_at(bronze.column("data_json"), kept_parts).all()
    rows = bronze.select(list(names) + ([c for c in _TYPED if c not in names] if lean else [])).filter(keep)
    cols = {c: rows.column(c).to_pylist() for c in names if c != "timestamp"}
    cols["timestamp"] = _epoch_ms(rows.column("timestamp"))
    parsed = _parsed(cols["data_json"])
    typed = None
    out = []
    for i in range(rows.num_rows):
        data = parsed[i]
        if data is None:  # a partition record without its JSON
            if typed is None:  # (the rows hold the typed columns when their JSON was seen missing up front)
                t = rows if lean else bronze.select(list(_TYPED)).filter(keep)
                typed = {c: t.column(c).to_pylist() for c in _TYPED}
            data = record_data({c: typed[c][i] for c in _TYPED})
        out.append(Rec(cols["offset"][i], cols["timestamp"][i], cols["batch_base_offset"][i],
                       cols["record_type"][i], cols["record_version"][i], data, cols["source_file"][i]))
    return out
